//! Deciding that a held lock is lost (docs/design.md, "Session and lease
//! rules", which draws the timeline of a disconnection); the rule's
//! arithmetic is in `policy.rs`.

mod decide;
mod policy;
mod proof;

use std::time::SystemTime;

use futures::future::select_all;
use zklock::zk::answers::MultiResult;
use zklock::zk::burst::Pending;
use zklock::zk::client::{Client, State};
use zklock::zk::clock::{Moment, sleep_until};
use zklock::zk::ops::MultiOp;
use zklock::zk::records::Error;

use self::decide::{Event, Verdict, decide};
pub use self::policy::{DEFAULT_KILL_AFTER, LeasePolicy, OnDisconnect};
use self::proof::Proof;
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
pub type Deadline = tokio::sync::watch::Sender<Moment>;

/// The deadline of a lock just taken, counted from when the server last
/// heard from `client`'s session (the requests that confirmed the lock).
pub fn deadline(
    client: &Client,
    policy: LeasePolicy,
) -> (Deadline, tokio::sync::watch::Receiver<Moment>) {
    tokio::sync::watch::channel(policy.deadline_after(client.heard()))
}

/// Resolves when a lock held through one of `nodes` is lost; never resolves
/// while all are held. `owner` is the session the nodes must belong to: ours,
/// or, for a nested run re-entering an enclosing run's lock, that run's.
/// Nodes without a watch are first read once `unwatched_from` says go.
/// Decides from the link's states, our nodes' events and the answers to
/// its confirmations ([`decide`]); moves `deadline` with the time the
/// leader is proven to have heard from the session ([`Proof`]), confirming
/// it every [`LeasePolicy::confirm_every`] with a check of our nodes, a
/// write the leader answers. With `-v` (`report`), says when the connection
/// is lost and comes back.
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
    // The lease rule in the session as first granted; a shorter one
    // granted later shortens it (`LeasePolicy::granted`).
    let first = policy;
    let mut policy = first.granted(client.link().borrow().session_timeout);
    let mut proof = Proof::new(client.heard());
    let mut told_timeout = policy.session_timeout;
    // Sets the deadline to what the proof and the granted session allow:
    // earlier too, when a shorter session was granted. Whether it moved.
    let renew = |proof: &Proof, policy: &LeasePolicy| {
        deadline.send_if_modified(|at| {
            let renewed = policy.deadline_after(proof.proven());
            let moved = renewed != *at;
            *at = renewed;
            moved
        })
    };
    let verdict = |policy: &LeasePolicy, in_outage: bool, event: Event| {
        decide(policy.on_disconnect, in_outage, owner, event)
    };
    let mut link = client.link();
    let mut losses = link.borrow().losses;
    // While disconnected: since when.
    let mut outage: Option<Moment> = None;
    let mut nodes_lost = Box::pin(any_node_lost(
        client,
        nodes,
        watches,
        &unwatched_from,
        policy,
        owner,
    ));
    let mut confirming: Option<Confirming> = None;
    let mut confirm_at = Moment::now() + policy.confirm_every();
    // The first deadline counts from the answers that found the lock ours.
    // A lock the node ahead's deletion alone made ours has none of that
    // moment: its first confirmation, sent at once (after the acquisition
    // write, which it would hold up), counts as one once answered.
    let mut found_ours = policy.confirms_at_once(proof.proven(), Moment::now());
    let mut held_back = None;
    if found_ours {
        confirm_at = Moment::now();
        held_back = Some(unwatched_from.clone());
    }
    loop {
        let now = *link.borrow_and_update();
        policy = first.granted(now.session_timeout);
        for state in states_since(&mut losses, now.losses, now.state) {
            match verdict(&policy, outage.is_some(), Event::Link(state)) {
                Verdict::Lost(reason) => return reason,
                Verdict::OutageBegins => match outage_begins(report, *deadline.borrow()) {
                    Some(since) => outage = Some(since),
                    None => return verdict(&policy, true, Event::DeadlinePassed).lost(),
                },
                Verdict::Restored => {
                    if let Some(since) = outage.take() {
                        // The lease follows a shorter session from now on.
                        let shorter = (policy.session_timeout < told_timeout).then(|| {
                            told_timeout = policy.session_timeout;
                            format!(" (session timeout now {})", human_duration(told_timeout))
                        });
                        report.info(format_args!(
                            "connection to ZooKeeper restored after {}; still holding{}",
                            human_duration(since.elapsed()),
                            shorter.unwrap_or_default()
                        ));
                    }
                }
                _ => {}
            }
        }
        if now.state == State::Connected {
            proof.proven_at(now.resumed);
            confirm_at = confirm_at.min(Moment::now() + policy.confirm_every());
        }
        renew(&proof, &policy);
        let at = *deadline.borrow();
        let stalled_at = (confirming.as_ref())
            .filter(|c| !c.left)
            .map(|c| c.sent + policy.connection_timeout);
        tokio::select! {
            reason = &mut nodes_lost => return reason,
            changed = link.changed() => {
                if changed.is_err() {
                    return verdict(&policy, outage.is_some(), Event::Link(State::Closed)).lost();
                }
            }
            () = async {
                // An error means the sender is gone: go.
                let _ = held_back.as_mut().expect("guarded").wait_for(|go| *go).await;
            }, if held_back.is_some() => held_back = None,
            () = sleep_until(confirm_at),
                if confirming.is_none() && outage.is_none() && held_back.is_none() =>
            {
                proof.mark(Moment::now(), client.heard());
                confirming = Some(Confirming::send(client, nodes, losses));
            }
            (node, result) = async { confirming.as_mut().expect("guarded").answer().await },
                if confirming.is_some() =>
            {
                let sent = confirming.take().expect("guarded").sent;
                // Only the one sent as the lease began, if answered.
                let first = std::mem::take(&mut found_ours);
                let event = Event::Confirmed { node: &node, result };
                match verdict(&policy, outage.is_some(), event) {
                    Verdict::Lost(reason) => return reason,
                    Verdict::Proven => {
                        proof.confirmed(sent, policy.proof_lag());
                        if first {
                            proof.proven_at(sent);
                        }
                        confirm_at = sent + policy.confirm_every();
                    }
                    _ => confirm_at = Moment::now(),
                }
                proof.mark(Moment::now(), client.heard());
            }
            () = sleep_until(stalled_at.unwrap_or(at)), if stalled_at.is_some() => {
                let confirm = confirming.as_mut().expect("guarded");
                confirm.left = true;
                if verdict(&policy, outage.is_some(), Event::Unanswered) == Verdict::Leave {
                    client.leave(confirm.losses);
                }
            }
            () = sleep_until(at) => {
                if !renew(&proof, &policy) {
                    return verdict(&policy, outage.is_some(), Event::DeadlinePassed).lost();
                }
            }
        }
    }
}

