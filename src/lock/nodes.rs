//! Our nodes in ZooKeeper: creating them (create2 for the czxid, missing
//! ancestors as containers under an open ACL, a create whose reply was lost recovered by
//! uuid and owner), and what their errors mean to the user.

use anyhow::{Context, Result, bail};
use zklock::zk::burst::{Burst, Children, Created, Pending};
use zklock::zk::client::Client;
use zklock::zk::ops::CreateMode;
use zklock::zk::records::{Acl, Error, Stat, perms};

use crate::exit::{Exit, Failure};
use crate::lock::recipe::{self};
pub use crate::session::Node;
use crate::session::{Losses, OwnedNodes, is_connection_loss, retrying};

/// One attempt at creating our node, sent and not yet answered: the
/// requests of one burst (see [`create_node`]).
pub struct Creating {
    prefix: String,
    /// The creates of the directory's levels, when sent, and how.
    ancestors: Option<(Vec<Pending<Created>>, bool)>,
    created: Pending<Created>,
    dir_acl: Option<Pending<(Vec<Acl>, Stat)>>,
    children: Option<Pending<Children>>,
}

/// What our node is made of.
#[derive(Clone, Copy)]
pub struct NodeSpec<'a> {
    pub dir: &'a str,
    pub marker: &'a str,
    pub data: &'a [u8],
    pub acls: &'a [Acl],
    /// Whether the listing of `dir` goes in the burst too.
    pub list: bool,
}

impl NodeSpec<'_> {
    /// Adds the first attempt's requests to `burst` (a session's first
    /// burst, written with its handshake), for [`create_node`].
    pub fn first_attempt(&self, burst: &mut Burst) -> Creating {
        let prefix = recipe::node_prefix(self.marker, &uuid::Uuid::new_v4().to_string());
        self.attempt(burst, prefix, reaped(self.acls, true).then_some(true))
    }

    /// Adds one attempt to `burst`: with `ancestors` (whether as
    /// containers), the creates of the directory's levels first.
    fn attempt(&self, burst: &mut Burst, prefix: String, ancestors: Option<bool>) -> Creating {
        let requested = recipe::child(self.dir, &prefix);
        let ancestors = ancestors.map(|containers| {
            let mode = dir_mode(self.acls, containers);
            (add_ancestors(burst, self.dir, self.acls, mode), containers)
        });
        let created = burst.create(
            &requested,
            self.data,
            self.acls,
            CreateMode::EphemeralSequential,
        );
        // Our ACL keeps others from deleting our node only if the
        // directory's does too (ZooKeeper checks DELETE on the parent).
        let dir_acl = (!anyone_may_delete(self.acls)).then(|| burst.get_acl(self.dir));
        let children = self.list.then(|| burst.get_children(self.dir, false));
        Creating {
            prefix,
            ancestors,
            created,
            dir_acl,
            children,
        }
    }
}

