//! Taking locks in ZooKeeper: the acquire loops over the client's
//! primitives (create with Stat, list, getData watch, sync, delete), driven
//! by the pure helpers of `recipe.rs`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Waker};

use anyhow::{Context, Result, bail};
use zookeeper_client as zk;

use crate::lock::recipe::{self, LOCK, LockKind, READ, Standing, WRITE};
use crate::lock::semaphore;
use crate::session::{is_connection_loss, retrying};

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

/// Progress of a wait, for reporting.
pub trait Observer {
    fn queued(&mut self, node: &Node);
    /// `ahead` contenders precede us; `first` (a full path) holds the lock or
    /// is next. `first_data` is its node data when [`Observer::wants_data`].
    fn waiting(&mut self, ahead: usize, first: &str, first_data: Option<&[u8]>);
    /// Whether reading the first node's data (one more round trip, each time
    /// it changes) is worth it.
    fn wants_data(&self) -> bool;
    /// A semaphore's permits are all taken by `holders` leases.
    fn pool_full(&mut self, holders: usize);
}

/// A data watch on one of our nodes: resolves with the first event on it
/// (deleted, data changed, session ended). Set while waiting and handed to
/// the lease with the lock, so no request is left to make once our turn
/// comes, while the command starts.
pub type NodeWatch = Pin<Box<dyn Future<Output = zk::WatchedEvent>>>;

/// How a wait for a lock ended, short of an error.
pub enum Acquired {
    /// The lock is ours through this node, with its watch if we waited.
    Held(Node, Option<NodeWatch>),
    /// Not waiting (`--no-wait`), and the lock is taken.
    Busy,
    /// Our node vanished while we waited: the session (or the node) is lost.
    Lost,
}

/// Everything a caller needs to take one lock.
pub struct Request<'a> {
    pub client: &'a zk::Client,
    pub dir: &'a str,
    pub kind: LockKind,
    pub data: &'a [u8],
    pub wait: bool,
}

/// Takes the lock at `request.dir`. Every node created is pushed to `owned`
/// at once (and removed when we delete it), so the caller can clean up even
/// if this future is dropped at a deadline or by a signal.
pub async fn acquire(
    request: &Request<'_>,
    owned: &mut Vec<Node>,
    observer: &mut dyn Observer,
) -> Result<Acquired> {
    match request.kind {
        LockKind::Exclusive => take_turn(request, request.dir, LOCK, owned, observer).await,
        LockKind::Read => take_turn(request, request.dir, READ, owned, observer).await,
        LockKind::Write => take_turn(request, request.dir, WRITE, owned, observer).await,
        LockKind::Semaphore(limit) => {
            semaphore::acquire_permit(request, limit, owned, observer).await
        }
    }
}

/// Queues a `marker` node in `dir` and waits until nothing that excludes it
/// precedes it. Of the others, only the nearest such node is watched (a
/// data watch); our own node is watched too (see [`NodeWatch`]).
pub async fn take_turn(
    request: &Request<'_>,
    dir: &str,
    marker: &str,
    owned: &mut Vec<Node>,
    observer: &mut dyn Observer,
) -> Result<Acquired> {
    let client = request.client;
    let node = create_node(client, dir, marker, request.data).await?;
    observer.queued(&node);
    let me = node.name().to_owned();
    owned.push(node.clone());
    let mut reported_first = String::new();
    let mut own_watch = None;
    loop {
        let children = retrying(|| client.list_children(dir))
            .await
            .context("listing the lock's queue")?;
        if dir == request.dir && recipe::looks_like_semaphore(&children) {
            semaphore::refuse_as_lock(client, dir).await?;
        }
        let (predecessor, ahead, first) = match recipe::standing(&children, &me) {
            Standing::Held => break,
            Standing::Missing => return Ok(Acquired::Lost),
            Standing::Waiting {
                predecessor,
                ahead,
                first,
            } => (predecessor, ahead, format!("{dir}/{first}")),
        };
        let first_data = match observer.wants_data() && first != reported_first {
            true => client.get_data(&first).await.ok().map(|(data, _)| data),
            false => None,
        };
        observer.waiting(ahead, &first, first_data.as_deref());
        reported_first = first;
        if !request.wait {
            return Ok(Acquired::Busy);
        }
        let predecessor = format!("{dir}/{predecessor}");
        // A data watch, not an exists watch: on a node that is already gone,
        // an exists watch would stay behind on the server as a creation watch.
        let (ahead_watch, own_watch_now) = tokio::join!(
            retrying(|| client.get_and_watch_data(&predecessor)),
            watch_own(client, &node.path, own_watch.take()),
        );
        let Some(mut own_watch_now) = own_watch_now? else {
            return Ok(Acquired::Lost);
        };
        let gone = match ahead_watch {
            Err(zk::Error::NoNode) => true,
            Err(err) => return Err(err).context("watching the node ahead of us"),
            Ok((_data, _stat, watcher)) => tokio::select! {
                biased;
                _ = &mut own_watch_now => continue,
                event = watcher.changed() => event.event_type == zk::EventType::NodeDeleted,
            },
        };
        // Events come in the order of the changes they report: with none
        // for our node, it was still there when the node ahead went.
        if fired(&mut own_watch_now) {
            continue;
        }
        own_watch = Some(own_watch_now);
        // New nodes only queue behind existing ones (sequence numbers grow),
        // so what precedes ours can only shrink: when the one node ahead at
        // the last listing is gone, nothing is ahead and the lock is ours,
        // one round trip sooner than listing again. With more ahead, the one
        // we watched may have given up; on a data change or a session event
        // we know nothing new: list again.
        if gone && ahead == 1 {
            break;
        }
    }
    Ok(Acquired::Held(node, own_watch))
}

