//! The lifecycle of `zklock run`, in order (DESIGN.md section 2):
//! signals, connect, acquire, spawn, supervise, reap, release, exit.

mod wait_report;

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::time::Instant;

use self::wait_report::WaitReport;
use crate::cli::{Cli, Command, RunArgs};
use crate::command::child::{self, Child};
use crate::command::signals::{Signals, aborts_waiting};
use crate::exit::{Exit, Failure};
use crate::lock::acquire::{self, Acquired, Node, NodeWatch, Request};
use crate::lock::holder;
use crate::lock::lease::{self, LeasePolicy};
use crate::lock::recipe::{LockKind, acquisition_order};
use crate::report::Report;
use crate::session::{Session, Settings, connection_timeout_for, is_session_lost};

pub fn run(cli: Cli) -> Result<Exit> {
    match cli.command {
        Command::Run(args) => run_locked(args),
    }
}

fn run_locked(args: RunArgs) -> Result<Exit> {
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
    connect: Settings,
    /// The ACL of every node we create.
    acls: Vec<zookeeper_client::Acl>,
    wait: bool,
    data: Vec<u8>,
    report: Report,
}

impl<'a> Plan<'a> {
    fn new(args: &'a RunArgs) -> Result<Plan<'a>> {
        let argv = args.command_line().map_err(Failure::usage)?;
        let paths = args.lock_paths().map_err(Failure::usage)?;
        let connect = Settings::resolve(&args.connection.given()).map_err(Failure::usage)?;
        let plan = Plan {
            args,
            data: holder::describe_self(&argv),
            argv,
            order: acquisition_order(&paths),
            paths,
            kind: args.lock_kind(),
            acls: connect.acl.to_zk(),
            connect,
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
            poll_nodes: self
                .connect
                .sasl
                .is_some()
                .then(|| connection_timeout_for(session_timeout) / 2),
        }
    }
}

async fn lifecycle(args: RunArgs) -> Result<Exit> {
    let mut signals = Signals::install()?;
    let plan = Plan::new(&args)?;
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
    let child = match Child::spawn(&plan.argv, &env) {
        Ok(child) => child,
        Err(err) => {
            session.close(&acquire::paths(&held)).await;
            return Err(err);
        }
    };
    let exit = {
        let nodes: Vec<String> = held.iter().map(|node| node.path.clone()).collect();
        let reattach = lease::Reattach {
            settings: plan.connect.clone(),
            session: session.client().session().clone(),
        };
        let lost = lease::lost(
            session.client(),
            &nodes,
            watches,
            plan.policy(session.timeout()),
            &reattach,
        );
        tokio::pin!(lost);
        let report = plan.report;
        let mut on_loss = |reason: &str| {
            report.error(format_args!("lock lost: {reason}; terminating the command"))
        };
        let exit = child::supervise(
            child,
            &mut signals,
            lost.as_mut(),
            args.kill_after.0,
            &mut on_loss,
        )
        .await;
        // Delete while the lease still watches our nodes: the deletion fires
        // and so consumes that watch. Dropping the lease first would make the
        // library send a RemoveWatches request, which the server must serve
        // before the delete that the next waiter is waiting for.
        session.delete(&acquire::paths(&held)).await;
        exit
    };
    session.close(&[]).await;
    plan.report
        .info(format_args!("released {}", plan.order.join(" ")));
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
        let session = tokio::select! {
            session = Session::connect(&plan.connect) => session?,
            signal = abort_signal(signals) => return Ok(Taken::Ended(Exit::Signal(signal))),
        };
        report.info(format_args!(
            "connected to {} (session {:#x}, timeout {})",
            plan.connect.hosts.connect_string(),
            session.id(),
            humantime::format_duration(session.timeout())
        ));
        if let Err(err) = session.check_acl(&plan.connect).await {
            session.close(&[]).await;
            return Err(err);
        }
        if let Err(why) = plan.policy(session.timeout()).check() {
            session.close(&[]).await;
            return Err(Failure::usage(format!(
                "the ensemble granted a shorter session: {why}"
            )));
        }
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
