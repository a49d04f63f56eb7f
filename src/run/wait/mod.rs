//! The visible wait: what zklock says while it waits for a lock.
//! [`WaitReport`] hears the lock loop's progress (the queue, who holds the
//! lock) and reports it by verbosity; [`WaitDisplay`] shows the wait as it
//! goes: one self-updating status line at a terminal, or with `-v` and no
//! terminal (CI logs) a heartbeat line every minute. Off a terminal without
//! `-v` nothing is shown: cron mails every line. Under systemd the summary
//! is also its STATUS, sent on every change and heartbeat.

mod terminal;

use std::cell::{Cell, RefCell};
use std::io::IsTerminal;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use indicatif::ProgressBar;
use tokio::time::Instant;

use self::terminal::new_bar;
use super::notify::Notifier;
use crate::lock::holder::Seen;
use crate::lock::queue::{QueueEvent, QueueEvents};
use crate::present::{holder, whole_seconds};
use crate::report::{Report, Verbosity};
use crate::session::Session;
use zklock::zk::client::Client;

/// Reports the queue while waiting and remembers who was first in this
/// session, to say who held the lock if we give up.
pub struct WaitReport<'a> {
    report: Report,
    display: Rc<WaitDisplay<'a>>,
    /// The session waited in, to read who holds the lock.
    client: Client,
    first: Option<String>,
    /// The node whose data was read last, and the queue last shown.
    read: Option<String>,
    shown: Option<(usize, String)>,
    /// The lock path being taken now (of several, the one that is held).
    pub current: Option<String>,
    /// Set once the queue was looked at (our node created and the queue
    /// listed): a deadline may cancel the wait only after that.
    pub looked: Rc<Cell<bool>>,
}

impl QueueEvents for WaitReport<'_> {
    async fn event(&mut self, event: QueueEvent<'_>) {
        match event {
            QueueEvent::Queued(node) => self.report.info(format_args!("queued as {}", node.path)),
            QueueEvent::Waiting { ahead, first } => {
                let data = match self.read.as_deref() != Some(first) {
                    true => self.read_holder(first).await,
                    false => None,
                };
                self.waiting(ahead, first, data.as_ref());
            }
            // Its command runs now: read who holds the lock once more.
            QueueEvent::AheadHolds(node) => {
                self.read = None;
                if let Some((ahead, first)) = self.shown.clone()
                    && first == node
                {
                    let data = self.read_holder(node).await;
                    self.waiting(ahead, node, data.as_ref());
                }
            }
            QueueEvent::AheadRead(node, seen) => {
                let shown = (self.display.queue.borrow().as_ref())
                    .and_then(|queue| Some(queue.holder.as_ref()?.mtime));
                if let Some((ahead, first)) = self.shown.clone()
                    && first == node
                    && shown.is_some_and(|mtime| mtime != seen.mtime)
                {
                    self.waiting(ahead, node, Some(&seen));
                }
            }
            QueueEvent::PoolFull(holders) => self.pool_full(holders),
        }
    }
}

impl<'a> WaitReport<'a> {
    /// The data of the node `first` (a full path), if it is worth one more
    /// round trip: with `-v`, or for the status line.
    async fn read_holder(&mut self, first: &str) -> Option<Seen> {
        self.read = Some(first.to_owned());
        if !(self.report.verbosity() >= Verbosity::Verbose || self.display.wants_data()) {
            return None;
        }
        let found = self.client.call(|b| b.get_data(first, false)).await;
        found.ok().map(|found| Seen::from((found.data, found.stat)))
    }

    fn waiting(&mut self, ahead: usize, first: &str, first_data: Option<&Seen>) {
        self.looked.set(true);
        self.shown = Some((ahead, first.to_owned()));
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
        let known = self.display.queue.take().filter(|q| q.first == first);
        self.display.show(Queue {
            path: self.current.clone().unwrap_or_default(),
            ahead,
            first: first.to_owned(),
            holder: first_data.cloned().or(known.and_then(|q| q.holder)),
            pool: None,
        });
    }

    /// Waiting for the run going on at `node` (`--once-per`, run/fleet.rs):
    /// the lock's holder, named if we give up.
    pub fn waiting_on_run(&mut self, node: &str) {
        self.looked.set(true);
        self.first = Some(node.to_owned());
    }

    fn pool_full(&mut self, holders: usize) {
        self.looked.set(true);
        self.report.info(format_args!(
            "all {holders} permits are taken; waiting for one"
        ));
        self.first = None;
        self.display.show(Queue {
            path: self.current.clone().unwrap_or_default(),
            pool: Some(holders),
            ..Queue::default()
        });
    }

    pub fn new(report: Report, display: Rc<WaitDisplay<'a>>, client: Client) -> WaitReport<'a> {
        WaitReport {
            report,
            display,
            client,
            first: None,
            read: None,
            shown: None,
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
        let read = session.client().call(|b| b.get_data(first, false));
        let seen = match tokio::time::timeout(Duration::from_secs(1), read).await {
            Ok(Ok(found)) => Some(Seen::from((found.data, found.stat))),
            // What the display last read of it, if it is still the first.
            _ => (self.display.queue.borrow().as_ref())
                .filter(|queue| queue.first == *first)
                .and_then(|queue| queue.holder.clone()),
        };
        seen.as_ref()
            .and_then(holder::describe)
            .map(|h| format!(": held by {h}"))
            .unwrap_or_default()
    }
}

/// How often a `-v` run without a terminal says it still waits.
const HEARTBEAT: Duration = Duration::from_secs(60);

/// How often the status line is redrawn, for its elapsed times.
const REDRAW: Duration = Duration::from_secs(1);

/// How a wait is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    /// The status line on stderr, a terminal.
    Line,
    /// `-v` lines on stderr, not a terminal: heartbeats.
    Heartbeat,
}

/// What is known of the queue ahead of us.
#[derive(Debug, Clone, Default)]
struct Queue {
    /// The lock path waited for.
    path: String,
    ahead: usize,
    /// The first node ahead (full path), and its data if read.
    first: String,
    holder: Option<Seen>,
    /// A semaphore's permits, all taken.
    pool: Option<usize>,
}

/// The display of one `zklock run`'s wait, across sessions.
pub struct WaitDisplay<'a> {
    mode: Mode,
    report: Report,
    /// systemd's STATUS, when it listens.
    notify: &'a Notifier,
    started: Instant,
    queue: RefCell<Option<Queue>>,
    bar: RefCell<Option<ProgressBar>>,
}

