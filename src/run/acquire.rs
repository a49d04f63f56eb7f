//! Connecting and taking every lock under one deadline: queueing again in
//! a new session when the session or our node is lost while waiting.

use std::cell::Cell;
use std::rc::Rc;

use anyhow::Result;
use tokio::time::Instant;
use zklock::zk::burst::{Burst, Data, Pending};

use super::fleet::{self, Gate};
use super::give_up::{GiveUp, deadline_after_first_look, give_up, queue_full};
use super::once;
use super::plan::Plan;
use super::wait::{WaitDisplay, WaitReport};
use super::{Event, Outputs};
use crate::command::signals::{Signals, aborts_waiting};
use crate::exit::{Exit, Failure, Step};
use crate::lock::holder::Seen;
use crate::lock::lease::{self, LeasePolicy};
use crate::lock::nodes::create_node;
use crate::lock::queue::{self, Acquired, Creating, Node, NodeSpec, NodeWatch, Request};
use crate::lock::record::record_path;
use crate::present::holder::superseder;
use crate::session::{Closed, Opened, Session, is_session_lost};
use crate::values::human_duration;

/// Every lock taken, for the command that runs under them in the session
/// that took them (see [`take_locks`]).
pub(crate) struct Taken {
    /// The nodes, in acquisition order (a nested run's: in the order the
    /// paths were given).
    pub(crate) held: Vec<Node>,
    /// The watch set on each node while waiting, if any, by position.
    pub(crate) watches: Vec<Option<NodeWatch>>,
    pub(crate) policy: LeasePolicy,
    /// The session that owns `held`: ours, or a nested run's enclosing one.
    pub(crate) owner: i64,
}

/// How one session's attempt at the locks ended: each is said once the
/// session has ended, our nodes deleted.
enum Attempt<T> {
    /// Every lock was held, and `then` ran under them.
    Held(T),
    End(Exit),
    GaveUp(GiveUp),
    /// `--max-waiting`: this many were already waiting for the path.
    QueueFull(String, usize),
    Superseded(Option<Seen>),
    /// Our node vanished (None), or an error while waiting: queue again in
    /// a new session if the session was lost.
    Lost(Option<anyhow::Error>),
}

