//! Our nodes in ZooKeeper: creating them (create2 for the czxid, missing
//! ancestors as containers under an open ACL, a create whose reply was lost recovered by
//! uuid and owner), and what their errors mean to the user.

use std::future::Future;

use anyhow::{Context, Result, bail};
use zookeeper_client as zk;

use crate::exit::{Exit, Failure};
use crate::lock::recipe::{self};
use crate::session::{Losses, is_connection_loss, retrying};

/// A node of ours, once the server has it.
#[derive(Debug, Clone)]
pub struct Node {
    /// Full path (under the chroot, as clients of the same `-z` see it).
    pub path: String,
    /// The node's czxid: strictly increasing across successive holders.
    pub czxid: i64,
}

/// The paths of `nodes`, for deleting them.
pub fn paths(nodes: &[Node]) -> Vec<&str> {
    nodes.iter().map(|node| node.path.as_str()).collect()
}

impl Node {
    pub fn name(&self) -> &str {
        self.path
            .rsplit_once('/')
            .map_or(&self.path, |(_, name)| name)
    }
}

/// Creates our EPHEMERAL_SEQUENTIAL node `dir/_c_<uuid><marker><seq>` with
/// create2 (for the czxid), creating missing ancestors, and recovering a
/// create whose reply was lost. With `list`, also the children of `dir` as
/// the server saw them right after our create, when that listing came back.
///
/// Each attempt is one burst, one round trip: ZooKeeper serves a session's
/// requests in order, so the creates of the directory and its ancestors,
/// our create, the directory's ACL (see below) and the listing are all sent
/// before any answer is awaited. Each answer is handled as the same request
/// sent alone would be; once our node is there, the ancestors' answers do
/// not matter (an existing level answers NodeExists, or NoAuth where we may
/// not create).
///
/// Containers are created in every burst: the server reaps an empty one
/// within a minute, so for a lock taken once a day a missing directory is
/// the normal case, and asking first would cost a round trip. Persistent
/// directories (see [`dir_mode`]) are created only once a create said the
/// directory is missing: they rarely are, and each level that exists costs
/// an error transaction in the server's log.
pub async fn create_node(
    client: &zk::Client,
    dir: &str,
    marker: &str,
    data: &[u8],
    acls: &[zk::Acl],
    list: bool,
) -> Result<(Node, Option<Vec<String>>)> {
    let prefix = recipe::node_prefix(marker, &uuid::Uuid::new_v4().to_string());
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(acls));
    let requested = recipe::child(dir, &prefix);
    // Our ACL keeps others from deleting our node only if the directory's
    // does too (ZooKeeper checks DELETE on the parent).
    let guarded = !anyone_may_delete(acls);
    let attempts = async {
        let mut losses = Losses::default();
        let mut missing_dirs = 0;
        let mut containers = true;
        loop {
            let ancestors = (missing_dirs > 0 || reaped(acls, containers))
                .then(|| send_ancestors(client, dir, &dir_mode(acls, containers)));
            let created = client.create(&requested, data, &options);
            let dir_acl = guarded.then(|| client.get_acl(dir));
            let children = list.then(|| client.list_children(dir));
            match created.await {
                Ok((stat, seq)) => {
                    let node = Node {
                        path: format!("{requested}{seq}"),
                        czxid: stat.czxid,
                    };
                    if let Some(dir_acl) = dir_acl {
                        refuse_open_dir(client, dir, dir_acl.await, &node).await?;
                    }
                    // A listing that failed is made again by the caller.
                    let children = match children {
                        Some(children) => children.await.ok(),
                        None => None,
                    };
                    return Ok((node, children));
                }
                // The ancestors' creates said why the directory is missing, or
                // a container was reaped under us: the next burst tries again.
                Err(zk::Error::NoNode) => {
                    match futures::future::OptionFuture::from(ancestors).await {
                        None | Some(Ok(_)) => {}
                        // A server without containers: persistent directories.
                        Some(Err(None)) => containers = false,
                        Some(Err(Some(err))) => return Err(err),
                    }
                    missing_dirs += 1;
                    if missing_dirs > ANCESTOR_ATTEMPTS {
                        bail!("cannot create {dir}: its parents keep disappearing");
                    }
                }
                Err(err) if is_connection_loss(&err) => {
                    losses
                        .lost()
                        .with_context(|| format!("creating a lock node under {dir}"))?;
                    if let Some(node) = find_own_node(client, dir, &prefix).await? {
                        if guarded {
                            refuse_open_dir(client, dir, Err(zk::Error::ConnectionLoss), &node)
                                .await?;
                        }
                        return Ok((node, None));
                    }
                }
                Err(err) => {
                    return Err(denied(err, dir, "CREATE"))
                        .context(format!("creating a lock node under {dir}"));
                }
            }
        }
    };
    let created: Result<_> = attempts.await;
    // Directories under any other ACL are persistent: they stay anyway.
    if created.is_err() && is_open(acls) {
        let_go_of_unused_dir(client, dir, &prefix, acls).await;
    }
    created
}

