//! What happens in a run's life, as events, and the sinks that hear them:
//! the `-v`/`-q` report, sd_notify, `--ping`'s pings and the facts the
//! metrics file is made of, chosen once when the run starts ([`Outputs`])
//! and passed down to where things happen. A lifecycle says what happened
//! (`out.emit(Event::...)`); each sink decides what it makes of it.
//!
//! The visible wait (`wait/`) is driven by the queue events the lock loop
//! hands it (`lock::queue::QueueEvents`), not by these: it reads who holds
//! the lock, which only the session it waits in can do.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use anyhow::Result;

use super::hold::held_status;
use super::metrics::{Facts, MetricsFile, Skip};
use super::notify::Notifier;
use super::ping::Pinger;
use super::plan::Plan;
use crate::exit::Exit;
use crate::lock::queue::Node;
use crate::report::Report;
use crate::values::{Seconds, human_duration};

/// What happens in a run's (or a hold's) life, in the order it happens.
pub(crate) enum Event<'a> {
    /// Connecting to take the locks, in acquisition `order`.
    Connecting { order: &'a [&'a str] },
    /// A session is open, on this member (`name:port`).
    Connected {
        member: &'a str,
        session: i64,
        timeout: Duration,
    },
    /// The session was lost while waiting (`None`: our node vanished):
    /// queueing again in a new one.
    Requeueing { why: Option<&'a anyhow::Error> },
    /// A newer `--supersede` run removed ours from the queue of `path`.
    Superseded { path: &'a str, by: &'a str },
    /// The wait ran out between two sessions.
    WaitTimedOut { order: &'a [&'a str] },
    /// A nested run found `path` held by the enclosing run, as `node`.
    Reentered { path: &'a str, node: &'a Node },
    /// Every lock is held: `held`, with the fencing token of the first
    /// path given; `after` the wait, when this run took them (a hold under
    /// an enclosing one did not).
    Acquired {
        held: &'a [Node],
        token: i64,
        after: Option<Duration>,
    },
    /// `--once-per`: the command does not run, for `skip`, said as `why`.
    Skipped {
        lock: &'a str,
        skip: Skip,
        why: std::fmt::Arguments<'a>,
    },
    /// This host runs the command (or holds) under the lock: its outcome
    /// is the run's, even if the command then cannot be started.
    Running,
    /// The command (or a hold's holder) runs under the lock, given `env`.
    Started { env: &'a [(&'static str, String)] },
    /// The lock was lost, for `why` (the command's supervisor tells,
    /// `command::supervise::supervise`, as it stops the command; a hold's
    /// holder answers it to `zklock release`).
    Lost { why: std::fmt::Arguments<'a> },
    /// The command (or the hold) ended with `exit`, under `--max-runtime`
    /// if given.
    Ended {
        exit: Exit,
        max_runtime: Option<Seconds>,
    },
    /// The session ended with our nodes deleted: `confirmed` by
    /// ZooKeeper, or else released when it expires, within `timeout`.
    Released {
        order: &'a [&'a str],
        confirmed: bool,
        timeout: Duration,
    },
}

/// Where a run says what happens, chosen once when it starts, from its
/// plan and the environment: no global state.
pub(crate) struct Outputs {
    /// The `-v`/`-q` lines, printed above the visible wait's status line.
    report: Report,
    /// systemd's sd_notify, when `NOTIFY_SOCKET` names a socket.
    pub(crate) notify: Notifier,
    /// `--ping`'s health-check pings.
    ping: Option<Pinger>,
    /// What the metrics file and the final ping are made of.
    pub(crate) facts: Rc<Facts>,
    metrics: RefCell<Option<MetricsFile>>,
    finished: Cell<bool>,
}