/// A confirmation in flight: a check of our nodes, a write the leader
/// answers (it changes nothing and fires no watch).
struct Confirming {
    sent: Moment,
    /// The connection it was written on ([`zklock::zk::client::Link::losses`]).
    losses: u64,
    /// Whether the client was asked to leave its member for it.
    left: bool,
    nodes: Vec<String>,
    answer: Pending<Vec<Result<MultiResult, Error>>>,
}

impl Confirming {
    fn send(client: &Client, nodes: &[String], losses: u64) -> Confirming {
        let checks = (nodes.iter())
            .map(|node| MultiOp::Check {
                path: node.clone(),
                version: -1,
            })
            .collect();
        Confirming {
            sent: Moment::now(),
            losses,
            left: false,
            nodes: nodes.to_vec(),
            answer: client.call(|b| b.multi(checks)),
        }
    }

    /// The node the check failed on (the first one if none), and why.
    async fn answer(&mut self) -> (String, Result<(), Error>) {
        let first = self.nodes.first().cloned().unwrap_or_default();
        match (&mut self.answer).await {
            Err(why) => (first, Err(why)),
            Ok(results) => {
                // A failed multi answers 0 for the ops before the one that
                // failed and RuntimeInconsistency after it.
                let failed = (self.nodes.iter().zip(results)).find_map(|(node, result)| {
                    let why = result.err()?;
                    let real = !matches!(why, Error::Other(0) | Error::RuntimeInconsistency);
                    real.then(|| (node.clone(), why))
                });
                match failed {
                    Some((node, why)) => (node, Err(why)),
                    None => (first, Ok(())),
                }
            }
        }
    }
}

/// The states the link went through since the lease last looked, when it
/// had seen `seen` losses: a loss followed by a new connection before it
/// looked is still a loss (`--on-disconnect kill`), and an outage that
/// ended.
fn states_since(seen: &mut u64, losses: u64, state: State) -> Vec<State> {
    let lost = std::mem::replace(seen, losses) != losses;
    match state {
        State::Disconnected => vec![state],
        _ if lost => vec![State::Disconnected, state],
        _ => vec![state],
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
fn outage_begins(report: &Report, deadline: Moment) -> Option<Moment> {
    let now = Moment::now();
    let left = Some(deadline - now).filter(|left| !left.is_zero())?;
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

/// Why a lock held through `nodes` is lost, found by a confirmation through
/// the leader (as [`lost`] makes them), not a read a cut-off member could
/// answer: for what must be known before it is written down or said, such
/// as a run's record or a hold's release (which then never says "released"
/// for a lock lost a moment before, whose event is still on its way). None
/// when it holds, or when the answer was lost with the connection (the
/// release then tells).
pub async fn lost_at_leader(client: &Client, nodes: &[String], owner: i64) -> Option<LossReason> {
    let mut confirming = Confirming::send(client, nodes, 0);
    let (node, result) = confirming.answer().await;
    let event = Event::Confirmed {
        node: &node,
        result,
    };
    match decide(OnDisconnect::Lease, false, owner, event) {
        Verdict::Lost(reason) => Some(reason),
        _ => None,
    }
}

/// Whether `nodes`, just found ours, are known held: at once while the
/// deadline the answers that found them allow is ahead; past it (zklock was
/// stopped, or starved, or its host suspended, since those answers: the
/// session may have expired and another holder's command run), only if a
/// confirmation sent now is answered through the leader. A loss and no
/// answer alike are not.
pub async fn still_held(
    client: &Client,
    nodes: &[String],
    owner: i64,
    policy: LeasePolicy,
) -> bool {
    if Moment::now() < policy.deadline_after(client.heard()) {
        return true;
    }
    let mut confirming = Confirming::send(client, nodes, 0);
    let (node, result) = confirming.answer().await;
    let event = Event::Confirmed {
        node: &node,
        result,
    };
    decide(OnDisconnect::Lease, false, owner, event) == Verdict::Proven
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
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_seen_only_in_the_count_is_a_disconnection() {
        let mut seen = 0;
        assert_eq!(
            states_since(&mut seen, 0, State::Connected),
            [State::Connected]
        );
        // Lost and connected again before the lease looked.
        assert_eq!(
            states_since(&mut seen, 1, State::Connected),
            [State::Disconnected, State::Connected]
        );
        assert_eq!(seen, 1);
        assert_eq!(
            states_since(&mut seen, 1, State::Connected),
            [State::Connected]
        );
        assert_eq!(
            states_since(&mut seen, 2, State::Disconnected),
            [State::Disconnected]
        );
        assert_eq!(
            states_since(&mut seen, 3, State::Expired),
            [State::Disconnected, State::Expired]
        );
    }
}
