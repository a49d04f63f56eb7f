//! Our nodes in ZooKeeper: creating them (create2 for the czxid, missing
//! ancestors as containers, a create whose reply was lost recovered by
//! uuid and owner), and what their errors mean to the user.

use anyhow::{Context, Result, bail};
use zookeeper_client as zk;

use crate::exit::{ErrorKind, Failure};
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
/// create whose reply was lost.
pub async fn create_node(
    client: &zk::Client,
    dir: &str,
    marker: &str,
    data: &[u8],
    acls: &[zk::Acl],
) -> Result<Node> {
    let prefix = recipe::node_prefix(marker, &uuid::Uuid::new_v4().to_string());
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(acls));
    let requested = format!("{dir}/{prefix}");
    let mut losses = Losses::default();
    loop {
        match client.create(&requested, data, &options).await {
            Ok((stat, seq)) => {
                return Ok(Node {
                    path: format!("{requested}{seq}"),
                    czxid: stat.czxid,
                });
            }
            // The directory is missing, or a container was reaped under us.
            Err(zk::Error::NoNode) => create_ancestors(client, dir, acls).await?,
            Err(err) if is_connection_loss(&err) => {
                losses
                    .lost()
                    .with_context(|| format!("creating a lock node under {dir}"))?;
                if let Some(node) = find_own_node(client, dir, &prefix).await? {
                    return Ok(node);
                }
            }
            Err(err) => {
                return Err(denied(err, dir, "CREATE"))
                    .context(format!("creating a lock node under {dir}"));
            }
        }
    }
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

/// Creates a directory node as a container (the server deletes it once it
/// is empty again), or as a persistent node on servers without containers.
pub async fn create_dir(
    client: &zk::Client,
    path: &str,
    data: &[u8],
    acls: &[zk::Acl],
) -> Result<(), zk::Error> {
    let container = zk::CreateMode::Container.with_acls(zk::Acls::new(acls));
    match retrying(|| client.create(path, data, &container)).await {
        Err(zk::Error::Unimplemented) => {
            let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::new(acls));
            retrying(|| client.create(path, data, &persistent))
                .await
                .map(drop)
        }
        result => result.map(drop),
    }
}

/// Creates `dir` and its missing ancestors, top down.
pub async fn create_ancestors(client: &zk::Client, dir: &str, acls: &[zk::Acl]) -> Result<()> {
    let ancestors: Vec<&str> = dir
        .match_indices('/')
        .skip(1)
        .map(|(i, _)| &dir[..i])
        .chain([dir])
        .collect();
    // An empty container can be reaped between our creating it and creating
    // its child; starting over a few times outlasts that race.
    for _attempt in 0..10 {
        let mut created = 0;
        for &ancestor in &ancestors {
            match create_dir(client, ancestor, &[], acls).await {
                Ok(()) | Err(zk::Error::NodeExists) => created += 1,
                Err(zk::Error::NoNode) if created == 0 => {
                    return Err(anyhow::Error::new(MissingChroot))
                        .context(format!("cannot create {ancestor}"));
                }
                Err(zk::Error::NoNode) => break,
                Err(err) => {
                    return Err(denied(err, parent(ancestor), "CREATE"))
                        .context(format!("creating {ancestor}"));
                }
            }
        }
        if created == ancestors.len() {
            return Ok(());
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
            ErrorKind::NoPermission,
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