impl Outputs {
    /// The outputs `plan` asks for: the metrics file (its directory
    /// checked now), the pings (the URL checked), sd_notify when
    /// `NOTIFY_SOCKET` names a socket.
    pub(crate) fn new(plan: &Plan<'_>) -> Result<Outputs> {
        let report = plan.report.clone();
        let metrics = match plan.metrics_file {
            Some(file) => {
                let metrics = MetricsFile::prepare(file, &plan.paths)?;
                metrics.warn_if_uncollected(&report);
                Some(metrics)
            }
            None => None,
        };
        Ok(Outputs {
            ping: Pinger::new(plan.ping, plan.ping_skipped, &report)?,
            report,
            notify: Notifier::from_env(),
            facts: Rc::new(Facts::new()),
            metrics: RefCell::new(metrics),
            finished: Cell::new(false),
        })
    }

    /// Hands `event` to every sink that cares.
    pub(crate) fn emit(&self, event: Event<'_>) {
        let report = &self.report;
        match event {
            Event::Connecting { order } => {
                self.notify
                    .status(|| format!("connecting to ZooKeeper for {}", order.join(" ")));
            }
            Event::Connected {
                member,
                session,
                timeout,
            } => report.info(format_args!(
                "connected to {member} (session {session:#x}, timeout {})",
                human_duration(timeout)
            )),
            Event::Requeueing { why: Some(err) } => report.info(format_args!(
                "session lost while waiting ({err:#}); queueing again"
            )),
            Event::Requeueing { why: None } => report.info(format_args!(
                "our node vanished while waiting; queueing again in a new session"
            )),
            Event::Superseded { path, by } => {
                report.note(format_args!("superseded while waiting for {path} by {by}"));
            }
            Event::WaitTimedOut { order } => {
                report.note(format_args!("timed out waiting for {}", order.join(" ")));
            }
            Event::Reentered { path, node } => report.info(format_args!(
                "{path} is held by the enclosing zklock run ({}, fencing token {}): running under it",
                node.path, node.czxid
            )),
            Event::Acquired { held, token, after } => {
                if let Some(after) = after {
                    for node in held {
                        report.info(format_args!(
                            "acquired {} (fencing token {}) after {}",
                            node.path,
                            node.czxid,
                            human_duration(after)
                        ));
                    }
                }
                self.facts.acquired(token);
            }
            Event::Skipped { lock, skip, why } => {
                self.facts.skipped(skip);
                report.note(format_args!("not running: {lock} {why}"));
            }
            Event::Running => self.facts.ran(),
            Event::Started { env } => {
                self.notify.ready(|| held_status(env));
                if let Some(ping) = &self.ping {
                    ping.started();
                }
            }
            // STOPPING=1 as the loss happens; the command's end then says
            // nothing new to systemd (the Notifier sends it once).
            Event::Lost { why } => {
                report.error(format_args!("lock lost: {why}"));
                self.notify.stopping();
            }
            Event::Ended { exit, max_runtime } => {
                self.notify.stopping();
                if let (Exit::TimedOut, Some(limit)) = (exit, max_runtime) {
                    report.error(format_args!(
                        "the command ran longer than --max-runtime {limit}; terminated"
                    ));
                }
            }
            Event::Released {
                order,
                confirmed: true,
                ..
            } => report.info(format_args!("released {}", order.join(" "))),
            Event::Released {
                order,
                confirmed: false,
                timeout,
            } => report.info(format_args!(
                "could not reach ZooKeeper to confirm the release of {}: it is released \
                 when the session expires, within {} at the latest",
                order.join(" "),
                human_duration(timeout)
            )),
        }
    }

    /// Pings and writes the metrics file for `result`, once: a holder whose
    /// lock is lost reports it then, not when it ends.
    pub(crate) fn finish(&self, result: &Result<Exit>) {
        if self.finished.replace(true) {
            return;
        }
        let facts = &self.facts;
        // After the lock is released: a slow check delays only zklock's exit.
        let pinged =
            (self.ping.as_ref()).map(|ping| ping.finish(result, facts.has_run(), facts.skip()));
        facts.ping_failures(pinged);
        if let Some(metrics) = self.metrics.borrow_mut().take() {
            if let Err(err) = metrics.write(result, facts) {
                self.report.error(format_args!(
                    "cannot write the metrics file {}: {err}",
                    metrics.path().display()
                ));
            }
        }
    }
}

