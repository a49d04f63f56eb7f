//! Giving up on the lock: when the deadline may cancel the wait, what to
//! say, and how long to spend cleaning up afterwards.

use std::cell::Cell;
use std::time::Duration;

use tokio::time::Instant;

use super::wait::WaitReport;
use crate::lock::queue::{self, Node};
use crate::report::Report;
use crate::session::Session;
use crate::values::human_ms;

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

/// A run that did not get the lock.
pub struct GivenUp<'a> {
    /// The path that was held (of several, the one we stopped at).
    pub held_path: &'a str,
    /// False with --no-wait.
    pub waited: bool,
    /// Set when the deadline came while ZooKeeper was unreachable.
    pub unreachable_since: Option<Instant>,
}

impl GivenUp<'_> {
    /// Deletes our nodes and ends the session within a bound, and says
    /// why the command does not run.
    pub async fn end(
        self,
        session: Session,
        owned: &[Node],
        observer: &WaitReport,
        report: Report,
    ) {
        let held_path = self.held_path;
        if let Some(since) = self.unreachable_since {
            // Nobody to ask who holds the lock: say what happened instead.
            let timeout = session.timeout();
            let deleted = Cell::new(false);
            let cleanup = async {
                deleted.set(session.delete(&queue::paths(owned)).await);
                session.close(&[]).await;
            };
            let _ = tokio::time::timeout(CLEANUP_AFTER_DEADLINE, cleanup).await;
            let fate = match deleted.get() {
                true => String::new(),
                false => format!(
                    " (our queue node goes when the session expires, within {})",
                    human_ms(timeout)
                ),
            };
            report.note(format_args!(
                "timed out waiting for {held_path}: ZooKeeper unreachable for the last {}{fate}",
                human_ms(since.elapsed()),
            ));
            return;
        }
        let why = match self.waited {
            true => "timed out waiting for",
            false => "not waiting for",
        };
        let cleanup = async {
            let holder = observer.holder_description(&session).await;
            session.close(&queue::paths(owned)).await;
            holder
        };
        let holder = tokio::time::timeout(CLEANUP_AFTER_DEADLINE, cleanup)
            .await
            .unwrap_or_default();
        report.note(format_args!("{why} {held_path}{holder}"));
    }
}
