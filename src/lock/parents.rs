//! The parents of our nodes: a lock's directory and its ancestors,
//! created as containers under an open ACL (the server reaps them once
//! empty) and as persistent nodes under any other; a directory whose ACL
//! lets anyone delete our nodes refused; and what a refusal of the server
//! means to the user.

use anyhow::{Result, bail};
use zklock::zk::burst::{Burst, Created, Pending};
use zklock::zk::client::Client;
use zklock::zk::ops::CreateMode;
use zklock::zk::records::{Acl, Error, Stat, perms};

use crate::exit::{Exit, Failure};
use crate::lock::recipe;
use crate::session::{Node, is_connection_loss, retrying};

/// The server reaps an empty container only once it has had a child, so a
/// directory our burst created ahead of a create of ours that then failed
/// would stay for good. A child created and deleted again lets it go; on a
/// directory that is not a container, or not ours, that changes nothing. The
/// child's name ends in no sequence number: no contender, for any recipe.
/// Only for directories under the open ACL (see [`dir_mode`]).
pub(super) async fn let_go_of_unused_dir(client: &Client, dir: &str, prefix: &str, acls: &[Acl]) {
    let Ok(found) = retrying(|| client.call(|b| b.exists(dir, false))).await else {
        return;
    };
    let Some(stat) = found.stat else { return };
    if stat.cversion != 0 || stat.num_children != 0 {
        return;
    }
    let child = recipe::child(dir, &format!("{prefix}unused"));
    let create = || client.call(|b| b.create(&child, &[], acls, CreateMode::Ephemeral));
    if retrying(create).await.is_ok() {
        let _ = retrying(|| client.call(|b| b.delete(&child, -1))).await;
    }
}

/// How often the ancestors are created again when an empty container is
/// reaped between our creating it and creating its child.
pub(super) const ANCESTOR_ATTEMPTS: u32 = 10;

/// Adds the creates of `dir` and its ancestors to `burst`, top down (a
/// node that exists is answered NodeExists, which is fine).
pub(super) fn add_ancestors(
    burst: &mut Burst,
    dir: &str,
    acls: &[Acl],
    mode: CreateMode,
) -> Vec<Pending<Created>> {
    (ancestors(dir).into_iter())
        .map(|ancestor| burst.create(ancestor, &[], acls, mode))
        .collect()
}

/// The answers to [`add_ancestors`]: whether every level is there.
/// Err(None): the server has no container nodes. A NoNode answer below the
/// top means an upper directory was reaped meanwhile, and a connection loss
/// leaves the outcome open: not there, then.
pub(super) async fn ancestors_there(
    dir: &str,
    sent: Vec<Pending<Created>>,
) -> Result<bool, Option<anyhow::Error>> {
    let levels = ancestors(dir);
    let mut there = true;
    for (ancestor, answer) in levels.iter().zip(sent) {
        match answer.await {
            Ok(_) | Err(Error::NodeExists) => {}
            Err(Error::Unimplemented) => return Err(None),
            Err(Error::NoNode) if ancestor == &levels[0] => {
                return Err(Some(
                    anyhow::Error::new(MissingChroot).context(format!("cannot create {ancestor}")),
                ));
            }
            Err(Error::NoNode) => there = false,
            Err(err) if is_connection_loss(&err) => there = false,
            Err(err) => {
                return Err(Some(
                    denied(err, parent(ancestor), "CREATE").context(format!("creating {ancestor}")),
                ));
            }
        }
    }
    Ok(there)
}

/// `dir` and its ancestors, top down.
fn ancestors(dir: &str) -> Vec<&str> {
    dir.match_indices('/')
        .skip(1)
        .map(|(i, _)| &dir[..i])
        .chain([dir])
        .collect()
}

/// How directories are created: with an open ACL as containers (the server
/// deletes them once empty again) where the server has them; with any other
/// ACL as persistent nodes, since a container reaped and created again would
/// take the ACL of whichever identity came next (with `creator`, shutting the
/// others out), and would drop an ACL an operator set on it
/// (docs/security.md, "ACLs").
pub(super) fn dir_mode(acls: &[Acl], containers: bool) -> CreateMode {
    match reaped(acls, containers) {
        true => CreateMode::Container,
        false => CreateMode::Persistent,
    }
}

/// Whether directories are created as containers, which the server reaps
/// once empty (see [`dir_mode`]).
pub(super) fn reaped(acls: &[Acl], containers: bool) -> bool {
    containers && is_open(acls)
}

/// Whether `acls` gives everyone every permission (`--acl open`, the
/// default without credentials).
pub(super) fn is_open(acls: &[Acl]) -> bool {
    (acls.iter()).any(|acl| is_anyone(acl) && acl.perms == perms::ALL)
}

fn is_anyone(acl: &Acl) -> bool {
    acl.scheme == "world" && acl.id == "anyone"
}

