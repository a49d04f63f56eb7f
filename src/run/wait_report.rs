//! While waiting: the queue and who holds the lock, reported by verbosity.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use crate::lock::acquire::{Node, Observer};
use crate::lock::holder;
use crate::report::Report;
use crate::report::Verbosity;
use crate::session::Session;

/// Reports the queue while waiting and remembers who was first, to say who
/// held the lock if we give up.
pub struct WaitReport {
    report: Report,
    first: Option<String>,
    first_data: Option<Vec<u8>>,
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

    fn waiting(&mut self, ahead: usize, first: &str, first_data: Option<&[u8]>) {
        self.looked.set(true);
        if let Some(data) = first_data {
            self.first_data = Some(data.to_vec());
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
    }

    fn wants_data(&self) -> bool {
        self.report.0 >= Verbosity::Verbose
    }

    fn pool_full(&mut self, holders: usize) {
        self.looked.set(true);
        self.report.info(format_args!(
            "all {holders} permits are taken; waiting for one"
        ));
        self.first = None;
    }
}

impl WaitReport {
    pub fn new(report: Report) -> WaitReport {
        WaitReport {
            report,
            first: None,
            first_data: None,
            current: None,
            looked: Rc::default(),
        }
    }

    /// `: held by pid ... on ...`, read now if not read while waiting.
    pub async fn holder_description(&self, session: &Session) -> String {
        let Some(first) = &self.first else {
            return String::new();
        };
        let data = match &self.first_data {
            Some(data) => Some(data.clone()),
            None => {
                let read = session.client().get_data(first);
                tokio::time::timeout(Duration::from_secs(1), read)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|(d, _)| d)
            }
        };
        data.as_deref()
            .and_then(holder::describe)
            .map(|h| format!(": held by {h}"))
            .unwrap_or_default()
    }
}
