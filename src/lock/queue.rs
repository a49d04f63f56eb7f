//! The lock loop (docs/design.md, "The lock recipe"): [`take_turn`] queues
//! a node and waits until nothing that excludes it precedes it, over the
//! pure helpers of `recipe.rs`; for exclusive, read and write locks and for
//! a semaphore's gate (`semaphore.rs`). Also the vocabulary of a wait
//! (request, outcome, events) and the watches it leaves for the lease.

use std::cell::Cell;

use anyhow::{Context, Result};
use futures::FutureExt;
use zklock::zk::client::Client;
use zklock::zk::records::{Acl, Error, EventType};
use zklock::zk::watches::Watch;

use crate::exit::Failure;
use crate::lock::holder::Seen;
use crate::lock::nodes::create_node;
pub use crate::lock::nodes::{Creating, Node, NodeSpec};
pub use crate::lock::parents::MissingChroot;
use crate::lock::parents::denied;
use crate::lock::queue_policy::{MaxWaiting, QueuePolicy, Step};
use crate::lock::recipe::{self, LockKind, Standing};
use crate::lock::supersede::{Ours, Supersede};
use crate::session::{OwnedNodes, retrying};

/// What happens in a wait, as it happens: the caller shows it (run/wait/).
pub enum QueueEvent<'a> {
    /// Our node was created.
    Queued(&'a Node),
    /// `ahead` contenders precede us; `first` (a full path) holds the lock
    /// or is next.
    Waiting { ahead: usize, first: &'a str },
    /// The node ahead of us (a full path) wrote its data: it holds the lock
    /// now, and its command runs (holder.rs).
    AheadHolds(&'a str),
    /// The node ahead of us as the read that set our watch on it found it:
    /// newer than a listener's own read if its holder wrote in between
    /// (that write then fires no watch of ours).
    AheadRead(&'a str, Seen),
    /// A semaphore's permits are all taken by this many leases.
    PoolFull(usize),
}

/// Hears a wait's [`QueueEvent`]s. The loop awaits each, so a listener may
/// read what it shows (a holder's node) before the wait goes on.
pub trait QueueEvents {
    async fn event(&mut self, event: QueueEvent<'_>);
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
    /// Our nodes in the client's session: every node created is added.
    pub owned: &'a OwnedNodes,
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
    /// Our node in `dir`, already created (and its queue not listed), if
    /// it was (`--once-per` in a fleet: run/fleet.rs).
    pub queued: Cell<Option<Node>>,
}

/// Queues a `marker` node in `dir` and waits until nothing that excludes it
/// precedes it. Of the others, only the nearest such node is watched (a
/// data watch); our own node is watched too (see [`NodeWatch`]).
pub async fn take_turn(
    request: &Request<'_>,
    dir: &str,
    marker: &str,
    events: &mut impl QueueEvents,
) -> Result<Acquired> {
    let client = request.client;
    let (node, mut listed) = enqueue(request, dir, marker, events).await?;
    let me = node.name().to_owned();
    let mut policy = policies(request, dir, &me, node.czxid);
    let mut own_watch = None;
    'queue: loop {
        let children = match listed.take() {
            Some(children) => children,
            None => list(client, dir).await?,
        };
        if dir == request.dir && recipe::looks_like_semaphore(&children) {
            refuse_as_lock(client, dir).await?;
        }
        match policy.on_listing(&children, &me).await {
            Step::Stay => {}
            Step::Relist => continue 'queue,
            end => return Ok(ended(end)),
        }
        let (predecessor, ahead) = match recipe::standing(&children, &me) {
            Standing::Held => break,
            Standing::Missing => {
                let end = policy.on_vanished(Some(&children)).await;
                return Ok(end.map_or(Acquired::Lost, ended));
            }
            Standing::Waiting {
                predecessor,
                ahead,
                first,
            } => {
                let first = recipe::child(dir, first);
                events
                    .event(QueueEvent::Waiting {
                        ahead,
                        first: &first,
                    })
                    .await;
                (recipe::child(dir, predecessor), ahead)
            }
        };
        // Not kept while we wait, which may be for hours: with 2,000 waiters
        // the listing is 2,000 names.
        drop(children);
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
                let end = policy.on_vanished(None).await;
                return Ok(end.map_or(Acquired::Lost, ended));
            };
            let event = match ahead_watch {
                Err(Error::NoNode) => None,
                Err(err) => return Err(err).context("watching the node ahead of us"),
                Ok(found) => {
                    let watcher = found.watch.expect("a watch asked for");
                    let seen = Seen::from((found.data, found.stat));
                    events
                        .event(QueueEvent::AheadRead(&predecessor, seen))
                        .await;
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
            if event != Some(EventType::NodeDataChanged) {
                break matches!(event, None | Some(EventType::NodeDeleted));
            }
            // A holder writes its node once its command runs (holder.rs):
            // the node ahead holds the lock now, so everything before it is
            // gone. With one ahead, watch it again without listing; with
            // more, list again, so that `ahead` is true when it goes.
            events.event(QueueEvent::AheadHolds(&predecessor)).await;
            if ahead > 1 {
                continue 'queue;
            }
        };
        // New nodes only queue behind existing ones (sequence numbers grow),
        // so what precedes ours can only shrink: when the one node ahead at
        // the last listing is gone, nothing is ahead and the lock is ours,
        // one round trip sooner than listing again. With more ahead, the one
        // we watched may have given up; on a session event we know nothing
        // new: list again (and always, for a policy that asks to).
        if gone && ahead == 1 && !policy.lists_before_holding() {
            break;
        }
    }
    Ok(Acquired::Held(node, own_watch))
}

/// The steps of the wait beside the recipe (queue_policy.rs): `--supersede`, then
/// `--max-waiting` (which applies only to a run that waits).
fn policies<'a>(
    request: &'a Request<'_>,
    dir: &'a str,
    me: &'a str,
    czxid: i64,
) -> impl QueuePolicy + 'a {
    let supersede = request.supersede.then(|| Supersede {
        ours: Ours {
            client: request.client,
            dir,
            me,
            age: request.first_queued.unwrap_or(czxid),
            data: request.data,
            acls: request.acls,
        },
        wait: request.wait,
        joining: true,
    });
    (
        supersede,
        MaxWaiting(request.max_waiting.filter(|_| request.wait)),
    )
}

/// How a wait ends on a policy's step.
fn ended(step: Step) -> Acquired {
    match step {
        Step::QueueFull(waiting) => Acquired::QueueFull(waiting),
        Step::Superseded(by) => Acquired::Superseded(by),
        Step::Stay | Step::Relist => unreachable!("not an end"),
    }
}

/// A listing of the queue in `dir`.
async fn list(client: &Client, dir: &str) -> Result<Vec<String>> {
    let listed = retrying(|| client.call(|b| b.get_children(dir, false)))
        .await
        .map_err(|err| denied(err, dir, "READ"))
        .context("listing the lock's queue")?;
    Ok(listed.children)
}

/// Creates our `marker` node in `dir` (added to `request.owned`); with the
/// listing of `dir` sent in the same burst, if it came back.
pub async fn enqueue(
    request: &Request<'_>,
    dir: &str,
    marker: &str,
    events: &mut impl QueueEvents,
) -> Result<(Node, Option<Vec<String>>)> {
    let spec = NodeSpec {
        dir,
        marker,
        data: request.data,
        acls: request.acls,
        list: true,
    };
    let (node, children) = match request.queued.take().filter(|_| dir == request.dir) {
        Some(node) => (node, None),
        None => {
            let first = request.first.take().filter(|_| dir == request.dir);
            create_node(request.client, request.owned, spec, first).await?
        }
    };
    events.event(QueueEvent::Queued(&node)).await;
    Ok((node, children))
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
