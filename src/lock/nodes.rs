//! Our nodes in ZooKeeper: creating them (create2 for the czxid, missing
//! ancestors with them, see `parents.rs`; a create whose reply was lost
//! recovered by uuid and owner).

use anyhow::{Context, Result, bail};
use zklock::zk::burst::{Burst, Children, Created, Pending};
use zklock::zk::client::Client;
use zklock::zk::ops::CreateMode;
use zklock::zk::records::{Acl, Error, Stat};

use crate::lock::parents::{
    ANCESTOR_ATTEMPTS, add_ancestors, ancestors_there, anyone_may_delete, denied, dir_mode,
    is_open, let_go_of_unused_dir, reaped, refuse_open_dir,
};
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