/// Connects and takes every lock under one deadline, then runs `then`
/// under them in that session; ends with `then`'s value and how the
/// session ended (`Opened::scope`: on every way out, our nodes deleted). A
/// lost session or node while waiting means queueing again in a new
/// session, deadline allowing.
pub(crate) async fn take_locks<T>(
    plan: &Plan<'_>,
    out: &Outputs,
    signals: &mut Signals,
    then: impl AsyncFnOnce(&Session, &mut Signals, Taken) -> T,
) -> Result<Step<(T, Closed)>> {
    let report = &plan.report;
    let deadline = plan
        .wait_limit
        .filter(|_| plan.wait)
        .map(|limit| Instant::now() + limit);
    // One display for the whole wait, across sessions; dropping it (on any
    // way out, errors included) erases the status line.
    let display = Rc::new(WaitDisplay::new(report.clone(), &out.notify, plan.wait));
    let mut then = Some(then);
    loop {
        // Our first node's requests ride in the session's first burst,
        // behind the handshake (docs/design.md, "Round trips").
        let data = plan.holder().to_bytes();
        let mut burst = Burst::default();
        let first = first_attempt(plan, &data, &mut burst);
        // With --once-per, the record rides along, watched; the queue is
        // listed only if no run is going on (run/fleet.rs).
        let record =
            (plan.once_per.is_some()).then(|| burst.get_data(&record_path(plan.order[0]), true));
        let session = match connect(plan, out, signals, burst, deadline).await? {
            Step::Go(session) => session,
            Step::End(exit) => return Ok(Step::End(exit)),
        };
        let attempt = async |session: &Session| -> Result<Attempt<T>> {
            let policy = settle(plan, session).await?;
            let mut held = Vec::new();
            let mut watches = Vec::new();
            let client = session.client().clone();
            let mut observer = WaitReport::new(report.clone(), Rc::clone(&display), client);
            let looked = observer.looked.clone();
            let unreachable_since = Cell::new(None);
            let taking = async {
                let Some(record) = record else {
                    let taking = take_in_order(
                        plan,
                        session,
                        &data,
                        first.map(Ours::Sent),
                        &mut held,
                        &mut watches,
                        &mut observer,
                    );
                    return taking.await.map(Taking::Took);
                };
                let gate = gate(plan, session, &data, first, record, &mut observer).await?;
                let (node, fired, read) = match gate {
                    (_, _, Gate::Skip(read)) => return Ok(Taking::Skipped(Box::new(read))),
                    (node, fired, Gate::Queue(read)) => (node, fired, read),
                };
                let client = session.client();
                let taking = take_in_order(
                    plan,
                    session,
                    &data,
                    Some(Ours::Created(node)),
                    &mut held,
                    &mut watches,
                    &mut observer,
                );
                tokio::select! {
                    taken = taking => taken.map(Taking::Took),
                    read = fleet::until_recorded(plan, client, fired, read) => {
                        read.map(|read| Taking::Skipped(Box::new(read)))
                    }
                }
            };
            let result = tokio::select! {
                result = taking => result,
                // At the deadline, give up as when not waiting.
                () = deadline_after_first_look(deadline, &looked, &unreachable_since) => Ok(Taking::Took(Acquired::Busy)),
                signal = abort_signal(signals) => {
                    display.clear();
                    return Ok(Attempt::End(Exit::Signal(signal)));
                }
                () = session.track_connection(&unreachable_since) => unreachable!("never resolves"),
                () = display.tick() => unreachable!("never resolves"),
            };
            let result = match result {
                Ok(Taking::Took(acquired)) => Ok(acquired),
                Ok(Taking::Skipped(read)) => {
                    display.clear(); // before our last word
                    let exit = once::skip(plan, out, &read.record, read.now_ms);
                    return Ok(Attempt::End(exit.unwrap_or(plan.conflict)));
                }
                Err(err) => Err(err),
            };
            // Found ours past the lease deadline its answers allow (docs/design.md,
            // "Session and lease rules"): unless the leader says it is still
            // held, the command does not start; we queue again, as a waiter
            // whose session expired does.
            let result = match result {
                Ok(Acquired::Held(node, watch)) => {
                    let nodes: Vec<String> = held.iter().map(|node| node.path.clone()).collect();
                    match lease::still_held(session.client(), &nodes, session.id(), policy).await {
                        true => Ok(Acquired::Held(node, watch)),
                        false => Ok(Acquired::Lost),
                    }
                }
                result => result,
            };
            // A --supersede run's age, when it queues again: its first node's
            // (docs/design.md, "Superseding waiters").
            if plan.supersede && plan.first_queued.get().is_none() {
                plan.first_queued
                    .set(session.owned().first().map(|node| node.czxid));
            }
            Ok(match result {
                Ok(Acquired::Held(..)) => {
                    display.clear(); // before the command's output
                    drop(observer);
                    let then = then.take().expect("the locks are held once");
                    let owner = session.id();
                    let taken = Taken {
                        held,
                        watches,
                        policy,
                        owner,
                    };
                    Attempt::Held(then(session, signals, taken).await)
                }
                Ok(Acquired::Busy) => {
                    display.clear(); // before our last word
                    let unreachable_since = unreachable_since.get();
                    Attempt::GaveUp(give_up(plan, session, &observer, unreachable_since).await)
                }
                Ok(Acquired::QueueFull(waiting)) => {
                    display.clear();
                    let path = (observer.current.clone()).unwrap_or_else(|| plan.order.join(" "));
                    Attempt::QueueFull(path, waiting)
                }
                Ok(Acquired::Superseded(by)) => {
                    display.clear(); // before our last word
                    Attempt::Superseded(by)
                }
                Ok(Acquired::Lost) => Attempt::Lost(None),
                Err(err) => Attempt::Lost(Some(err)),
            })
        };
        let (attempt, closed) = session.scope(attempt).await;
        match attempt? {
            Attempt::Held(value) => return Ok(Step::Go((value, closed))),
            Attempt::End(exit) => return Ok(Step::End(exit)),
            Attempt::GaveUp(gave_up) => return Ok(Step::End(gave_up.say(plan, &closed))),
            Attempt::QueueFull(held_path, waiting) => {
                return Ok(Step::End(queue_full(plan, &held_path, waiting)));
            }
            Attempt::Superseded(by) => {
                let path = plan.order.join(" ");
                let by = superseder(by.as_ref());
                out.emit(Event::Superseded {
                    path: &path,
                    by: &by,
                });
                return Ok(Step::End(plan.conflict));
            }
            // Our node lost, or an error: queue again, or fail.
            Attempt::Lost(Some(err)) if err.downcast_ref().is_some_and(is_session_lost) => {
                out.emit(Event::Requeueing { why: Some(&err) });
            }
            Attempt::Lost(Some(err)) if err.downcast_ref::<queue::MissingChroot>().is_some() => {
                return Err(plan.connect.missing_chroot());
            }
            Attempt::Lost(Some(err)) => return Err(err),
            Attempt::Lost(None) => out.emit(Event::Requeueing { why: None }),
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            out.emit(Event::WaitTimedOut { order: &plan.order });
            return Ok(Step::End(plan.conflict));
        }
    }
}

/// Our node in the first lock's directory, as far as it got before the
/// lock loop: its first attempt sent, or created (run/fleet.rs).
enum Ours {
    Sent(Creating),
    Created(Node),
}

/// How the wait for the locks ended with --once-per in a fleet.
enum Taking {
    Took(Acquired),
    /// The record shows a run that skips ours.
    Skipped(Box<fleet::Read>),
}

