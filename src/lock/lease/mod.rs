//! Deciding that a held lock is lost (docs/design.md, "Session and lease
//! rules", which draws the timeline of a disconnection); the rule's
//! arithmetic is in `policy.rs`.

mod decide;
mod policy;

use std::time::SystemTime;

use futures::future::select_all;
use tokio::time::{Instant, sleep_until};
use zklock::zk::client::Client;

use self::decide::{Event, Verdict, decide};
pub use self::policy::{DEFAULT_KILL_AFTER, LeasePolicy, OnDisconnect};
use crate::lock::queue::NodeWatch;
use crate::report::Report;
use crate::values::{Precision, human_duration, rfc3339};

/// Why the lock was lost (shown to the user).
pub type LossReason = String;

/// When the lease may first read, and watch, a node it has no watch on yet
/// (one taken without waiting): true, or the sender dropped, means now.
/// Reading it only after zklock's acquisition write (docs/design.md,
/// "Holder data") saves a request and a watch that write would fire.
pub type WatchFrom = tokio::sync::watch::Receiver<bool>;

/// The lease deadline (docs/design.md, "Session and lease rules"): the
/// command may run until then. [`lost`] moves it with the time the server
/// last heard from the session; the command's supervisor hands it to the
/// keeper.
pub type Deadline = tokio::sync::watch::Sender<Instant>;

/// The deadline of a lock just taken, counted from when the server last
/// heard from `client`'s session (the requests that confirmed the lock).
pub fn deadline(
    client: &Client,
    policy: LeasePolicy,
) -> (Deadline, tokio::sync::watch::Receiver<Instant>) {
    tokio::sync::watch::channel(policy.deadline_after(client.heard()))
}

/// Resolves when a lock held through one of `nodes` is lost; never resolves
/// while all are held. `owner` is the session the nodes must belong to: ours,
/// or, for a nested run re-entering an enclosing run's lock, that run's.
/// Nodes without a watch are first read once `unwatched_from` says go.
/// Decides from the link's states and our nodes' events alone
/// ([`decide`]); moves `deadline` with the time the server last heard from
/// the session, and asks the server something only when nothing else has
/// been answered for [`LeasePolicy::ask_after`]. With `-v` (`report`), says
/// when the connection is lost and comes back.
#[allow(clippy::too_many_arguments)]
pub async fn lost(
    client: &Client,
    nodes: &[String],
    watches: Vec<Option<NodeWatch>>,
    unwatched_from: WatchFrom,
    policy: LeasePolicy,
    owner: i64,
    deadline: &Deadline,
    report: &Report,
) -> LossReason {
    // Moves the deadline to what the last answer allows; whether it moved.
    let renew = || {
        deadline.send_if_modified(|at| {
            let renewed = policy.deadline_after(client.heard());
            let later = renewed > *at;
            if later {
                *at = renewed;
            }
            later
        })
    };
    let verdict =
        |in_outage: bool, event: Event| decide(policy.on_disconnect, in_outage, owner, event);
    let mut link = client.link();
    // While disconnected: since when.
    let mut outage: Option<Instant> = None;
    let mut nodes_lost = Box::pin(any_node_lost(
        client,
        nodes,
        watches,
        &unwatched_from,
        policy,
        owner,
    ));
    let mut asking = None;
    loop {
        let state = link.borrow_and_update().state;
        match verdict(outage.is_some(), Event::Link(state)) {
            Verdict::Lost(reason) => return reason,
            Verdict::OutageBegins => match outage_begins(report, *deadline.borrow()) {
                Some(since) => outage = Some(since),
                None => return verdict(true, Event::DeadlinePassed).lost(),
            },
            Verdict::Restored => {
                renew();
                if let Some(since) = outage.take() {
                    report.info(format_args!(
                        "connection to ZooKeeper restored after {}; still holding",
                        human_duration(since.elapsed())
                    ));
                }
            }
            Verdict::Keep | Verdict::Watch => {}
        }
        let ask_at = client.heard() + policy.ask_after();
        let at = *deadline.borrow();
        tokio::select! {
            reason = &mut nodes_lost => return reason,
            changed = link.changed() => {
                if changed.is_err() {
                    return verdict(outage.is_some(), Event::Link(zklock::zk::client::State::Closed)).lost();
                }
            }
            // Nothing answered for a while: ask (any node will do, and
            // exists needs no permission); its answer moves the deadline.
            () = sleep_until(ask_at), if asking.is_none() && outage.is_none() => {
                renew();
                if client.heard() + policy.ask_after() <= Instant::now() {
                    asking = Some(client.call(|b| b.exists("/", false)));
                }
            }
            _ = async { asking.as_mut().expect("guarded").await }, if asking.is_some() => {
                asking = None;
                renew();
            }
            () = sleep_until(at) => {
                if !renew() {
                    return verdict(outage.is_some(), Event::DeadlinePassed).lost();
                }
            }
        }
    }
}