/// Whether `acls` lets anyone delete (world:anyone has DELETE): then the
/// ACL of the directory does not matter either.
pub fn anyone_may_delete(acls: &[Acl]) -> bool {
    (acls.iter()).any(|acl| is_anyone(acl) && acl.perms & perms::DELETE != 0)
}

/// Why the directory `dir` with this ACL does not protect its lock nodes,
/// with how to fix it; None if it does.
pub fn open_dir_problem(dir: &str, dir_acl: &[Acl]) -> Option<String> {
    anyone_may_delete(dir_acl).then(|| {
        format!(
            "anyone may delete the lock nodes in {dir}: its ACL grants DELETE to \
             world:anyone, so no holder is safe; give it an ACL that grants DELETE only to \
             the identities taking the lock (zkCli: setAcl {dir} SCHEME:ID:cdrwa,world:anyone:r), \
             or use it as it is with --acl open"
        )
    })
}

/// Refuses (usage error) a directory whose ACL lets anyone delete `node`,
/// after deleting `node`. `dir_acl` is the answer to the request sent with
/// the create; asked again if that did not tell.
pub(super) async fn refuse_open_dir(
    client: &Client,
    dir: &str,
    dir_acl: Result<(Vec<Acl>, Stat), Error>,
    node: &Node,
) -> Result<()> {
    let dir_acl = match dir_acl {
        // Asked before the directory was created, or the answer was lost.
        Err(err) if err == Error::NoNode || is_connection_loss(&err) => {
            retrying(|| client.call(|b| b.get_acl(dir))).await
        }
        other => other,
    };
    // Without READ (or ADMIN) on the directory the listing fails next and
    // says so.
    let Ok((dir_acl, _)) = dir_acl else {
        return Ok(());
    };
    let Some(problem) = open_dir_problem(dir, &dir_acl) else {
        return Ok(());
    };
    let _ = retrying(|| client.call(|b| b.delete(&node.path, -1))).await;
    Err(Failure::usage(problem))
}

/// Creates a directory node (see [`dir_mode`]).
pub async fn create_dir(
    client: &Client,
    path: &str,
    data: &[u8],
    acls: &[Acl],
) -> Result<(), Error> {
    let create = |mode| retrying(move || client.call(|b| b.create(path, data, acls, mode)));
    match create(dir_mode(acls, true)).await {
        // A server without containers.
        Err(Error::Unimplemented) => create(dir_mode(acls, false)).await,
        result => result,
    }
    .map(drop)
}

/// Creates `dir` and its missing ancestors, all in one burst; again while an
/// empty container is reaped between our creating it and creating its child.
pub async fn create_ancestors(client: &Client, dir: &str, acls: &[Acl]) -> Result<()> {
    let mut containers = true;
    for _attempt in 0..ANCESTOR_ATTEMPTS {
        let mut burst = Burst::default();
        let sent = add_ancestors(&mut burst, dir, acls, dir_mode(acls, containers));
        client.send(burst);
        match ancestors_there(dir, sent).await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(None) => containers = false,
            Err(Some(err)) => return Err(err),
        }
    }
    bail!("cannot create {dir}: its parents keep disappearing")
}

/// The top directory of a lock path cannot be created: the chroot given
/// with -z does not exist (the caller knows which it is).
#[derive(Debug)]
pub struct MissingChroot;

impl std::fmt::Display for MissingChroot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the chroot given with -z does not exist")
    }
}

impl std::error::Error for MissingChroot {}

/// NoAuth as the failure it is for the user: the ACL of `path` denies
/// `permission` to this session's identity (exit 77); other errors as they are.
pub fn denied(err: Error, path: &str, permission: &str) -> anyhow::Error {
    match err {
        Error::NoAuth => Failure::new(
            Exit::NoPermission,
            format!("the ACL of {path} denies {permission} to this session's identity"),
        )
        .into(),
        err => err.into(),
    }
}

pub fn parent(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((parent, _)) => parent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(scheme: &str, id: &str, perms: i32) -> Acl {
        Acl {
            perms,
            scheme: scheme.to_owned(),
            id: id.to_owned(),
        }
    }

    #[test]
    fn open_acls_and_directories_anyone_may_delete_from() {
        let open = [acl("world", "anyone", perms::ALL)];
        let creator = [
            acl("auth", "", perms::ALL),
            acl("world", "anyone", perms::READ),
        ];
        let deletable = [
            acl("sasl", "backup", perms::ALL),
            acl("world", "anyone", perms::READ | perms::DELETE),
        ];
        assert!(is_open(&open) && !is_open(&creator) && !is_open(&deletable));
        assert!(anyone_may_delete(&open) && anyone_may_delete(&deletable));
        assert!(!anyone_may_delete(&creator));
        let problem = open_dir_problem("/locks/x", &deletable).unwrap();
        assert!(
            problem.contains("setAcl /locks/x") && problem.contains("--acl open"),
            "{problem}"
        );
        assert_eq!(open_dir_problem("/locks/x", &creator), None);
    }
}