impl<'a> WaitDisplay<'a> {
    /// `waits` is false with `--no-wait`: nothing to show then.
    pub fn new(report: Report, notify: &'a Notifier, waits: bool) -> WaitDisplay<'a> {
        let terminal = std::io::stderr().is_terminal();
        let mode = match (waits, report.verbosity(), terminal) {
            (false, _, _) | (_, Verbosity::Quiet, _) => Mode::Off,
            (true, _, true) => Mode::Line,
            (true, Verbosity::Verbose, false) => Mode::Heartbeat,
            (true, Verbosity::Normal, false) => Mode::Off,
        };
        WaitDisplay {
            mode,
            report,
            notify,
            started: Instant::now(),
            queue: RefCell::new(None),
            bar: RefCell::new(None),
        }
    }

    /// Whether the holder's data is worth reading for this display.
    pub fn wants_data(&self) -> bool {
        self.mode == Mode::Line || self.notify.enabled()
    }

    fn show(&self, queue: Queue) {
        self.notify_status(&queue);
        *self.queue.borrow_mut() = Some(queue);
        self.redraw();
    }

    /// Keeps the display current while waiting (never resolves; reads
    /// nothing from ZooKeeper): the status line every second; the `-v`
    /// heartbeat line, and systemd's STATUS (its time held grows), every
    /// heartbeat.
    pub async fn tick(&self) {
        let heartbeat =
            (self.mode == Mode::Heartbeat || self.notify.enabled()).then(heartbeat_interval);
        let redraw = (self.mode == Mode::Line).then_some(REDRAW);
        let Some(every) = redraw.or(heartbeat) else {
            return std::future::pending().await;
        };
        let mut ticks = tokio::time::interval_at(self.started + every, every);
        let mut next_beat = heartbeat.map(|beat| self.started + beat);
        loop {
            let now = ticks.tick().await;
            if self.mode == Mode::Line {
                self.redraw();
                // The spinner turns: zklock is alive.
                if let Some(bar) = &*self.bar.borrow() {
                    bar.tick();
                }
            }
            if let (Some(due), Some(beat)) = (next_beat, heartbeat)
                && now >= due
            {
                next_beat = Some(due + beat);
                self.beat();
            }
        }
    }

    /// The heartbeat: `still waiting` with `-v` off a terminal, and the
    /// STATUS again.
    fn beat(&self) {
        let Some(queue) = &*self.queue.borrow() else {
            return;
        };
        if self.mode == Mode::Heartbeat {
            self.report.info(format_args!(
                "still waiting {}: {}",
                whole_seconds(self.started.elapsed()),
                summary(queue, SystemTime::now())
            ));
        }
        self.notify_status(queue);
    }

    fn redraw(&self) {
        if self.mode != Mode::Line {
            return;
        }
        let Some(queue) = &*self.queue.borrow() else {
            return;
        };
        let text = format!(
            "waiting {} for {}: {}",
            whole_seconds(self.started.elapsed()),
            queue.path,
            summary(queue, SystemTime::now())
        );
        self.bar
            .borrow_mut()
            .get_or_insert_with(|| new_bar(&self.report))
            .set_message(text);
    }

    /// Erases the status line (the lock was taken, or zklock gives up):
    /// before anything else is written to the terminal.
    pub fn clear(&self) {
        if let Some(bar) = self.bar.borrow_mut().take() {
            self.report.show_above(None);
            bar.finish_and_clear();
        }
    }

    /// `STATUS=waiting for PATH: 2 ahead, held by ...`, when systemd listens.
    fn notify_status(&self, queue: &Queue) {
        self.notify.status(|| {
            let summary = summary(queue, SystemTime::now());
            format!("waiting for {}: {summary}", queue.path)
        });
    }
}

impl Drop for WaitDisplay<'_> {
    /// Every way out of the wait (a signal, an error) erases the line.
    fn drop(&mut self) {
        self.clear();
    }
}

/// The heartbeat's interval; ZKLOCK_HEARTBEAT_INTERVAL, undocumented, is
/// for the integration tests.
fn heartbeat_interval() -> Duration {
    std::env::var("ZKLOCK_HEARTBEAT_INTERVAL")
        .ok()
        .and_then(|text| humantime::parse_duration(&text).ok())
        .filter(|every| !every.is_zero())
        .unwrap_or(HEARTBEAT)
}

/// `2 ahead, held by pid 4242 on web1 for 14m`.
fn summary(queue: &Queue, now: SystemTime) -> String {
    if let Some(holders) = queue.pool {
        return format!("all {holders} permits are taken");
    }
    let held_by = (queue.holder.as_ref())
        .and_then(|seen| holder::brief(seen, now))
        // Not read, or not zklock's data: the node's name still tells.
        .unwrap_or_else(|| {
            queue
                .first
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned()
        });
    format!("{} ahead, held by {held_by}", queue.ahead)
}

#[cfg(test)]
mod tests;