/// Our node created (its queue not listed) and the run going on waited
/// out: our node, when we fired, and what the record says.
async fn gate(
    plan: &Plan<'_>,
    session: &Session,
    data: &[u8],
    first: Option<Creating>,
    record: Pending<Data>,
    observer: &mut WaitReport<'_>,
) -> Result<(Node, i64, Gate)> {
    let spec = NodeSpec {
        dir: plan.order[0],
        marker: crate::lock::marker(plan.kind).unwrap_or_default(),
        data,
        acls: &plan.acls,
        list: false,
    };
    let client = session.client();
    let (node, _) = create_node(client, session.owned(), spec, first).await?;
    let fired = fleet::fired_at(client, &node).await?;
    let gate = fleet::wait_out(plan, client, &node, fired, record, observer).await?;
    Ok((node, fired, gate))
}

/// The first attempt at our node in the first lock's directory, added to
/// `burst` (not for a semaphore, whose first requests depend on answers).
fn first_attempt(plan: &Plan<'_>, data: &[u8], burst: &mut Burst) -> Option<Creating> {
    let marker = crate::lock::marker(plan.kind)?;
    let spec = NodeSpec {
        dir: plan.order.first()?,
        marker,
        data,
        acls: &plan.acls,
        list: plan.once_per.is_none(),
    };
    Some(spec.first_attempt(burst))
}

/// Connects with `burst` behind the handshake, by `deadline` too if given
/// (`--timeout`); ends when a signal ends zklock meanwhile. The session is
/// then [`settle`]d in its scope.
pub(super) async fn connect(
    plan: &Plan<'_>,
    out: &Outputs,
    signals: &mut Signals,
    burst: Burst,
    deadline: Option<Instant>,
) -> Result<Step<Opened>> {
    let session = tokio::select! {
        session = Session::open_by(&plan.connect, burst, deadline) => session?,
        signal = abort_signal(signals) => return Ok(Step::End(Exit::Signal(signal))),
    };
    out.emit(Event::Connected {
        member: session.member(),
        session: session.id(),
        timeout: session.timeout(),
    });
    Ok(Step::Go(session))
}

/// Checks the ACL against who we are, and applies the lease rule to the
/// granted session timeout (refusing a --kill-after that does not fit;
/// choosing one if unset).
pub(super) async fn settle(plan: &Plan<'_>, session: &Session) -> Result<LeasePolicy> {
    session.check_acl(&plan.connect).await?;
    let granted = human_duration(session.timeout());
    let policy = match plan.policy(session.timeout()) {
        Ok(policy) => policy,
        Err(why) => {
            return Err(Failure::usage(match plan.kill_after {
                Some(_) => format!("the ensemble granted a shorter session ({granted}): {why}"),
                None => format!("the ensemble granted a {granted} session: {why}"),
            }));
        }
    };
    if plan.kill_after.is_none() {
        let kill_after = human_duration(policy.kill_after);
        let why = if policy.kill_after == lease::DEFAULT_KILL_AFTER {
            format!("the default, which fits a {granted} session")
        } else if policy.check().is_ok() {
            format!("the most a {granted} session leaves room for")
        } else {
            format!(
                "a {granted} session leaves no room to reconnect in; half of what is \
                 left before it can expire"
            )
        };
        plan.report
            .info(format_args!("--kill-after not given: {kill_after} ({why})"));
    }
    Ok(policy)
}

/// Takes the locks one by one in acquisition order. On success `held`
/// holds the held nodes, in that order.
async fn take_in_order(
    plan: &Plan<'_>,
    session: &Session,
    data: &[u8],
    mut ours: Option<Ours>,
    held: &mut Vec<Node>,
    watches: &mut Vec<Option<NodeWatch>>,
    observer: &mut WaitReport<'_>,
) -> Result<Acquired> {
    let mut last = Acquired::Busy;
    for dir in &plan.order {
        observer.current = Some((*dir).to_owned());
        let request = Request {
            client: session.client(),
            owned: session.owned(),
            dir,
            kind: plan.kind,
            data,
            wait: plan.wait,
            max_waiting: plan.max_waiting,
            supersede: plan.supersede,
            first_queued: plan.first_queued.get(),
            acls: &plan.acls,
            first: Cell::new(None),
            queued: Cell::new(None),
        };
        match ours.take() {
            Some(Ours::Sent(first)) => request.first.set(Some(first)),
            Some(Ours::Created(node)) => request.queued.set(Some(node)),
            None => {}
        }
        last = crate::lock::acquire(&request, observer).await?;
        match &mut last {
            Acquired::Held(node, watch) => {
                held.push(node.clone());
                watches.push(watch.take());
            }
            _ => return Ok(last),
        }
    }
    Ok(last)
}

/// Resolves with the first signal that should end zklock while it connects
/// or waits.
pub(crate) async fn abort_signal(signals: &mut Signals) -> i32 {
    loop {
        let signal = signals.recv().await;
        if aborts_waiting(signal) {
            return signal;
        }
    }
}
