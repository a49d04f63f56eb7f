//! The lifecycle of `zklock run`, in order (DESIGN.md section 2):
//! signals, connect, acquire, spawn, supervise, reap, release, exit.

mod ancestor;
mod give_up;
mod metrics;
mod once;
mod plan;
mod reentry;
mod take;
mod wait_display;
mod wait_report;

use std::rc::Rc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::time::Instant;

use self::plan::Plan;
use self::take::{Taken, connect, take_locks};
use crate::cli::RunArgs;
use crate::command::child::{self, Child, Prepared};
use crate::command::signals::Signals;
use crate::exit::{Exit, Failure};
use crate::lock::acquire::{self, Node, NodeWatch};
use crate::lock::lease::{self, LeasePolicy};
use crate::report::Report;
use crate::session::Session;

pub fn run(args: RunArgs) -> Result<Exit> {
    // Before the runtime starts any thread: they inherit this mask.
    child::block_terminal_stops();
    let metrics = match &args.metrics_file {
        Some(file) => {
            let metrics =
                metrics::MetricsFile::prepare(file, &args.lock_paths().map_err(Failure::usage)?)?;
            metrics.warn_if_uncollected(Report(args.verbosity()));
            Some(metrics)
        }
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let facts = Rc::new(metrics::Facts::new());
    let verbosity = args.verbosity();
    let result = runtime.block_on(lifecycle(args, Rc::clone(&facts)));
    // Do not wait for a DNS lookup that is still running (see
    // session::diagnose): its answer no longer matters.
    runtime.shutdown_background();
    if let Some(metrics) = metrics {
        if let Err(err) = metrics.write(&result, &facts) {
            Report(verbosity).error(format_args!(
                "cannot write the metrics file {}: {err}",
                metrics.path().display()
            ));
        }
    }
    result
}

async fn lifecycle(args: RunArgs, facts: Rc<metrics::Facts>) -> Result<Exit> {
    let mut signals = Signals::install()?;
    let plan = Plan::new(&args)?;
    if let Some(exit) = reentry::reenter(&plan, &mut signals).await? {
        return Ok(exit);
    }
    // Dropped on every way out without the command (which kills its keeper).
    let prepared = Child::prepare(&plan.argv)?;
    let started = Instant::now();
    let (session, held, watches, policy) = match take_locks(&plan, &mut signals).await? {
        Taken::Held(session, held, watches, policy) => (*session, held, watches, policy),
        Taken::Ended(exit) => return Ok(exit),
    };
    for node in &held {
        plan.report.info(format_args!(
            "acquired {} (fencing token {}) after {}",
            node.path,
            node.czxid,
            humantime::format_duration(Duration::from_millis(started.elapsed().as_millis() as u64))
        ));
    }
    let env = command_environment(&plan.paths, &plan.order, &held, session.id(), &plan.connect);
    facts.acquired(first_token(&plan, &held));
    let record = match once::check(&plan, session.client(), &held, &facts).await {
        Ok(Ok(record)) => record,
        Ok(Err(skipped)) => {
            session.close(&acquire::paths(&held)).await;
            return Ok(skipped);
        }
        Err(err) => {
            session.close(&acquire::paths(&held)).await;
            return Err(err);
        }
    };
    facts.ran();
    let lock = HeldLock {
        nodes: held.iter().map(|node| node.path.clone()).collect(),
        watches,
        owner: session.id(),
        ours: true,
        record,
    };
    let exit = run_command(&plan, &mut signals, &session, lock, policy, &env, prepared).await;
    let timeout = session.timeout();
    let (exit, deleted) = match exit {
        Ok(done) => done,
        Err(err) => {
            let _ = session.close(&acquire::paths(&held)).await;
            return Err(err);
        }
    };
    session.close(&[]).await;
    if deleted {
        plan.report
            .info(format_args!("released {}", plan.order.join(" ")));
    } else {
        plan.report.info(format_args!(
            "could not reach ZooKeeper to confirm the release of {}: it is released \
             when the session expires, within {} at the latest",
            plan.order.join(" "),
            humantime::format_duration(timeout)
        ));
    }
    Ok(exit)
}

/// How long the command runs before zklock records the acquisition in its
/// node (see `run_command`); the recorded time is at most this late.
const ACQUIRED_WRITE_DELAY: Duration = Duration::from_millis(20);

/// The lock the command runs under, as the lease watches it.
struct HeldLock {
    nodes: Vec<String>,
    /// The watches set on `nodes` while waiting, by position.
    watches: Vec<Option<NodeWatch>>,
    /// The session that owns `nodes`.
    owner: i64,
    /// Whether `nodes` are ours to delete once the command is done (not
    /// when a nested run re-entered an enclosing run's lock).
    ours: bool,
    /// The `--once-per` run to record before releasing the lock.
    record: Option<once::Pending>,
}

/// Spawns the command and supervises it while `lock` holds; then deletes
/// the lock's nodes if they are ours. The exit, and whether the server
/// confirmed the deletes. On an error before the command ran, nothing is
/// deleted: the caller cleans up.
async fn run_command(
    plan: &Plan<'_>,
    signals: &mut Signals,
    session: &Session,
    lock: HeldLock,
    policy: LeasePolicy,
    env: &[(&'static str, String)],
    prepared: Prepared,
) -> Result<(Exit, bool)> {
    let child = Child::spawn(prepared, env)?;
    let reattach = lease::Reattach {
        settings: plan.connect.clone(),
        session: session.client().session().clone(),
    };
    // One write per node, dating the acquisition by the server's clock (its
    // mtime) and naming the command's pid. Never before the command starts
    // (it would delay the start by a round trip), and only once the command
    // has run for ACQUIRED_WRITE_DELAY: on one session the server serves
    // requests in order, so a write still in flight when a short command
    // ends would hold up the delete the next waiter is waiting for (bench/
    // RESULTS.md measured +20-40 % on the hand-off). A watch from waiting
    // fires on it and the lease watches again; a node taken without waiting
    // is first watched after the write (`lease::WatchFrom`). A nested run
    // leaves the enclosing run's nodes as they are.
    let acquired = plan.own.acquired(child.pid());
    let (written, unwatched_from) = tokio::sync::watch::channel(false);
    let lease = lease::lost(
        session.client(),
        &lock.nodes,
        lock.watches,
        unwatched_from,
        policy,
        &reattach,
        lock.owner,
        plan.report,
    );
    // The answers matter to no one (correctness never depends on node
    // data); awaiting them only lets the library deliver them.
    let recording = async {
        let written = written;
        if !lock.ours {
            return; // `written` dropped: the lease watches at once
        }
        tokio::time::sleep(ACQUIRED_WRITE_DELAY).await;
        // The library sends a request when it is called, so the lease's
        // reads go out after these writes.
        let writes: Vec<_> = lock
            .nodes
            .iter()
            .map(|node| session.client().set_data(node, &acquired, None))
            .collect();
        let _ = written.send(true);
        for write in writes {
            let _ = write.await;
        }
    };
    let lost = async {
        tokio::pin!(lease);
        tokio::select! {
            reason = &mut lease => return reason,
            () = recording => {}
        }
        lease.await
    };
    tokio::pin!(lost);
    let report = plan.report;
    let limits = child::Limits {
        kill_after: policy.kill_after,
        max_runtime: plan.args.runtime_limit(),
        stop_limit: policy.grace(),
    };
    let (exit, keeper) = child::supervise(child, signals, lost.as_mut(), limits, report).await;
    if exit == Exit::TimedOut {
        report.error(format_args!(
            "the command ran longer than --max-runtime {}; terminated",
            plan.args
                .max_runtime
                .map(|limit| limit.to_string())
                .unwrap_or_default()
        ));
    }
    if let Some(record) = lock.record {
        record.finish(plan, session.client(), exit).await;
    }
    // Delete while the lease still watches our nodes: the deletion fires
    // and so consumes that watch. Dropping the lease first would make the
    // library send a RemoveWatches request, which the server must serve
    // before the delete that the next waiter is waiting for.
    let deleted = if lock.ours {
        let nodes: Vec<&str> = lock.nodes.iter().map(String::as_str).collect();
        session.delete(&nodes).await
    } else {
        true
    };
    keeper.end_with_zklock();
    Ok((exit, deleted))
}

/// The fencing token of the first path given (for the metrics file).
fn first_token(plan: &Plan<'_>, held: &[Node]) -> i64 {
    let first = plan.order.iter().position(|p| *p == plan.paths[0]);
    first.and_then(|i| held.get(i)).map_or(0, |node| node.czxid)
}

/// The contract of DESIGN.md section 7. With several paths, each variable
/// lists one line per path, in the order the paths were given.
fn command_environment(
    paths: &[&str],
    order: &[&str],
    held: &[Node],
    session: i64,
    connect: &crate::session::Settings,
) -> Vec<(&'static str, String)> {
    let node_of = |path: &str| {
        &held[order
            .iter()
            .position(|p| *p == path)
            .expect("every path is held")]
    };
    let lines = |f: &dyn Fn(&Node) -> String| {
        paths
            .iter()
            .map(|p| f(node_of(p)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut env = vec![
        ("ZKLOCK_PATH", paths.join("\n")),
        ("ZKLOCK_NODE", lines(&|node| node.path.clone())),
        (
            "ZKLOCK_FENCING_TOKEN",
            lines(&|node| node.czxid.to_string()),
        ),
        ("ZKLOCK_SESSION_ID", format!("{session:#x}")),
    ];
    env.extend(connect.passed_on());
    env
}

/// The granted session timeout, to the millisecond (for messages).
pub(crate) fn session_timeout_ms(session: &Session) -> Duration {
    Duration::from_millis(session.timeout().as_millis() as u64)
}
