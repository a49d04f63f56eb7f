//! The holder: zklock's own executable in a hidden mode, started by `zklock
//! hold`, in a session of its own (docs/design.md, "Holds"). This is the
//! process and its arguments; what it is bound to is `bound.rs`, its life
//! with the lock (and the hand-over of the variables) `lifecycle.rs`.

use std::ffi::OsString;

use anyhow::{Context, Result};
use clap::Parser;
use rustix::process::{Pid, Signal};

use super::bound::{Binding, bound_from_stdin};
use crate::cli::{Cli, Command, HoldArgs};
use crate::exit::{Exit, Failure};
use crate::run::plan::Plan;
use crate::run::{Outputs, drive};

/// argv[1] of the holder's hidden mode (see the keeper's).
pub const HIDDEN_MODE: &str = "\u{1}zk-holder";

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
        ..
    } = args;
    let max_hold = max_hold.map(|d| d.0);
    let what: Vec<OsString> = std::iter::once("zklock".into()).chain(given).collect();
    let plan = Plan::holding(&lock, what)?;
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
        };
        super::lifecycle::lifecycle(plan, binding, &outputs).await
    })
}

fn pid_arg(arg: Option<OsString>) -> Option<i32> {
    arg?.to_str()?.parse().ok()
}