/// Creates our EPHEMERAL_SEQUENTIAL node `dir/_c_<uuid><marker><seq>` with
/// create2 (for the czxid), creating missing ancestors, and recovering a
/// create whose reply was lost. With `spec.list`, also the children of
/// `dir` as the server saw them right after our create, when that listing
/// came back. `first` is an attempt already sent (in the session's first
/// burst), if any. The node is added to `owned` as soon as the server has
/// it, so that the session's end deletes it whatever happens next.
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
    client: &Client,
    owned: &OwnedNodes,
    spec: NodeSpec<'_>,
    first: Option<Creating>,
) -> Result<(Node, Option<Vec<String>>)> {
    let dir = spec.dir;
    let mut prefix = None;
    let attempts = async {
        let mut losses = Losses::default();
        let mut missing_dirs = 0;
        let mut containers = true;
        let mut next = first;
        loop {
            let made = tokio::time::Instant::now();
            let attempt = match next.take() {
                Some(sent) => sent,
                None => {
                    let mut burst = Burst::default();
                    let ancestors =
                        (missing_dirs > 0 || reaped(spec.acls, containers)).then_some(containers);
                    let own = prefix.clone().unwrap_or_else(|| {
                        recipe::node_prefix(spec.marker, &uuid::Uuid::new_v4().to_string())
                    });
                    let attempt = spec.attempt(&mut burst, own, ancestors);
                    client.send(burst);
                    attempt
                }
            };
            let Creating {
                prefix: own,
                ancestors,
                created,
                dir_acl,
                children,
            } = attempt;
            prefix = Some(own.clone());
            match created.await {
                Ok(created) => {
                    let node = Node {
                        path: created.path,
                        czxid: created.stat.czxid,
                    };
                    owned.add(&node);
                    if let Some(dir_acl) = dir_acl {
                        refuse_open_dir(client, dir, dir_acl.await, &node).await?;
                    }
                    // A listing that failed is made again by the caller.
                    let children = match children {
                        Some(children) => children.await.ok().map(|c| c.children),
                        None => None,
                    };
                    return Ok((node, children));
                }
                // The ancestors' creates said why the directory is missing, or
                // a container was reaped under us: the next burst tries again.
                Err(Error::NoNode) => {
                    if let Some((sent, as_containers)) = ancestors {
                        match ancestors_there(dir, sent).await {
                            Ok(_) => {}
                            // A server without containers: persistent directories.
                            Err(None) if as_containers => containers = false,
                            Err(None) => {}
                            Err(Some(err)) => return Err(err),
                        }
                    }
                    missing_dirs += 1;
                    if missing_dirs > ANCESTOR_ATTEMPTS {
                        bail!("cannot create {dir}: its parents keep disappearing");
                    }
                }
                Err(err) if is_connection_loss(&err) => {
                    losses
                        .lost(made)
                        .with_context(|| format!("creating a lock node under {dir}"))?;
                    if let Some(node) = find_own_node(client, dir, &own).await? {
                        owned.add(&node);
                        if !anyone_may_delete(spec.acls) {
                            refuse_open_dir(client, dir, Err(Error::ConnectionLoss), &node).await?;
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
    if created.is_err() && is_open(spec.acls) {
        let prefix = prefix.unwrap_or_default();
        let_go_of_unused_dir(client, dir, &prefix, spec.acls).await;
    }
    created
}

/// The server reaps an empty container only once it has had a child, so a
/// directory our burst created ahead of a create of ours that then failed
/// would stay for good. A child created and deleted again lets it go; on a
/// directory that is not a container, or not ours, that changes nothing. The
/// child's name ends in no sequence number: no contender, for any recipe.
/// Only for directories under the open ACL (see [`dir_mode`]).
async fn let_go_of_unused_dir(client: &Client, dir: &str, prefix: &str, acls: &[Acl]) {
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
const ANCESTOR_ATTEMPTS: u32 = 10;

/// Adds the creates of `dir` and its ancestors to `burst`, top down (a
/// node that exists is answered NodeExists, which is fine).
fn add_ancestors(
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
async fn ancestors_there(
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
fn dir_mode(acls: &[Acl], containers: bool) -> CreateMode {
    match reaped(acls, containers) {
        true => CreateMode::Container,
        false => CreateMode::Persistent,
    }
}

/// Whether directories are created as containers, which the server reaps
/// once empty (see [`dir_mode`]).
fn reaped(acls: &[Acl], containers: bool) -> bool {
    containers && is_open(acls)
}

/// Whether `acls` gives everyone every permission (`--acl open`, the
/// default without credentials).
fn is_open(acls: &[Acl]) -> bool {
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
async fn refuse_open_dir(
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

/// After a create's outcome was lost: sync so our read sees every write the
/// server acknowledged, then adopt the child carrying our uuid, but only if
/// this session owns it.
async fn find_own_node(client: &Client, dir: &str, prefix: &str) -> Result<Option<Node>> {
    retrying(|| client.call(|b| b.sync(dir)))
        .await
        .context("syncing the lock directory")?;
    let children = match retrying(|| client.call(|b| b.get_children(dir, false))).await {
        Err(Error::NoNode) => return Ok(None),
        result => result.context("listing the lock directory")?.children,
    };
    for name in children.iter().filter(|c| c.starts_with(prefix)) {
        let path = format!("{dir}/{name}");
        match retrying(|| client.call(|b| b.get_data(&path, false))).await {
            Ok(found) if found.stat.ephemeral_owner == client.session_id() => {
                return Ok(Some(Node {
                    path,
                    czxid: found.stat.czxid,
                }));
            }
            Ok(_) | Err(Error::NoNode) => {}
            Err(err) => return Err(err).context("reading a lock node"),
        }
    }
    Ok(None)
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
