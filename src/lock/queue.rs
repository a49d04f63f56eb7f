//! The lock loop (docs/design.md, "The lock recipe"): [`take_turn`] queues
//! a node and waits until nothing that excludes it precedes it, over the
//! pure helpers of `recipe.rs`; for exclusive, read and write locks and for
//! a semaphore's gate (`semaphore.rs`). Also the vocabulary of a wait
//! (request, outcome, observer) and the watches it leaves for the lease.

use std::cell::Cell;

use anyhow::{Context, Result};
use futures::FutureExt;
use zklock::zk::client::Client;
use zklock::zk::records::{Acl, Error, EventType};
use zklock::zk::watches::Watch;

use crate::exit::Failure;
use crate::lock::holder::Seen;
pub use crate::lock::nodes::{Creating, MissingChroot, Node, NodeSpec, paths};
use crate::lock::nodes::{create_node, denied};
use crate::lock::recipe::{self, LockKind, Standing};
use crate::lock::supersede::{self, Ours, Queueing};
use crate::session::retrying;

/// Progress of a wait, for reporting.
pub trait Observer {
    fn queued(&mut self, node: &Node);
    /// `ahead` contenders precede us; `first` (a full path) holds the lock or
    /// is next. `first_data` is its node as read when [`Observer::wants_data`].
    fn waiting(&mut self, ahead: usize, first: &str, first_data: Option<&Seen>);
    /// Whether reading the first node's data (one more round trip, each time
    /// it changes, and a listing when the node ahead of us takes the lock)
    /// is worth it.
    fn wants_data(&self) -> bool;
    /// A semaphore's permits are all taken by `holders` leases.
    fn pool_full(&mut self, holders: usize);
}

/// A data watch on one of our nodes: resolves with the first event on it
/// (deleted, data changed) or why the session ended. Set while waiting and
/// handed to the lease with the lock, so no request is left to make once
/// our turn comes, while the command starts.
pub type NodeWatch = Watch;

/// How a wait for a lock ended, short of an error.
pub enum Acquired {
    /// The lock is ours through this node, with its watch if we waited.
    Held(Node, Option<NodeWatch>),
    /// Not waiting (`--no-wait`), and the lock is taken.
    Busy,
    /// Our node vanished while we waited: the session (or the node) is lost.
    Lost,
    /// Not joining (`--max-waiting`): this many runs were already waiting
    /// ahead of our node, which is deleted with the session.
    QueueFull(usize),
    /// A newer `--supersede` run removed our node, or is known to have
    /// queued since we first did (we have --supersede too); its node or
    /// record as read, for people (supersede.rs).
    Superseded(Option<Seen>),
}

/// Everything a caller needs to take one lock.
pub struct Request<'a> {
    pub client: &'a Client,
    pub dir: &'a str,
    pub kind: LockKind,
    pub data: &'a [u8],
    pub wait: bool,
    /// Join only a queue with fewer than this many waiting ahead of us
    /// (`--max-waiting`); checked on the listing that comes with our create.
    pub max_waiting: Option<u32>,
    /// `--supersede`: on queueing, remove the older waiting such runs.
    pub supersede: bool,
    /// With `supersede`, queueing again: the czxid of the run's first node,
    /// also in `data` (holder.rs). The run's age (supersede.rs).
    pub first_queued: Option<i64>,
    /// The ACL of every node created, containers included.
    pub acls: &'a [Acl],
    /// Our node's first attempt, already sent in the session's first
    /// burst (for `dir` only), if it was.
    pub first: Cell<Option<Creating>>,
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
    let (node, mut listed) = enqueue(request, dir, marker, owned, observer).await?;
    let me = node.name().to_owned();
    let mut reported_first = String::new();
    let mut max_waiting = request.max_waiting.filter(|_| request.wait);
    let mut own_watch = None;
    // Only when we queue: later waiters queue behind us and remove us.
    let mut supersede = request.supersede;
    let ours = Ours {
        client,
        dir,
        me: &me,
        age: request.first_queued.unwrap_or(node.czxid),
        data: request.data,
        acls: request.acls,
    };
    'queue: loop {
        let children = match listed.take() {
            Some(children) => children,
            None => {
                retrying(|| client.call(|b| b.get_children(dir, false)))
                    .await
                    .map_err(|err| denied(err, dir, "READ"))
                    .context("listing the lock's queue")?
                    .children
            }
        };
        if dir == request.dir && recipe::looks_like_semaphore(&children) {
            refuse_as_lock(client, dir).await?;
        }
        if std::mem::take(&mut supersede) {
            match supersede::queueing(&ours, &children, request.wait).await {
                Queueing::Kept => {}
                Queueing::Removed => continue 'queue,
                Queueing::Superseded(by) => return Ok(Acquired::Superseded(by)),
            }
        }
        // Only as we join: a run already in the queue stays in it.
        if let Some(limit) = max_waiting.take()
            && let Some(waiting) = queue_full(limit, &children, &me)
        {
            return Ok(Acquired::QueueFull(waiting));
        }
        let (predecessor, ahead, first) = match recipe::standing(&children, &me) {
            Standing::Held => break,
            Standing::Missing => {
                return Ok(lost(request, &ours, Some(&children)).await);
            }
            Standing::Waiting {
                predecessor,
                ahead,
                first,
            } => (
                recipe::child(dir, predecessor),
                ahead,
                recipe::child(dir, first),
            ),
        };
        // Not kept while we wait, which may be for hours: with 2,000 waiters
        // the listing is 2,000 names.
        drop(children);
        let first_data = match observer.wants_data() && first != reported_first {
            true => (client.call(|b| b.get_data(&first, false)).await)
                .ok()
                .map(|found| Seen::from((found.data, found.stat))),
            false => None,
        };
        observer.waiting(ahead, &first, first_data.as_ref());
        reported_first = first;
        if !request.wait {
            return Ok(Acquired::Busy);
        }
        let gone = loop {
            // A data watch, not an exists watch: on a node that is already
            // gone, an exists watch would stay behind on the server as a
            // creation watch.
            let (ahead_watch, own_watch_now) = tokio::join!(
                retrying(|| client.call(|b| b.get_data(&predecessor, true))),
                watch_own(client, &node.path, own_watch.take()),
            );
            let Some(mut own_watch_now) = own_watch_now? else {
                return Ok(lost(request, &ours, None).await);
            };
            let event = match ahead_watch {
                Err(Error::NoNode) => None,
                Err(err) => return Err(err).context("watching the node ahead of us"),
                Ok(found) => {
                    let watcher = found.watch.expect("a watch asked for");
                    tokio::select! {
                        biased;
                        _ = &mut own_watch_now => continue 'queue,
                        event = watcher => match event {
                            Ok(event) => Some(event.event_type),
                            Err(err) => return Err(err).context("waiting for the node ahead of us"),
                        },
                    }
                }
            };
            // Events come in the order of the changes they report: with none
            // for our node, it was still there when the node ahead went.
            // A watch found fired is spent: drop it.
            if (&mut own_watch_now).now_or_never().is_some() {
                continue 'queue;
            }
            own_watch = Some(own_watch_now);
            // A holder writes its node once its command runs (holder.rs):
            // the node is still there, so watch it again without listing.
            if event != Some(EventType::NodeDataChanged) {
                break matches!(event, None | Some(EventType::NodeDeleted));
            }
            // That write means the node ahead now holds the lock: everything
            // before it is gone. To report who holds it, list again and read
            // the new first node once (the holder writes once per hold).
            if observer.wants_data() {
                reported_first.clear();
                continue 'queue;
            }
        };
        // New nodes only queue behind existing ones (sequence numbers grow),
        // so what precedes ours can only shrink: when the one node ahead at
        // the last listing is gone, nothing is ahead and the lock is ours,
        // one round trip sooner than listing again. With more ahead, the one
        // we watched may have given up; on a session event we know nothing
        // new: list again. A --supersede run lists anyway: after a
        // reconnection, the event for our own node (removed by a newer run)
        // may come after the answer that the node ahead is gone, and a
        // stale run must not start its command at all.
        if gone && ahead == 1 && !request.supersede {
            break;
        }
    }
    Ok(Acquired::Held(node, own_watch))
}

