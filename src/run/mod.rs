//! The lifecycle of `zklock run`, in order (DESIGN.md section 2):
//! signals, connect, acquire, spawn, supervise, reap, release, exit.

mod ancestor;
mod give_up;
mod metrics;
mod once;
mod reentry;
mod wait_report;

use std::cell::Cell;
use std::ffi::OsString;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::time::Instant;

use self::give_up::{GivenUp, deadline_after_first_look};
use self::wait_report::WaitReport;
use crate::cli::RunArgs;
use crate::command::child::{self, Child};
use crate::command::signals::{Signals, aborts_waiting};
use crate::exit::{Exit, Failure};
use crate::lock::acquire::{self, Acquired, Node, NodeWatch, Request};
use crate::lock::holder::OwnData;
use crate::lock::lease::{self, LeasePolicy};
use crate::lock::recipe::{LockKind, acquisition_order};
use crate::report::Report;
use crate::session::{Session, Settings, connection_timeout_for, is_session_lost};

pub fn run(args: RunArgs) -> Result<Exit> {
    // Before the runtime starts any thread: they inherit this mask.
    child::block_terminal_stops();
    let metrics = match &args.metrics_file {
        Some(file) => Some(metrics::MetricsFile::prepare(
            file,
            &args.lock_paths().map_err(Failure::usage)?,
        )?),
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

/// Everything decided from the command line before talking to ZooKeeper.
struct Plan<'a> {
    args: &'a RunArgs,
    argv: Vec<OsString>,
    /// The lock paths as given (for the environment) and in the order they
    /// are taken.
    paths: Vec<&'a str>,
    order: Vec<&'a str>,
    kind: LockKind,
    connect: Settings,
    /// The ACL of every node we create.
    acls: Vec<zookeeper_client::Acl>,
    wait: bool,
    /// What our nodes say about us (holder.rs), and the data they are
    /// created with.
    own: OwnData,
    data: Vec<u8>,
    report: Report,
}

impl<'a> Plan<'a> {
    fn new(args: &'a RunArgs) -> Result<Plan<'a>> {
        let argv = args.command_line().map_err(Failure::usage)?;
        let paths = args.lock_paths().map_err(Failure::usage)?;
        // A typo in the command must not wait for the lock first.
        child::check_runnable(&argv)?;
        let connect = Settings::resolve(&args.connection.given()).map_err(Failure::usage)?;
        let own = OwnData::new(&argv, args.label.as_deref());
        let plan = Plan {
            args,
            data: own.queued(),
            own,
            argv,
            order: acquisition_order(&paths),
            paths,
            kind: args.lock_kind(),
            acls: connect.acl.to_zk(),
            connect,
            wait: args.wait_limit() != Some(Duration::ZERO),
            report: Report(args.verbosity()),
        };
        // A --kill-after given must fit the session asked for (and, once
        // connected, the one granted); an unset one is chosen to fit.
        if args.kill_after.is_some() {
            plan.policy(plan.connect.session_timeout)
                .map_err(Failure::usage)?;
        }
        once::refuse(&plan)?;
        Ok(plan)
    }

    /// The lease rule for a (requested or granted) session timeout, with
    /// `--kill-after` as given (refused if it does not fit) or, if unset,
    /// the largest that fits.
    fn policy(&self, session_timeout: Duration) -> Result<LeasePolicy, String> {
        let policy = LeasePolicy {
            session_timeout,
            connection_timeout: connection_timeout_for(session_timeout),
            kill_after: self.args.kill_after.map_or(Duration::ZERO, |k| k.0),
            on_disconnect: self.args.on_disconnect,
            poll_nodes: self
                .connect
                .sasl
                .is_some()
                .then(|| connection_timeout_for(session_timeout) / 2),
        };
        match self.args.kill_after {
            Some(_) => policy.check().map(|()| policy),
            None => policy.with_default_kill_after(),
        }
    }
}

async fn lifecycle(args: RunArgs, facts: Rc<metrics::Facts>) -> Result<Exit> {
    let mut signals = Signals::install()?;
    let plan = Plan::new(&args)?;
    if let Some(exit) = reentry::reenter(&plan, &mut signals).await? {
        return Ok(exit);
    }
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
    let env = command_environment(&plan.paths, &plan.order, &held, session.id());
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
    let exit = run_command(&plan, &mut signals, &session, lock, policy, &env).await;
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
) -> Result<(Exit, bool)> {
    let child = Child::spawn(&plan.argv, env)?;
    let reattach = lease::Reattach {
        settings: plan.connect.clone(),
        session: session.client().session().clone(),
    };
    // One write per node, sent now that the command runs (never before: it
    // would delay the start by a round trip) and answered while it runs. Its
    // mtime dates the acquisition by the server's clock. The data watch the
    // lease keeps on our node fires on it; the lease watches again. A nested
    // run leaves the enclosing run's nodes as they are.
    let acquired = plan.own.acquired(child.pid());
    let recorded: Vec<_> = match lock.ours {
        true => lock
            .nodes
            .iter()
            .map(|node| session.client().set_data(node, &acquired, None))
            .collect(),
        false => Vec::new(),
    };
    let lease = lease::lost(
        session.client(),
        &lock.nodes,
        lock.watches,
        policy,
        &reattach,
        lock.owner,
    );
    // The answers matter to no one (correctness never depends on node
    // data); awaiting them only lets the library deliver them.
    let lost = async {
        tokio::pin!(lease);
        let recording = async {
            for write in recorded {
                let _ = write.await;
            }
        };
        tokio::select! {
            reason = &mut lease => return reason,
            () = recording => {}
        }
        lease.await
    };
    tokio::pin!(lost);
    let report = plan.report;
    let mut on_loss =
        |reason: &str| report.error(format_args!("lock lost: {reason}; terminating the command"));
    let exit = child::supervise(
        child,
        signals,
        lost.as_mut(),
        policy.kill_after,
        plan.args.max_runtime.map(|limit| limit.0),
        &mut on_loss,
    )
    .await;
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
    Ok((exit, deleted))
}

enum Taken {
    /// Every lock is ours; the nodes are in acquisition order, each with
    /// the watch set on it while waiting, if any.
    Held(Box<Session>, Vec<Node>, Vec<Option<NodeWatch>>, LeasePolicy),
    /// zklock ends without running the command.
    Ended(Exit),
}

/// Connects and takes every lock under one deadline. A lost session or node
/// while waiting means queueing again in a new session, deadline allowing.
async fn take_locks(plan: &Plan<'_>, signals: &mut Signals) -> Result<Taken> {
    let report = plan.report;
    let deadline = plan
        .args
        .wait_limit()
        .filter(|_| plan.wait)
        .map(|limit| Instant::now() + limit);
    loop {
        let (session, policy) = match connect(plan, signals).await? {
            Ok(connected) => connected,
            Err(exit) => return Ok(Taken::Ended(exit)),
        };
        let mut owned = Vec::new();
        let mut watches = Vec::new();
        let mut observer = WaitReport::new(report);
        let looked = observer.looked.clone();
        let unreachable_since = Cell::new(None);
        let waited = tokio::select! {
            result = acquire_all(plan, session.client(), &mut owned, &mut watches, &mut observer) => Waited::Done(result),
            () = deadline_after_first_look(deadline, &looked, &unreachable_since) => Waited::TimedOut,
            signal = abort_signal(signals) => Waited::Signal(signal),
            () = session.track_connection(&unreachable_since) => unreachable!("never resolves"),
        };
        let held_path = observer
            .current
            .clone()
            .unwrap_or_else(|| plan.order.join(" "));
        match waited {
            Waited::Done(Ok(Acquired::Held(..))) => {
                return Ok(Taken::Held(Box::new(session), owned, watches, policy));
            }
            Waited::Done(Ok(Acquired::Busy)) | Waited::TimedOut => {
                let given_up = GivenUp {
                    held_path: &held_path,
                    waited: plan.wait,
                    unreachable_since: unreachable_since.get(),
                };
                given_up.end(session, &owned, &observer, report).await;
                return Ok(Taken::Ended(Exit::Conflict(plan.args.conflict_exit_code)));
            }
            Waited::Signal(signal) => {
                let _ = session.close(&acquire::paths(&owned)).await;
                return Ok(Taken::Ended(Exit::Signal(signal)));
            }
            Waited::Done(Ok(Acquired::Lost)) => {
                let _ = session.close(&acquire::paths(&owned)).await;
                report.info(format_args!(
                    "our node vanished while waiting; queueing again in a new session"
                ));
            }
            Waited::Done(Err(err)) if err.downcast_ref().is_some_and(is_session_lost) => {
                let _ = session.close(&acquire::paths(&owned)).await;
                report.info(format_args!(
                    "session lost while waiting ({err:#}); queueing again"
                ));
            }
            Waited::Done(Err(err)) => {
                let _ = session.close(&acquire::paths(&owned)).await;
                if err.downcast_ref::<acquire::MissingChroot>().is_some() {
                    let hosts = &plan.connect.hosts;
                    return Err(Failure::usage(format!(
                        "the chroot {} given with -z does not exist at {}",
                        hosts.chroot().unwrap_or("/"),
                        hosts.connect_string()
                    )));
                }
                return Err(err);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            report.note(format_args!(
                "timed out waiting for {}",
                plan.order.join(" ")
            ));
            return Ok(Taken::Ended(Exit::Conflict(plan.args.conflict_exit_code)));
        }
    }
}

/// Connects, and applies the lease rule to the granted session timeout
/// (refusing a --kill-after that does not fit; choosing one if unset);
/// `Err(exit)` when a signal ended zklock meanwhile.
async fn connect(
    plan: &Plan<'_>,
    signals: &mut Signals,
) -> Result<Result<(Session, LeasePolicy), Exit>> {
    let session = tokio::select! {
        session = Session::connect(&plan.connect) => session?,
        signal = abort_signal(signals) => return Ok(Err(Exit::Signal(signal))),
    };
    plan.report.info(format_args!(
        "connected to {} (session {:#x}, timeout {})",
        plan.connect.hosts.connect_string(),
        session.id(),
        humantime::format_duration(session.timeout())
    ));
    if let Err(err) = session.check_acl(&plan.connect).await {
        let _ = session.close(&[]).await;
        return Err(err);
    }
    let policy = match plan.policy(session.timeout()) {
        Ok(policy) => policy,
        Err(why) => {
            let granted = humantime::format_duration(session_timeout_ms(&session));
            let _ = session.close(&[]).await;
            return Err(Failure::usage(match plan.args.kill_after {
                Some(_) => format!("the ensemble granted a shorter session ({granted}): {why}"),
                None => format!("the ensemble granted a {granted} session: {why}"),
            }));
        }
    };
    if plan.args.kill_after.is_none() {
        let kill_after = humantime::format_duration(policy.kill_after);
        let granted = humantime::format_duration(session_timeout_ms(&session));
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
    Ok(Ok((session, policy)))
}

/// Takes the locks one by one in acquisition order. On success `owned`
/// holds exactly the held nodes, in that order.
async fn acquire_all(
    plan: &Plan<'_>,
    client: &zookeeper_client::Client,
    owned: &mut Vec<Node>,
    watches: &mut Vec<Option<NodeWatch>>,
    observer: &mut WaitReport,
) -> Result<Acquired> {
    let mut last = Acquired::Busy;
    for dir in &plan.order {
        observer.current = Some((*dir).to_owned());
        let request = Request {
            client,
            dir,
            kind: plan.kind,
            data: &plan.data,
            wait: plan.wait,
            acls: &plan.acls,
        };
        last = acquire::acquire(&request, owned, observer).await?;
        match &mut last {
            Acquired::Held(_, watch) => watches.push(watch.take()),
            _ => return Ok(last),
        }
    }
    Ok(last)
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
    vec![
        ("ZKLOCK_PATH", paths.join("\n")),
        ("ZKLOCK_NODE", lines(&|node| node.path.clone())),
        (
            "ZKLOCK_FENCING_TOKEN",
            lines(&|node| node.czxid.to_string()),
        ),
        ("ZKLOCK_SESSION_ID", format!("{session:#x}")),
    ]
}

enum Waited {
    Done(Result<Acquired>),
    TimedOut,
    Signal(i32),
}

/// Resolves with the first signal that should end zklock while it connects
/// or waits.
async fn abort_signal(signals: &mut Signals) -> i32 {
    loop {
        let signal = signals.recv().await;
        if signal != libc::SIGCHLD && aborts_waiting(signal) {
            return signal;
        }
    }
}

/// The granted session timeout, to the millisecond (for messages).
pub(crate) fn session_timeout_ms(session: &Session) -> Duration {
    Duration::from_millis(session.timeout().as_millis() as u64)
}