/// `existing`, or a new data watch on our node at `path`; None if the node
/// is gone (or, which cannot happen, not ours).
async fn watch_own(
    client: &zk::Client,
    path: &str,
    existing: Option<NodeWatch>,
) -> Result<Option<NodeWatch>> {
    if existing.is_some() {
        return Ok(existing);
    }
    match retrying(|| client.get_and_watch_data(path)).await {
        Ok((_, stat, watcher)) if stat.ephemeral_owner == client.session_id().0 => {
            Ok(Some(Box::pin(watcher.changed())))
        }
        Ok(_) | Err(zk::Error::NoNode) => Ok(None),
        Err(err) => Err(err).context("watching our node"),
    }
}

/// Whether the watch's event has come, without waiting for it. A watch
/// found fired is spent: drop it.
fn fired(watch: &mut NodeWatch) -> bool {
    let mut context = TaskContext::from_waker(Waker::noop());
    watch.as_mut().poll(&mut context).is_ready()
}

/// Creates our EPHEMERAL_SEQUENTIAL node `dir/_c_<uuid><marker><seq>` with
/// create2 (for the czxid), creating missing ancestors, and recovering a
/// create whose reply was lost.
pub async fn create_node(
    client: &zk::Client,
    dir: &str,
    marker: &str,
    data: &[u8],
) -> Result<Node> {
    let prefix = recipe::node_prefix(marker, &uuid::Uuid::new_v4().to_string());
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let requested = format!("{dir}/{prefix}");
    loop {
        match client.create(&requested, data, &options).await {
            Ok((stat, seq)) => {
                return Ok(Node {
                    path: format!("{requested}{seq}"),
                    czxid: stat.czxid,
                });
            }
            // The directory is missing, or a container was reaped under us.
            Err(zk::Error::NoNode) => create_ancestors(client, dir).await?,
            Err(err) if is_connection_loss(&err) => {
                if let Some(node) = find_own_node(client, dir, &prefix).await? {
                    return Ok(node);
                }
            }
            Err(err) => return Err(err).context(format!("creating a lock node under {dir}")),
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
pub async fn create_dir(client: &zk::Client, path: &str, data: &[u8]) -> Result<(), zk::Error> {
    let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
    match retrying(|| client.create(path, data, &container)).await {
        Err(zk::Error::Unimplemented) => {
            let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            retrying(|| client.create(path, data, &persistent))
                .await
                .map(drop)
        }
        result => result.map(drop),
    }
}

/// Creates `dir` and its missing ancestors, top down.
pub async fn create_ancestors(client: &zk::Client, dir: &str) -> Result<()> {
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
            match create_dir(client, ancestor, &[]).await {
                Ok(()) | Err(zk::Error::NodeExists) => created += 1,
                Err(zk::Error::NoNode) if created == 0 => {
                    return Err(anyhow::Error::new(MissingChroot))
                        .context(format!("cannot create {ancestor}"));
                }
                Err(zk::Error::NoNode) => break,
                Err(err) => return Err(err).context(format!("creating {ancestor}")),
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

pub fn parent(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((parent, _)) => parent,
    }
}
