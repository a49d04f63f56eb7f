//! The lifecycle of `zklock run`, in order (DESIGN.md section 2):
//! signals, connect, acquire, spawn, supervise, reap, release, exit.

mod ancestor;
mod reentry;
mod wait_report;

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::time::Instant;

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
use crate::session::{ConnectOptions, Session, connection_timeout_for, is_session_lost};

pub fn run(args: RunArgs) -> Result<Exit> {
    // Before the runtime starts any thread: they inherit this mask.
    child::block_terminal_stops();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(lifecycle(args))
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
    connect: ConnectOptions,
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
        let own = OwnData::new(&argv, args.label.as_deref());
        let plan = Plan {
            args,
            data: own.queued(),
            own,
            argv,
            order: acquisition_order(&paths),
            paths,
            kind: args.lock_kind(),
            connect: ConnectOptions {
                hosts: args.connection.hosts.clone(),
                session_timeout: args.connection.session_timeout.0,
                connect_timeout: args.connection.connect_timeout.0,
            },
            wait: args.wait_limit() != Some(Duration::ZERO),
            report: Report(args.verbosity()),
        };
        plan.policy(plan.connect.session_timeout)
            .check()
            .map_err(Failure::usage)?;
        Ok(plan)
    }

    /// The lease rule for a (requested or granted) session timeout.
    fn policy(&self, session_timeout: Duration) -> LeasePolicy {
        LeasePolicy {
            session_timeout,
            connection_timeout: connection_timeout_for(session_timeout),
            kill_after: self.args.kill_after.0,
            on_disconnect: self.args.on_disconnect,
        }
    }
}

async fn lifecycle(args: RunArgs) -> Result<Exit> {
    let mut signals = Signals::install()?;
    let plan = Plan::new(&args)?;
    if let Some(exit) = reentry::reenter(&plan, &mut signals).await? {
        return Ok(exit);
    }
    let started = Instant::now();
    let (session, held, watches) = match take_locks(&plan, &mut signals).await? {
        Taken::Held(session, held, watches) => (session, held, watches),
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
    let lock = HeldLock {
        nodes: held.iter().map(|node| node.path.clone()).collect(),
        watches,
        owner: session.id(),
        ours: true,
    };
    match run_command(&plan, &mut signals, &session, lock, &env).await {
        Ok(exit) => {
            session.close(&[]).await;
            plan.report
                .info(format_args!("released {}", plan.order.join(" ")));
            Ok(exit)
        }
        Err(err) => {
            session.close(&acquire::paths(&held)).await;
            Err(err)
        }
    }
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
}

/// Spawns the command and supervises it while `lock` holds; then deletes
/// the lock's nodes if they are ours. On an error before the command ran,
/// nothing is deleted: the caller cleans up.
async fn run_command(
    plan: &Plan<'_>,
    signals: &mut Signals,
    session: &Session,
    lock: HeldLock,
    env: &[(&'static str, String)],
) -> Result<Exit> {
    let child = Child::spawn(&plan.argv, env)?;
    let reattach = lease::Reattach {
        hosts: plan.connect.hosts.connect_string().to_owned(),
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
        plan.policy(session.timeout()),
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
        plan.args.kill_after.0,
        &mut on_loss,
    )
    .await;
    // Delete while the lease still watches our nodes: the deletion fires
    // and so consumes that watch. Dropping the lease first would make the
    // library send a RemoveWatches request, which the server must serve
    // before the delete that the next waiter is waiting for.
    if lock.ours {
        let nodes: Vec<&str> = lock.nodes.iter().map(String::as_str).collect();
        session.delete(&nodes).await;
    }
    Ok(exit)
}

enum Taken {
    /// Every lock is ours; the nodes are in acquisition order, each with
    /// the watch set on it while waiting, if any.
    Held(Session, Vec<Node>, Vec<Option<NodeWatch>>),
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
        let session = match connect(plan, signals).await? {
            Ok(session) => session,
            Err(exit) => return Ok(Taken::Ended(exit)),
        };
        let mut owned = Vec::new();
        let mut watches = Vec::new();
        let mut observer = WaitReport::new(report);
        let waited = tokio::select! {
            result = acquire_all(plan, session.client(), &mut owned, &mut watches, &mut observer) => Waited::Done(result),
            () = sleep_until(deadline) => Waited::TimedOut,
            signal = abort_signal(signals) => Waited::Signal(signal),
        };
        match waited {
            Waited::Done(Ok(Acquired::Held(..))) => {
                return Ok(Taken::Held(session, owned, watches));
            }
            Waited::Done(Ok(Acquired::Busy)) | Waited::TimedOut => {
                let holder = observer.holder_description(&session).await;
                session.close(&acquire::paths(&owned)).await;
                let why = if plan.wait {
                    "timed out waiting for"
                } else {
                    "not waiting for"
                };
                report.note(format_args!("{why} {}{holder}", plan.order.join(" ")));
                return Ok(Taken::Ended(Exit::Conflict(plan.args.conflict_exit_code)));
            }
            Waited::Signal(signal) => {
                session.close(&acquire::paths(&owned)).await;
                return Ok(Taken::Ended(Exit::Signal(signal)));
            }
            Waited::Done(Ok(Acquired::Lost)) => {
                session.close(&acquire::paths(&owned)).await;
                report.info(format_args!(
                    "our node vanished while waiting; queueing again in a new session"
                ));
            }
            Waited::Done(Err(err)) if err.downcast_ref().is_some_and(is_session_lost) => {
                session.close(&acquire::paths(&owned)).await;
                report.info(format_args!(
                    "session lost while waiting ({err:#}); queueing again"
                ));
            }
            Waited::Done(Err(err)) => {
                session.close(&acquire::paths(&owned)).await;
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

/// Connects, and checks the lease rule against the granted session timeout;
/// `Err(exit)` when a signal ended zklock meanwhile.
async fn connect(plan: &Plan<'_>, signals: &mut Signals) -> Result<Result<Session, Exit>> {
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
    if let Err(why) = plan.policy(session.timeout()).check() {
        session.close(&[]).await;
        return Err(Failure::usage(format!(
            "the ensemble granted a shorter session: {why}"
        )));
    }
    Ok(Ok(session))
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
        let request = Request {
            client,
            dir,
            kind: plan.kind,
            data: &plan.data,
            wait: plan.wait,
        };
        last = acquire::acquire(&request, owned, observer).await?;
        match &mut last {
            Acquired::Held(_, watch) => watches.push(watch.take()),
            _ => return Ok(last),
        }
    }
    Ok(last)
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

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
