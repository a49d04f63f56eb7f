//! The holder: zklock's own executable in a hidden mode, started by `zklock
//! hold`, in a session of its own (docs/design.md, "Holds"). This is the
//! process and its arguments; what it is bound to is `bound.rs`, its life
//! with the lock (and the hand-over of the variables) `lifecycle.rs`.

use std::ffi::OsString;

use anyhow::{Context, Result};
use clap::Parser;
use rustix::process::{Pid, Signal};

use super::bound::{Binding, bound_from_stdin};
use super::owner::Owner;
use super::runtime;
use crate::cli::{Cli, Command, HoldArgs};
use crate::exit::{Exit, Failure};
use crate::run::plan::Plan;
use crate::run::{Outputs, drive};

/// argv[1] of the holder's hidden mode (see the keeper's).
pub const HIDDEN_MODE: &str = "\u{1}zk-holder";
/// The holder's process name: `pgrep zklock` finds it, as any zklock.
const NAME: &str = "zklock-holder";

pub fn is_hidden_mode() -> bool {
    std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == HIDDEN_MODE)
}

/// The holder's main: `zklock HIDDEN_MODE CALLER BOUND hold ARGS...`, where
/// CALLER is the pid of the waiting `zklock hold` and BOUND the calling
/// process's pid (its pidfd is our stdin): the one bound to, unless
/// --until-released.
pub fn main() -> Result<Exit> {
    let mut argv = std::env::args_os().skip(2);
    let caller = pid_arg(argv.next());
    let bound_pid = pid_arg(argv.next());
    // Named for `ps` (our executable's name is `exe`, from /proc/self/exe).
    let _ = std::fs::write("/proc/self/comm", NAME);
    // Nothing of the caller's stays open in us: an inherited descriptor
    // (a flock(1) lock, a pipe a reader waits to see closed) would outlive
    // the script. Our stdio and the pidfd on stdin are all we need.
    // SAFETY: nothing of ours is open above stdio yet (main comes here
    // first), so no owned descriptor is closed behind its owner's back.
    unsafe { libc::close_range(3, libc::c_uint::MAX, 0) };
    // Whose the hold is (`release PATH`): the caller's session, taken
    // before we leave it.
    let owner = Owner::current();
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
    let HoldArgs {
        lock,
        max_hold,
        until_released,
        kill_after,
        ..
    } = args;
    let max_hold = max_hold.map(|d| d.0);
    let what: Vec<OsString> = std::iter::once("zklock".into()).chain(given).collect();
    let plan = Plan::holding(&lock, what, kill_after)?;
    // Where the socket will be, checked before the wait, not after it.
    runtime::for_holder()?;
    let outputs = Outputs::new(&plan)?;
    drive(outputs, |outputs| async move {
        // In the runtime: the pidfd is registered with its reactor.
        let caller = bound_pid
            .ok_or_else(|| Failure::usage("the holder's command line names no calling process"))?;
        let binding = Binding {
            caller: bound_from_stdin(caller)?,
            until_released,
            max_hold,
            on_lost,
            owner,
        };
        super::lifecycle::lifecycle(plan, binding, &outputs).await
    })
}

fn pid_arg(arg: Option<OsString>) -> Option<i32> {
    arg?.to_str()?.parse().ok()
}