/// The server reaps an empty container only once it has had a child, so a
/// directory our burst created ahead of a create of ours that then failed
/// would stay for good. A child created and deleted again lets it go; on a
/// directory that is not a container, or not ours, that changes nothing. The
/// child's name ends in no sequence number: no contender, for any recipe.
/// Only for directories under the open ACL (see [`dir_mode`]).
async fn let_go_of_unused_dir(client: &zk::Client, dir: &str, prefix: &str, acls: &[zk::Acl]) {
    let Ok(Some(stat)) = retrying(|| client.check_stat(dir)).await else {
        return;
    };
    if stat.cversion != 0 || stat.num_children != 0 {
        return;
    }
    let child = recipe::child(dir, &format!("{prefix}unused"));
    let mode = zk::CreateMode::Ephemeral.with_acls(zk::Acls::new(acls));
    if retrying(|| client.create(&child, &[], &mode)).await.is_ok() {
        let _ = retrying(|| client.delete(&child, None)).await;
    }
}

/// How often the ancestors are created again when an empty container is
/// reaped between our creating it and creating its child.
const ANCESTOR_ATTEMPTS: u32 = 10;

/// Sends the creates of `dir` and its ancestors, top down, all at once (a
/// node that exists is answered NodeExists, which is fine); the future
/// awaits their answers: whether every one is there. Err(None): the server
/// has no container nodes. A NoNode answer below the top means an upper
/// directory was reaped meanwhile, and a connection loss leaves the outcome
/// open: not there, then.
fn send_ancestors<'a>(
    client: &'a zk::Client,
    dir: &'a str,
    mode: &zk::CreateOptions<'_>,
) -> impl Future<Output = Result<bool, Option<anyhow::Error>>> + use<'a> {
    let ancestors = ancestors(dir);
    let sent: Vec<_> = ancestors
        .iter()
        .map(|ancestor| client.create(ancestor, &[], mode))
        .collect();
    async move {
        let answers = futures::future::join_all(sent).await;
        let mut there = true;
        for (ancestor, answer) in ancestors.iter().zip(answers) {
            match answer {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(zk::Error::Unimplemented) => return Err(None),
                Err(zk::Error::NoNode) if ancestor == &ancestors[0] => {
                    return Err(Some(
                        anyhow::Error::new(MissingChroot)
                            .context(format!("cannot create {ancestor}")),
                    ));
                }
                Err(zk::Error::NoNode) => there = false,
                Err(err) if is_connection_loss(&err) => there = false,
                Err(err) => {
                    return Err(Some(
                        denied(err, parent(ancestor), "CREATE")
                            .context(format!("creating {ancestor}")),
                    ));
                }
            }
        }
        Ok(there)
    }
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
fn dir_mode(acls: &[zk::Acl], containers: bool) -> zk::CreateOptions<'_> {
    let mode = match reaped(acls, containers) {
        true => zk::CreateMode::Container,
        false => zk::CreateMode::Persistent,
    };
    mode.with_acls(zk::Acls::new(acls))
}

/// Whether directories are created as containers, which the server reaps
/// once empty (see [`dir_mode`]).
fn reaped(acls: &[zk::Acl], containers: bool) -> bool {
    containers && is_open(acls)
}

