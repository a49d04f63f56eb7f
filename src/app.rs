//! The lifecycle of `zklock run`, in order (DESIGN.md section 2):
//! signals, connect, acquire, spawn, supervise, reap, release, exit.

use std::time::Duration;

use anyhow::{Context, Result};
use tokio::time::Instant;

use crate::child::{self, Child};
use crate::cli::{Cli, Command, RunArgs, Verbosity};
use crate::exit::{Exit, Failure};
use crate::holder;
use crate::lease::{self, LeasePolicy};
use crate::recipe::{self, Acquired, Kind, Node, Observer};
use crate::signals::{Signals, aborts_waiting};
use crate::zk::{ConnectOptions, Session, connection_timeout_for, is_session_lost};

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

async fn lifecycle(args: RunArgs) -> Result<Exit> {
    let mut signals = Signals::install()?;
    let report = Report(args.verbosity());
    let argv = args.command_line().map_err(Failure::usage)?;
    let path = args.path.as_str();
    let connect = ConnectOptions {
        hosts: args.connection.hosts.clone(),
        session_timeout: args.connection.session_timeout.0,
        connect_timeout: args.connection.connect_timeout.0,
    };
    let policy_for = |session_timeout: Duration| LeasePolicy {
        session_timeout,
        connection_timeout: connection_timeout_for(session_timeout),
        kill_after: args.kill_after.0,
        on_disconnect: args.on_disconnect,
    };
    policy_for(connect.session_timeout)
        .check()
        .map_err(Failure::usage)?;
    let wait_limit = args.wait_limit();
    let wait = wait_limit != Some(Duration::ZERO);
    let started = Instant::now();
    let deadline = wait_limit.filter(|_| wait).map(|limit| started + limit);
    let data = holder::describe_self(&argv);

    let (session, node) = loop {
        let session = tokio::select! {
            session = Session::connect(&connect) => session?,
            signal = abort_signal(&mut signals) => return Ok(Exit::Signal(signal)),
        };
        report.info(format_args!(
            "connected to {} (session {:#x}, timeout {})",
            connect.hosts.connect_string(),
            session.id(),
            humantime::format_duration(session.timeout())
        ));
        if let Err(why) = policy_for(session.timeout()).check() {
            session.close(None).await;
            return Err(Failure::usage(format!(
                "the ensemble granted a shorter session: {why}"
            )));
        }
        let mut slot: Option<Node> = None;
        let mut observer = WaitReport {
            report,
            first: None,
            first_data: None,
        };
        let waited = tokio::select! {
            result = recipe::acquire(session.client(), path, Kind::Exclusive, &data, wait, &mut slot, &mut observer) => {
                Waited::Done(result)
            }
            () = sleep_until(deadline) => Waited::TimedOut,
            signal = abort_signal(&mut signals) => Waited::Signal(signal),
        };
        let node_path = slot.as_ref().map(|node| node.path.as_str());
        match waited {
            Waited::Done(Ok(Acquired::Held)) => {
                break (session, slot.expect("held implies a node"));
            }
            Waited::Done(Ok(Acquired::Busy)) | Waited::TimedOut => {
                let holder = observer.holder_description(&session).await;
                session.close(node_path).await;
                let why = if wait {
                    "timed out waiting for"
                } else {
                    "not waiting for"
                };
                report.note(format_args!("{why} {path}{holder}"));
                return Ok(Exit::Conflict(args.conflict_exit_code));
            }
            Waited::Signal(signal) => {
                session.close(node_path).await;
                return Ok(Exit::Signal(signal));
            }
            Waited::Done(Ok(Acquired::Lost)) => {
                session.close(node_path).await;
                report.info(format_args!(
                    "our node vanished while waiting; queueing again in a new session"
                ));
            }
            Waited::Done(Err(err)) if err.downcast_ref().is_some_and(is_session_lost) => {
                session.close(node_path).await;
                report.info(format_args!(
                    "session lost while waiting ({err:#}); queueing again"
                ));
            }
            Waited::Done(Err(err)) => {
                session.close(node_path).await;
                return Err(err);
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            report.note(format_args!("timed out waiting for {path}"));
            return Ok(Exit::Conflict(args.conflict_exit_code));
        }
    };

    report.info(format_args!(
        "acquired {path} as {} (fencing token {}) after {}",
        node.name(),
        node.czxid,
        humantime::format_duration(Duration::from_millis(started.elapsed().as_millis() as u64))
    ));
    let env = [
        ("ZKLOCK_PATH", path.to_owned()),
        ("ZKLOCK_NODE", node.path.clone()),
        ("ZKLOCK_FENCING_TOKEN", node.czxid.to_string()),
        ("ZKLOCK_SESSION_ID", format!("{:#x}", session.id())),
    ];
    let child = match Child::spawn(&argv, &env) {
        Ok(child) => child,
        Err(err) => {
            session.close(Some(&node.path)).await;
            return Err(err);
        }
    };
    let exit = {
        let lost = lease::lost(session.client(), &node.path, policy_for(session.timeout()));
        tokio::pin!(lost);
        let mut on_loss = |reason: &str| {
            report.error(format_args!("lock lost: {reason}; terminating the command"))
        };
        child::supervise(
            child,
            &mut signals,
            lost.as_mut(),
            args.kill_after.0,
            &mut on_loss,
        )
        .await
    };
    session.close(Some(&node.path)).await;
    report.info(format_args!("released {path}"));
    Ok(exit)
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

/// Messages on stderr, by verbosity.
#[derive(Clone, Copy)]
struct Report(Verbosity);

impl Report {
    /// Progress, shown with `-v`.
    fn info(self, message: std::fmt::Arguments<'_>) {
        if self.0 >= Verbosity::Verbose {
            eprintln!("zklock: {message}");
        }
    }

    /// Expected outcomes worth a line (gave up waiting), hidden by `-q`.
    fn note(self, message: std::fmt::Arguments<'_>) {
        if self.0 >= Verbosity::Normal {
            eprintln!("zklock: {message}");
        }
    }

    /// Always shown.
    fn error(self, message: std::fmt::Arguments<'_>) {
        eprintln!("zklock: {message}");
    }
}

/// Reports the queue while waiting and remembers who was first, to say who
/// held the lock if we give up.
struct WaitReport {
    report: Report,
    first: Option<String>,
    first_data: Option<Vec<u8>>,
}

impl Observer for WaitReport {
    fn queued(&mut self, node: &Node) {
        self.report.info(format_args!("queued as {}", node.path));
    }

    fn waiting(&mut self, ahead: usize, first: &str, first_data: Option<&[u8]>) {
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
}

impl WaitReport {
    /// `: held by pid ... on ...`, read now if not read while waiting.
    async fn holder_description(&self, session: &Session) -> String {
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