/// What each sink makes of an event, where it shows without a server. The
/// rest is held by tests/it against real servers: the `-v`/`-q` lines by
/// `visible_wait.rs` (acquired, released), `messages.rs` (an unconfirmed
/// release), `exclusion.rs` and `supersede_stale.rs` (queueing again,
/// superseded), `cron.rs` (skipped, `--max-runtime`, the metrics file);
/// the pings by `ping.rs` (a real HTTP server); sd_notify by `systemd.rs`
/// (a real socket); a hold's metrics file by `hold_outputs.rs`.
#[cfg(test)]
mod tests {
    use std::io::ErrorKind;
    use std::os::unix::net::UnixDatagram;

    use super::*;
    use crate::report::Verbosity;

    fn outputs(notify: Notifier) -> Outputs {
        Outputs {
            report: Report::new(Verbosity::Quiet),
            notify,
            ping: None,
            facts: Rc::new(Facts::new()),
            metrics: RefCell::new(None),
            finished: Cell::new(false),
        }
    }

    const ENV: [(&str, &str); 2] = [("ZKLOCK_PATH", "/a"), ("ZKLOCK_FENCING_TOKEN", "7")];

    fn env() -> Vec<(&'static str, String)> {
        ENV.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    }

    #[test]
    fn facts_hear_the_token_when_acquired_and_the_run_when_running() {
        let out = outputs(Notifier::to(None));
        let held = [Node {
            path: "/a/lock-0000000001".into(),
            czxid: 7,
        }];
        out.emit(Event::Acquired {
            held: &held,
            token: 7,
            after: Some(Duration::ZERO),
        });
        assert_eq!(out.facts.token(), Some(7));
        assert!(!out.facts.has_run(), "acquired is not ran");
        out.emit(Event::Running);
        assert!(out.facts.has_run());
    }

    #[test]
    fn facts_hear_why_a_run_was_skipped() {
        let out = outputs(Notifier::to(None));
        assert_eq!(out.facts.skip(), None);
        out.emit(Event::Skipped {
            lock: "/a",
            skip: Skip::Failed,
            why: format_args!("last ran and failed"),
        });
        assert_eq!(out.facts.skip(), Some(Skip::Failed));
        assert!(!out.facts.has_run());
    }

    #[test]
    fn sd_notify_hears_status_ready_and_stopping_once() {
        let dir = crate::scratch::TempDir::new("events");
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let systemd = UnixDatagram::bind(&path).unwrap();
        systemd.set_nonblocking(true).unwrap();
        let out = outputs(Notifier::to(Some(&path)));
        out.emit(Event::Connecting {
            order: &["/a", "/b"],
        });
        out.emit(Event::Started { env: &env() });
        out.emit(Event::Lost {
            why: format_args!("our node was deleted; terminating the command"),
        });
        out.emit(Event::Ended {
            exit: Exit::LockLost,
            max_runtime: None,
        });
        let mut heard = Vec::new();
        let mut buf = [0; 512];
        loop {
            match systemd.recv(&mut buf) {
                Ok(n) => heard.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
                Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                Err(err) => panic!("{err}"),
            }
        }
        assert_eq!(heard.len(), 3, "{heard:?}");
        assert_eq!(heard[0], "STATUS=connecting to ZooKeeper for /a /b\n");
        assert!(
            heard[1].starts_with("READY=1\nSTATUS=holding /a since ")
                && heard[1].ends_with(" (fencing token 7)\n"),
            "{heard:?}"
        );
        assert_eq!(heard[2], "STOPPING=1\n", "once, as the loss happens");
    }
}
