//! While waiting: the queue and who holds the lock, reported by verbosity.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use super::wait_display::WaitDisplay;
use crate::lock::acquire::{Node, Observer};
use crate::lock::holder::{self, Seen};
use crate::report::Report;
use crate::report::Verbosity;
use crate::session::Session;

/// Reports the queue while waiting and remembers who was first, to say who
/// held the lock if we give up.
pub struct WaitReport {
    report: Report,
    display: Rc<WaitDisplay>,
    first: Option<String>,
    first_data: Option<Seen>,
    /// The lock path being taken now (of several, the one that is held).
    pub current: Option<String>,
    /// Set once the queue was looked at (our node created and the queue
    /// listed): a deadline may cancel the wait only after that.
    pub looked: Rc<Cell<bool>>,
}

impl Observer for WaitReport {
    fn queued(&mut self, node: &Node) {
        self.report.info(format_args!("queued as {}", node.path));
    }

    fn waiting(&mut self, ahead: usize, first: &str, first_data: Option<&Seen>) {
        self.looked.set(true);
        if let Some(seen) = first_data {
            self.first_data = Some(seen.clone());
        }
        if self.first.as_deref() != Some(first) {
            let holder = first_data
                .and_then(holder::describe)
                .map(|h| format!(" ({h})"))
                .unwrap_or_default();
            self.report.info(format_args!(
                "position {} in the queue; first is {first}{holder}",
                ahead + 1
            ));
            self.first = Some(first.to_owned());
        }
        let path = self.current.as_deref().unwrap_or_default();
        self.display.waiting(path, ahead, first, first_data);
    }

    fn wants_data(&self) -> bool {
        self.report.0 >= Verbosity::Verbose || self.display.wants_data()
    }

    fn pool_full(&mut self, holders: usize) {
        self.looked.set(true);
        self.report.info(format_args!(
            "all {holders} permits are taken; waiting for one"
        ));
        self.first = None;
        let path = self.current.as_deref().unwrap_or_default();
        self.display.pool_full(path, holders);
    }
}

impl WaitReport {
    pub fn new(report: Report, display: Rc<WaitDisplay>) -> WaitReport {
        WaitReport {
            report,
            display,
            first: None,
            first_data: None,
            current: None,
            looked: Rc::default(),
        }
    }

    /// `: held by pid ... on ...`. Read again now: what was read while
    /// waiting may predate the holder's write of its command's pid and start.
    pub async fn holder_description(&self, session: &Session) -> String {
        let Some(first) = &self.first else {
            return String::new();
        };
        let read = session.client().get_data(first);
        let seen = match tokio::time::timeout(Duration::from_secs(1), read).await {
            Ok(Ok(found)) => Some(Seen::from(found)),
            _ => self.first_data.clone(),
        };
        seen.as_ref()
            .and_then(holder::describe)
            .map(|h| format!(": held by {h}"))
            .unwrap_or_default()
    }
}
