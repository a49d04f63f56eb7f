//! The lifecycle of `zklock run`, in order (docs/design.md, "Lifecycle of
//! `zklock run`"):
//! signals, connect, acquire, spawn, supervise, reap, release, exit.

pub(crate) mod acquire;
mod give_up;
pub(crate) mod hold;
pub(crate) mod metrics;
pub(crate) mod nested;
pub(crate) mod notify;
pub(crate) mod once;
pub(crate) mod ping;
pub(crate) mod plan;
mod wait;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;

use anyhow::{Context, Result};
use tokio::time::Instant;

use self::acquire::{Taken, take_locks};
use self::hold::{HeldLock, command_environment, run_command};
use self::notify::Notifier;
use self::ping::Pinger;
use self::plan::Plan;
use crate::cli::RunArgs;
use crate::command::child::{self, Child};
use crate::command::signals::Signals;
use crate::exit::{Exit, Step};
use crate::lock::queue::Node;
use crate::report::Report;
use crate::session::Session;
use crate::values::human_duration;

pub fn run(args: RunArgs) -> Result<Exit> {
    let plan = Plan::new(&args)?;
    let outputs = Outputs::new(&plan)?;
    drive(outputs, |outputs| lifecycle(plan, outputs))
}

/// Runs `lifecycle` on a current-thread runtime with the run's `outputs`,
/// and gives them the outcome once it is known (the metrics file and the
/// final ping, docs/design.md, "Metrics file"). Shared with `zklock
/// hold`'s holder, whose hold is its "command".
pub(crate) fn drive<F, Fut>(outputs: Outputs, lifecycle: F) -> Result<Exit>
where
    F: FnOnce(Rc<Outputs>) -> Fut,
    Fut: Future<Output = Result<Exit>>,
{
    // Before the runtime starts any thread: they inherit this mask.
    child::block_terminal_stops();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let outputs = Rc::new(outputs);
    let result = runtime.block_on(lifecycle(Rc::clone(&outputs)));
    // Do not wait for a DNS lookup that is still running (see
    // session::diagnose): its answer no longer matters.
    runtime.shutdown_background();
    outputs.finish(&result);
    result
}

/// Where a run says what happens, chosen once when it starts, from its
/// plan and the environment, and passed down to where things happen: no
/// global state.
pub(crate) struct Outputs {
    /// The `-v`/`-q` lines, printed above the visible wait's status line.
    pub(crate) report: Report,
    /// systemd's sd_notify, when `NOTIFY_SOCKET` names a socket.
    pub(crate) notify: Notifier,
    /// `--ping`'s health-check pings.
    ping: Option<Pinger>,
    /// What the metrics file and the final ping are made of.
    pub(crate) facts: Rc<metrics::Facts>,
    metrics: RefCell<Option<metrics::MetricsFile>>,
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
                let metrics = metrics::MetricsFile::prepare(file, &plan.paths)?;
                metrics.warn_if_uncollected(&report);
                Some(metrics)
            }
            None => None,
        };
        Ok(Outputs {
            ping: Pinger::new(plan.ping, plan.ping_skipped, &report)?,
            report,
            notify: Notifier::from_env(),
            facts: Rc::new(metrics::Facts::new()),
            metrics: RefCell::new(metrics),
            finished: Cell::new(false),
        })
    }

    /// Connecting to take the locks, in `order`: systemd's STATUS.
    pub(crate) fn connecting(&self, order: &[&str]) {
        self.notify
            .status(|| format!("connecting to ZooKeeper for {}", order.join(" ")));
    }

    /// The command (or a hold) started under the lock: READY=1 with what
    /// is held (`env`, the command's), and the start ping on its thread.
    pub(crate) fn started(&self, env: &[(&'static str, String)]) {
        self.notify.ready(|| hold::held_status(env));
        if let Some(ping) = &self.ping {
            ping.started();
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

async fn lifecycle(plan: Plan<'_>, outputs: Rc<Outputs>) -> Result<Exit> {
    let out = &*outputs;
    let facts = &out.facts;
    let mut signals = Signals::install()?;
    // A typo in the command must not wait for the lock first; checked once
    // the metrics file is, so that it says so too.
    child::check_runnable(&plan.argv)?;
    if let Step::End(exit) = nested::reenter(&plan, out, &mut signals).await? {
        return Ok(exit);
    }
    // Dropped on every way out without the command (which kills its keeper).
    let prepared = Child::prepare(&plan.argv)?;
    let started = Instant::now();
    out.connecting(&plan.order);
    // Go: the command ran, with this exit; End: it was skipped.
    let command = async |session: &Session, signals: &mut Signals, taken: Taken| {
        let held = &taken.held;
        let owner = taken.owner;
        for node in held {
            plan.report.info(format_args!(
                "acquired {} (fencing token {}) after {}",
                node.path,
                node.czxid,
                human_duration(started.elapsed())
            ));
        }
        let env = command_environment(&plan.paths, &plan.order, held, owner, &plan.connect);
        facts.acquired(first_token(&plan.paths, &plan.order, held));
        let record = match once::check(&plan, session.client(), held, facts).await? {
            Step::Go(record) => record,
            Step::End(skipped) => return Ok(Step::End(skipped)),
        };
        facts.ran();
        let lock = HeldLock {
            nodes: held.iter().map(|node| node.path.clone()).collect(),
            watches: taken.watches,
            owner,
            policy: taken.policy,
            ours: true,
            record,
        };
        let exit = run_command(&plan, out, signals, session, lock, &env, prepared).await?;
        anyhow::Ok(Step::Go(exit))
    };
    let (ran, closed) = match take_locks(&plan, out, &mut signals, command).await? {
        Step::Go(done) => done,
        Step::End(exit) => return Ok(exit),
    };
    let exit = match ran? {
        Step::Go(exit) => exit,
        Step::End(skipped) => return Ok(skipped),
    };
    if closed.confirmed {
        plan.report
            .info(format_args!("released {}", plan.order.join(" ")));
    } else {
        plan.report.info(format_args!(
            "could not reach ZooKeeper to confirm the release of {}: it is released \
             when the session expires, within {} at the latest",
            plan.order.join(" "),
            human_duration(closed.timeout)
        ));
    }
    Ok(exit)
}

/// The fencing token of the first path given (for the metrics file), of
/// `held` in `order`.
pub(crate) fn first_token(paths: &[&str], order: &[&str], held: &[Node]) -> i64 {
    let first = order.iter().position(|p| *p == paths[0]);
    first.and_then(|i| held.get(i)).map_or(0, |node| node.czxid)
}