impl Verdict {
    fn lost(self) -> LossReason {
        match self {
            Verdict::Lost(reason) => reason,
            other => unreachable!("not a loss: {other:?}"),
        }
    }
}

/// A disconnection while holding begins: says so with `-v`, the lease
/// deadline as a time of day (UTC: the same on every host's log) and from
/// now, and returns now; None when the deadline has passed already (zklock
/// was stopped, or its process starved): no grace is left.
fn outage_begins(report: &Report, deadline: Instant) -> Option<Instant> {
    let now = Instant::now();
    let left = deadline
        .checked_duration_since(now)
        .filter(|left| !left.is_zero())?;
    let until = rfc3339(SystemTime::now() + left, Precision::Seconds);
    // `YYYY-MM-DDTHH:MM:SSZ`: the time of day is all a reader needs here.
    let time = until.get(11..19).unwrap_or(&until);
    report.info(format_args!(
        "connection to ZooKeeper lost; the lock is kept until {time} UTC ({} from now) \
         unless the connection comes back (--on-disconnect lease)",
        human_duration(left)
    ));
    Some(now)
}

/// The first of `nodes` found lost; `watches` are those already set on
/// them (by position), the rest are set here.
async fn any_node_lost(
    client: &Client,
    nodes: &[String],
    mut watches: Vec<Option<NodeWatch>>,
    unwatched_from: &WatchFrom,
    policy: LeasePolicy,
    owner: i64,
) -> LossReason {
    watches.resize_with(nodes.len(), || None);
    let checks: Vec<_> = nodes
        .iter()
        .zip(watches)
        .map(|(node, watch)| {
            let mut go = unwatched_from.clone();
            Box::pin(async move {
                if watch.is_none() {
                    // An error means the sender is gone: go.
                    let _ = go.wait_for(|go| *go).await;
                }
                node_lost(client, node, watch, policy, owner).await
            })
        })
        .collect();
    if checks.is_empty() {
        return std::future::pending().await; // select_all needs one
    }
    select_all(checks).await.0
}

/// Why a lock held through `nodes` is lost, if it is, by one round trip:
/// a release that asks first never says "released" for a lock deleted a
/// moment before, whose watch event is then still on its way.
pub async fn lost_now(client: &Client, nodes: &[String], owner: i64) -> Option<LossReason> {
    let reads = nodes
        .iter()
        .map(|node| async move { (node, client.call(|b| b.get_data(node, false)).await) });
    for (node, read) in futures::future::join_all(reads).await {
        let owner_read = (read.as_ref())
            .map(|found| found.stat.ephemeral_owner)
            .map_err(|err| *err);
        let event = Event::Read {
            node,
            owner: owner_read,
        };
        if let Verdict::Lost(reason) = decide(OnDisconnect::Lease, false, owner, event) {
            return Some(reason);
        }
    }
    None
}

/// Watches our node with a data watch (starting with `watch` if given):
/// resolves when it is deleted, found owned by a session other than
/// `owner`, or the session ends ([`decide`]).
async fn node_lost(
    client: &Client,
    node: &str,
    mut watch: Option<NodeWatch>,
    policy: LeasePolicy,
    owner: i64,
) -> LossReason {
    let verdict = |event| decide(policy.on_disconnect, false, owner, event);
    loop {
        let event = match watch.take() {
            Some(watch) => Event::Watch {
                node,
                event: watch.await.map(|fired| fired.event_type),
            },
            None => {
                let read = client.call(|b| b.get_data(node, true)).await;
                let owner = (read.as_ref())
                    .map(|found| found.stat.ephemeral_owner)
                    .map_err(|err| *err);
                if let Ok(found) = read {
                    watch = found.watch;
                }
                Event::Read { node, owner }
            }
        };
        match verdict(event) {
            Verdict::Lost(reason) => return reason,
            Verdict::Watch => watch = None,
            Verdict::Keep | Verdict::OutageBegins | Verdict::Restored => {}
        }
    }
}
