//! Giving up on the lock: when the deadline may cancel the wait, what to
//! say, and how long to spend cleaning up afterwards.

use std::cell::Cell;
use std::time::Duration;

use tokio::time::Instant;

use super::plan::Plan;
use super::wait::WaitReport;
use crate::exit::Exit;
use crate::lock::queue::{self, Node};
use crate::session::Session;
use crate::values::human_duration;

/// How long cleaning up may take once the deadline has passed: the nodes
/// go with the session anyway, and "on time" is the point of a deadline.
const CLEANUP_AFTER_DEADLINE: Duration = Duration::from_secs(1);

/// Resolves at the deadline, but not before the queue was looked at once
/// (a positive timeout never does worse than --no-wait), unless ZooKeeper is
/// unreachable, when that look could take until the session expires.
pub async fn deadline_after_first_look(
    deadline: Option<Instant>,
    looked: &Cell<bool>,
    unreachable_since: &Cell<Option<Instant>>,
) {
    let Some(deadline) = deadline else {
        return std::future::pending().await;
    };
    tokio::time::sleep_until(deadline).await;
    // The flags are set by futures of the same select; no event to wait on.
    while !looked.get() && unreachable_since.get().is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Ends a run that did not get the lock: deletes our nodes and ends the
/// session within a bound, and says why the command does not run.
pub async fn give_up(
    plan: &Plan<'_>,
    session: Session,
    owned: &[Node],
    observer: &WaitReport<'_>,
    unreachable_since: Option<Instant>,
) -> Exit {
    let report = &plan.report;
    // Of several paths, the one we stopped at.
    let held_path = (observer.current.clone()).unwrap_or_else(|| plan.order.join(" "));
    let timeout = session.timeout();
    let unreachable = |since: Instant, deleted: bool| {
        let fate = match deleted {
            true => String::new(),
            false => format!(
                " (our queue node goes when the session expires, within {})",
                human_duration(timeout)
            ),
        };
        report.note(format_args!(
            "timed out waiting for {held_path}: ZooKeeper unreachable for the last {}{fate}",
            human_duration(since.elapsed()),
        ));
    };
    if let Some(since) = unreachable_since {
        // Nobody to ask who holds the lock: say what happened instead.
        let nodes = queue::paths(owned);
        let deleted = tokio::time::timeout(CLEANUP_AFTER_DEADLINE, session.close(&nodes))
            .await
            .unwrap_or(false);
        unreachable(since, deleted);
    } else {
        let why = match plan.wait {
            true => "timed out waiting for",
            false => "not waiting for",
        };
        // An idle waiter's connection may have died unnoticed since the
        // server last heard from it: no answer to the cleanup says so.
        let heard = session.client().heard();
        let cleanup = async {
            let holder = observer.holder_description(&session).await;
            session.close(&queue::paths(owned)).await;
            holder
        };
        match tokio::time::timeout(CLEANUP_AFTER_DEADLINE, cleanup).await {
            Ok(holder) => report.note(format_args!("{why} {held_path}{holder}")),
            Err(_) if plan.wait => unreachable(heard, false),
            Err(_) => report.note(format_args!("{why} {held_path}")),
        }
    }
    plan.conflict
}

/// Ends a run that did not join a queue already `waiting` deep
/// (`--max-waiting`): deletes our nodes, ends the session, says why.
pub async fn queue_full(
    plan: &Plan<'_>,
    session: Session,
    owned: &[Node],
    observer: &WaitReport<'_>,
    waiting: usize,
) -> Exit {
    let held_path = (observer.current.clone()).unwrap_or_else(|| plan.order.join(" "));
    session.close(&queue::paths(owned)).await;
    let runs = match waiting {
        1 => "1 run is",
        _ => &format!("{waiting} runs are"),
    };
    let limit = plan.max_waiting.unwrap_or_default();
    plan.report.note(format_args!(
        "not waiting for {held_path}: {runs} already waiting (--max-waiting {limit})"
    ));
    plan.conflict
}
