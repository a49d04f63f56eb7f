//! Giving up on the lock: when the deadline may cancel the wait, what to
//! say, and how long to spend cleaning up afterwards.

use std::cell::Cell;
use std::time::Duration;

use tokio::time::Instant;
use zklock::zk::clock::Moment;

use super::plan::Plan;
use super::wait::WaitReport;
use crate::exit::Exit;
use crate::session::{Closed, Session};
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

/// Why a run gives up on the lock, known before its session ends (our
/// nodes deleted); said once it has (see [`GiveUp::say`]).
pub struct GiveUp {
    /// Of several paths, the one we stopped at.
    held_path: String,
    unreachable_since: Option<Instant>,
    /// When the server last heard from the session.
    heard: Moment,
    /// Who holds the lock, if asked and answered in time.
    holder: Option<String>,
}

/// Gives up on the lock: asks who holds it, if ZooKeeper is reachable, and
/// bounds that and the session's end (which deletes our nodes) together.
pub async fn give_up(
    plan: &Plan<'_>,
    session: &Session,
    observer: &WaitReport<'_>,
    unreachable_since: Option<Instant>,
) -> GiveUp {
    let cleaned_by = Instant::now() + CLEANUP_AFTER_DEADLINE;
    session.end_by(cleaned_by);
    // An idle waiter's connection may have died unnoticed since the
    // server last heard from it: no answer to the cleanup says so.
    let heard = session.client().heard();
    // Nobody to ask who holds the lock when unreachable.
    let holder = match unreachable_since {
        Some(_) => None,
        None => {
            let asking = observer.holder_description(session);
            tokio::time::timeout_at(cleaned_by, asking).await.ok()
        }
    };
    GiveUp {
        held_path: (observer.current.clone()).unwrap_or_else(|| plan.order.join(" ")),
        unreachable_since,
        heard,
        holder,
    }
}

impl GiveUp {
    /// Says why the command does not run, now that the session `closed`.
    pub fn say(self, plan: &Plan<'_>, closed: &Closed) -> Exit {
        let report = &plan.report;
        let held_path = &self.held_path;
        let unreachable = |lasted: Duration, deleted: bool| {
            let fate = match deleted {
                true => String::new(),
                false => format!(
                    " (our queue node goes when the session expires, within {})",
                    human_duration(closed.timeout)
                ),
            };
            report.note(format_args!(
                "timed out waiting for {held_path}: ZooKeeper unreachable for the last {}{fate}",
                human_duration(lasted),
            ));
        };
        let why = match plan.wait {
            true => "timed out waiting for",
            false => "not waiting for",
        };
        match (self.unreachable_since, self.holder) {
            // Nobody was asked who holds the lock: say what happened instead.
            (Some(since), _) => unreachable(since.elapsed(), closed.confirmed),
            (None, Some(holder)) if closed.in_time => {
                report.note(format_args!("{why} {held_path}{holder}"))
            }
            (None, _) if plan.wait => unreachable(self.heard.elapsed(), false),
            (None, _) => report.note(format_args!("{why} {held_path}")),
        }
        plan.conflict
    }
}

/// Says why a run did not join a queue already `waiting` deep for
/// `held_path` (`--max-waiting`), once its session ended.
pub fn queue_full(plan: &Plan<'_>, held_path: &str, waiting: usize) -> Exit {
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