/// Our node vanished while we waited: the session (or the node) is lost,
/// unless a `--supersede` run knows a newer one (supersede.rs).
async fn lost(request: &Request<'_>, ours: &Ours<'_>, children: Option<&[String]>) -> Acquired {
    if !request.supersede {
        return Acquired::Lost;
    }
    match supersede::lost(ours, children).await {
        Some(by) => Acquired::Superseded(Some(by)),
        None => Acquired::Lost,
    }
}

/// Creates our `marker` node in `dir` and owns it at once (see
/// `lock::acquire`); with the listing of `dir` sent in the same burst, if it
/// came back.
pub async fn enqueue(
    request: &Request<'_>,
    dir: &str,
    marker: &str,
    owned: &mut Vec<Node>,
    observer: &mut dyn Observer,
) -> Result<(Node, Option<Vec<String>>)> {
    let spec = NodeSpec {
        dir,
        marker,
        data: request.data,
        acls: request.acls,
        list: true,
    };
    let first = request.first.take().filter(|_| dir == request.dir);
    let (node, children) = create_node(request.client, spec, first).await?;
    observer.queued(&node);
    owned.push(node.clone());
    Ok((node, children))
}

/// With `--max-waiting limit`, on the first listing after we queued: how
/// many runs wait ahead of us, if that is `limit` or more and we would wait
/// (a free lock is taken, even with 0). Our node exists at that listing, so
/// every node counted really is ahead of us.
fn queue_full(limit: u32, children: &[String], me: &str) -> Option<usize> {
    let waiting = recipe::waiting_ahead(children, me);
    let would_wait = matches!(recipe::standing(children, me), Standing::Waiting { .. });
    (would_wait && waiting >= limit as usize).then_some(waiting)
}

/// `existing`, or a new data watch on our node at `path`; None if the node
/// is gone (or, which cannot happen, not ours).
async fn watch_own(
    client: &Client,
    path: &str,
    existing: Option<NodeWatch>,
) -> Result<Option<NodeWatch>> {
    if existing.is_some() {
        return Ok(existing);
    }
    match retrying(|| client.call(|b| b.get_data(path, true))).await {
        Ok(found) if found.stat.ephemeral_owner == client.session_id() => Ok(found.watch),
        Ok(_) | Err(Error::NoNode) => Ok(None),
        Err(err) => Err(err).context("watching our node"),
    }
}

/// A plain lock asked for on a semaphore's path would not exclude the
/// semaphore's holders: refuse it, saying what the path is.
async fn refuse_as_lock(client: &Client, dir: &str) -> Result<()> {
    let limit = retrying(|| client.call(|b| b.get_data(dir, false)))
        .await
        .ok()
        .and_then(|found| recipe::decode_limit(&found.data));
    match limit {
        Some(limit) => Err(Failure::usage(format!(
            "{dir} is a semaphore of {limit}; take it with --limit {limit}"
        ))),
        // A plain lock that merely has a child named like a semaphore's.
        None => Ok(()),
    }
}