/// Whether `acls` gives everyone every permission (`--acl open`, the
/// default without credentials).
fn is_open(acls: &[zk::Acl]) -> bool {
    acls.iter().any(|acl| {
        acl.scheme() == "world" && acl.id() == "anyone" && acl.permission() == zk::Permission::ALL
    })
}

/// Whether `acls` lets anyone delete (world:anyone has DELETE): then the
/// ACL of the directory does not matter either.
pub fn anyone_may_delete(acls: &[zk::Acl]) -> bool {
    acls.iter().any(|acl| {
        acl.scheme() == "world"
            && acl.id() == "anyone"
            && acl.permission().has(zk::Permission::DELETE)
    })
}

/// Why the directory `dir` with this ACL does not protect its lock nodes,
/// with how to fix it; None if it does.
pub fn open_dir_problem(dir: &str, dir_acl: &[zk::Acl]) -> Option<String> {
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
async fn refuse_open_dir(
    client: &zk::Client,
    dir: &str,
    dir_acl: Result<(Vec<zk::Acl>, zk::Stat), zk::Error>,
    node: &Node,
) -> Result<()> {
    let dir_acl = match dir_acl {
        // Asked before the directory was created, or the answer was lost.
        Err(err) if err == zk::Error::NoNode || is_connection_loss(&err) => {
            retrying(|| client.get_acl(dir)).await
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
    let _ = retrying(|| client.delete(&node.path, None)).await;
    Err(Failure::usage(problem))
}

/// After a create's outcome was lost: sync so our read sees every write the
/// server acknowledged, then adopt the child carrying our uuid, but only if
/// this session owns it.
async fn find_own_node(client: &zk::Client, dir: &str, prefix: &str) -> Result<Option<Node>> {
    retrying(|| client.sync(dir))
        .await
        .context("syncing the lock directory")?;
    let children = match retrying(|| client.list_children(dir)).await {
        Err(zk::Error::NoNode) => return Ok(None),
        result => result.context("listing the lock directory")?,
    };
    for name in children.iter().filter(|c| c.starts_with(prefix)) {
        let path = format!("{dir}/{name}");
        match retrying(|| client.get_data(&path)).await {
            Ok((_, stat)) if stat.ephemeral_owner == client.session_id().0 => {
                return Ok(Some(Node {
                    path,
                    czxid: stat.czxid,
                }));
            }
            Ok(_) | Err(zk::Error::NoNode) => {}
            Err(err) => return Err(err).context("reading a lock node"),
        }
    }
    Ok(None)
}

/// Creates a directory node (see [`dir_mode`]).
pub async fn create_dir(
    client: &zk::Client,
    path: &str,
    data: &[u8],
    acls: &[zk::Acl],
) -> Result<(), zk::Error> {
    match retrying(|| client.create(path, data, &dir_mode(acls, true))).await {
        // A server without containers.
        Err(zk::Error::Unimplemented) => {
            retrying(|| client.create(path, data, &dir_mode(acls, false))).await
        }
        result => result,
    }
    .map(drop)
}

/// Creates `dir` and its missing ancestors, all in one burst; again while an
/// empty container is reaped between our creating it and creating its child.
pub async fn create_ancestors(client: &zk::Client, dir: &str, acls: &[zk::Acl]) -> Result<()> {
    let mut containers = true;
    for _attempt in 0..ANCESTOR_ATTEMPTS {
        match send_ancestors(client, dir, &dir_mode(acls, containers)).await {
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
pub fn denied(err: zk::Error, path: &str, permission: &str) -> anyhow::Error {
    match err {
        zk::Error::NoAuth => Failure::new(
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

    fn acl(scheme: &str, id: &str, perms: zk::Permission) -> zk::Acl {
        zk::Acl::new(perms, zk::AuthId::new(scheme, id))
    }

    #[test]
    fn open_acls_and_directories_anyone_may_delete_from() {
        let open = [acl("world", "anyone", zk::Permission::ALL)];
        let creator = [
            acl("auth", "", zk::Permission::ALL),
            acl("world", "anyone", zk::Permission::READ),
        ];
        let deletable = [
            acl("sasl", "backup", zk::Permission::ALL),
            acl(
                "world",
                "anyone",
                zk::Permission::READ | zk::Permission::DELETE,
            ),
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
