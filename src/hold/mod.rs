//! `zklock hold` and `zklock release` (docs/design.md, "Holds"): a lock
//! kept across a script's or a CI job's steps by a holder process of its
//! own (`holder.rs`), reached through a per-user control socket
//! (`control.rs`); the variables printed for the shell (`format.rs`).

mod bound;
mod caller;
mod client;
mod control;
mod format;
mod guard;
pub mod holder;
mod lifecycle;
mod linger;
mod owner;
mod release;
mod runtime;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result};
use rustix::process::{Pid, PidfdFlags, Signal};

pub use self::release::release;
use crate::cli::{HoldArgs, OnLost};
use crate::command::signals::FORWARDED;
use crate::exit::{Exit, Failure};

/// `zklock hold`: starts the holder, which waits as `zklock run` does on
/// our stderr; prints the variables it hands over once it holds, or exits
/// as it did when it does not.
pub fn hold(args: HoldArgs) -> Result<Exit> {
    if args.until_released && args.on_lost == Some(OnLost::Term) {
        return Err(Failure::usage(
            "--on-lost term needs a calling process to signal; --until-released has none",
        ));
    }
    if args.max_hold.is_some_and(|max| max.0.is_zero()) {
        return Err(Failure::usage("--max-hold must be more than 0"));
    }
    let (pid, pidfd) = caller::bound_process()?;
    let mut holder = Command::new("/proc/self/exe");
    holder
        .arg0("zklock")
        .arg(holder::HIDDEN_MODE)
        .arg(std::process::id().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    holder.arg(pid.to_string()).stdin(Stdio::from(pidfd));
    // `hold` and its arguments, as given.
    holder.args(std::env::args_os().skip(1));
    let mut child = holder.spawn().context("starting the holder process")?;
    // The holder is in a session of its own: a Ctrl-C or a TERM meant for
    // us while it waits is passed on, and ends its wait with cleanup.
    let pidfd = rustix::process::pidfd_open(Pid::from_child(&child), PidfdFlags::empty())
        .context("watching the holder process")?;
    forward_signals(pidfd)?;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped");
    let read = BufReader::new(stdout).read_line(&mut line);
    if read.is_ok_and(|n| n > 0) {
        let vars: Vec<(String, String)> =
            serde_json::from_str(&line).context("reading the holder's variables")?;
        let printed = format::render(args.format, &vars);
        let mut stdout = std::io::stdout().lock();
        let written = stdout
            .write_all(printed.as_bytes())
            .and_then(|()| stdout.flush());
        // A closed stdout too: the caller is gone, or cannot read them.
        if let Err(err) = written {
            // Nobody will know of the hold: let it go.
            let socket = vars.iter().find(|(name, _)| name == "ZKLOCK_HOLD");
            if let Some((_, socket)) = socket {
                let _ = client::release(&PathBuf::from(socket), client::RELEASE_DEADLINE);
            }
            return Err(err).context("writing the variables on stdout");
        }
        return Ok(Exit::Command(0));
    }
    // Not held: the holder said why on our stderr; its status is ours.
    let status = child.wait().context("waiting for the holder process")?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Command(u8::try_from(code).unwrap_or(70)),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Software,
    })
}

/// Passes every terminating signal we get on to the holder (its pidfd:
/// never to a process that reused its pid).
fn forward_signals(holder: OwnedFd) -> Result<()> {
    let mut signals =
        signal_hook::iterator::Signals::new(FORWARDED).context("installing signal handlers")?;
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if let Some(signal) = Signal::from_named_raw(signal) {
                let _ = rustix::process::pidfd_send_signal(&holder, signal);
            }
        }
    });
    Ok(())
}

/// A `zklock hold` for `eval` that does not hold stops the script: its
/// stdout, which `eval "$(zklock hold ...)"` runs, gets `(exit N)`, so the
/// eval fails with zklock's status where eval of nothing would succeed
/// (docs/design.md, "Holds"). Not at a terminal, where nobody evals it.
pub fn stop_the_script(exit: Exit) {
    if rustix::termios::isatty(rustix::stdio::stdout()) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "(exit {})", exit.code()).and_then(|()| stdout.flush());
}

/// Whether a command line clap refused is a `zklock hold` printing for
/// `eval` (no `--format` other than `sh` in it).
pub fn for_eval_in_args() -> bool {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let hold = args.iter().position(|arg| arg == "hold");
    hold.is_some_and(|at| {
        let rest = &args[at..];
        !rest.iter().enumerate().any(|(i, arg)| {
            let value = match arg.strip_prefix("--format") {
                Some("") => rest.get(i + 1).map(String::as_str),
                Some(tail) => tail.strip_prefix('='),
                None => None,
            };
            value.is_some_and(|value| value != "sh")
        })
    })
}
