//! The holder: zklock's own executable in a hidden mode, started by `zklock
//! hold`, in a session of its own (docs/design.md, "Holds"). This is the
//! process: its arguments, the bound process's pidfd, and the hand-over of
//! the variables on its stdout, after which it leaves the caller's stdio;
//! its life with the lock is `lifecycle.rs`.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use rustix::process::{Pid, Signal};
use tokio::io::unix::AsyncFd;

use crate::cli::{Cli, Command, HoldArgs, OnLost, RunArgs};
use crate::exit::{Exit, Failure};
use crate::run::drive;

/// argv[1] of the holder's hidden mode (see the keeper's).
pub const HIDDEN_MODE: &str = "\u{1}zk-holder";

pub fn is_hidden_mode() -> bool {
    std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == HIDDEN_MODE)
}

/// What the hold is bound to.
pub(super) struct Binding {
    /// The calling process, when bound to it: a pidfd, robust to the reuse
    /// of its pid.
    pub(super) bound: Option<Bound>,
    pub(super) max_hold: Option<Duration>,
    pub(super) on_lost: OnLost,
}

pub(super) struct Bound {
    pidfd: AsyncFd<OwnedFd>,
    pub(super) pid: i32,
    /// Its name (`comm`), if it could still be read.
    pub(super) name: Option<String>,
}

impl Bound {
    /// Resolves once the process has exited (its pidfd reads ready).
    pub(super) async fn exited(&self) {
        let _ = self.pidfd.readable().await;
    }

    pub(super) fn terminate(&self) {
        let _ = rustix::process::pidfd_send_signal(self.pidfd.get_ref(), Signal::TERM);
    }
}

/// The holder's main: `zklock HIDDEN_MODE CALLER BOUND hold ARGS...`, where
/// CALLER is the pid of the waiting `zklock hold` and BOUND the bound
/// process's pid (its pidfd is our stdin), or `-`.
pub fn main() -> Result<Exit> {
    let mut argv = std::env::args_os().skip(2);
    let caller = pid_arg(argv.next());
    let bound_pid = pid_arg(argv.next());
    // A session of our own: no terminal, no signal meant for the caller's
    // job reaches us (the waiting `zklock hold` forwards those).
    let _ = rustix::process::setsid();
    // Until the lock is held, end with the waiting `zklock hold`.
    rustix::process::set_parent_process_death_signal(Some(Signal::TERM))
        .context("setting the parent-death signal")?;
    if caller.is_none() || rustix::process::getppid().map(Pid::as_raw_pid) != caller {
        return Ok(Exit::Signal(libc::SIGTERM));
    }
    let given: Vec<OsString> = argv.collect();
    let args =
        match Cli::try_parse_from(std::iter::once(OsString::from("zklock")).chain(given.clone())) {
            Ok(Cli {
                command: Command::Hold(args),
            }) => args,
            _ => {
                return Err(Failure::usage(
                    "the holder's command line is not `hold ...`",
                ));
            }
        };
    let on_lost = args.on_lost();
    let HoldArgs { lock, max_hold, .. } = args;
    let max_hold = max_hold.map(|d| d.0);
    let args = RunArgs {
        lock,
        argv: Vec::new(),
        shell: None,
        kill_after: None,
        max_runtime: None,
    };
    let what: Vec<OsString> = std::iter::once("zklock".into()).chain(given).collect();
    let args = &args;
    drive(args, |outputs| async move {
        // In the runtime: the pidfd is registered with its reactor.
        let bound = match bound_pid {
            Some(pid) => Some(bound_from_stdin(pid)?),
            None => None,
        };
        let binding = Binding {
            bound,
            max_hold,
            on_lost,
        };
        super::lifecycle::lifecycle(args, what, binding, &outputs).await
    })
}

fn pid_arg(arg: Option<OsString>) -> Option<i32> {
    arg?.to_str()?.parse().ok()
}

/// The bound process's pidfd, which `zklock hold` passed as our stdin;
/// stdin becomes /dev/null.
fn bound_from_stdin(pid: i32) -> Result<Bound> {
    let stdin = rustix::stdio::stdin();
    let pidfd = rustix::io::fcntl_dupfd_cloexec(stdin, 3).context("taking the pidfd")?;
    rustix::stdio::dup2_stdin(dev_null()?)?;
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|name| name.trim_end().to_owned())
        .filter(|name| !name.is_empty());
    // SAFETY: the AsyncFd owns the descriptor, which is neither closed nor
    // replaced while it is registered.
    let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
        .context("watching the calling process")?;
    Ok(Bound { pidfd, pid, name })
}

/// Gives the variables to the waiting `zklock hold` (one JSON line on our
/// stdout), then leaves its stdout and stderr: nothing of ours reaches the
/// caller's terminal or pipes after it returned.
pub(super) fn hand_over(vars: &[(String, String)]) -> Result<()> {
    // Before the caller can exit: its end must not end us now.
    rustix::process::set_parent_process_death_signal(None)
        .context("clearing the parent-death signal")?;
    let line = format!("{}\n", serde_json::json!(vars));
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(line.as_bytes())
        .and_then(|()| stdout.flush())
        .context("handing the hold over to `zklock hold`")?;
    drop(stdout);
    let null = dev_null()?;
    rustix::stdio::dup2_stdout(&null)?;
    rustix::stdio::dup2_stderr(&null)?;
    Ok(())
}

/// What the holder's stdio becomes: nothing of the caller's stays open.
fn dev_null() -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR,
        rustix::fs::Mode::empty(),
    )
}
