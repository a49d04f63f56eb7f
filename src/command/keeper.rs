//! The keeper: zklock's own executable in a hidden mode, leader of the
//! command's process group G, which SIGKILLs G when zklock ends however it
//! ends (the parent-death signal reaches the command's first process only).
//! It blocks every signal and reads a pipe whose write end only zklock
//! holds: EOF means zklock is gone. See docs/design.md, "The keeper".

use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use rustix::process::{Pid, Signal};

use crate::command::signals;

/// argv[1] of the keeper's hidden mode. Not an option clap knows: `main`
/// checks for it before parsing, and nobody types it by accident.
pub const HIDDEN_MODE: &str = "\u{1}zk-keeper";
/// The keeper's process name, which `pkill zklock` does not match.
const NAME: &str = "zk-keeper";

/// The keeper of one command's process group.
pub struct Keeper {
    /// Its stdin is the write end zklock holds: closing it (by dropping, or
    /// by zklock's death) makes the keeper kill the group.
    process: std::process::Child,
    /// Reaped already (PID 1 reaps everything): its pid may be reused.
    reaped: bool,
}

impl Keeper {
    /// Starts the keeper as the leader of a new process group, whose id is
    /// [`Keeper::pid`]. It kills that group when zklock ends.
    pub fn start() -> io::Result<Keeper> {
        let process = Command::new("/proc/self/exe")
            .arg0(NAME)
            .arg(HIDDEN_MODE)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(Keeper {
            process,
            reaped: false,
        })
    }

    /// The keeper's pid: the id of the command's process group.
    pub fn pid(&self) -> Pid {
        Pid::from_child(&self.process)
    }

    /// Waits until the keeper blocks its signals (it says so with one
    /// byte), before the command joins its group and signals reach it. It
    /// has long done so when a lock is taken after a round trip.
    pub fn wait_ready(&mut self) -> io::Result<()> {
        // Taken, so that the pipe closes once read.
        let Some(mut stdout) = self.process.stdout.take() else {
            return Ok(());
        };
        match stdout.read(&mut [0u8])? {
            1 => Ok(()),
            _ => Err(io::Error::other("the keeper process ended at its start")),
        }
    }

    /// Lets the keeper end when zklock does (its kill then finds G empty
    /// but for itself), off the path of the delete the next waiter waits for:
    /// the write end stays open and the keeper is not killed.
    pub fn end_with_zklock(self) {
        std::mem::forget(self);
    }

    /// Notes that `pid` was reaped by waitpid(-1): if it was the keeper, its
    /// pid is free now.
    pub fn note_reaped(&mut self, pid: Pid) {
        self.reaped |= pid == self.pid();
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if !self.reaped {
            // Not reaped, so the pid is still the keeper's. Not waited for:
            // off the release's path; a zombie until zklock exits.
            let _ = self.process.kill();
        }
    }
}

/// Whether this process is the keeper: exactly one argument, ours.
pub fn is_hidden_mode() -> bool {
    let mut args = std::env::args_os().skip(1);
    args.next().is_some_and(|arg| arg == HIDDEN_MODE) && args.next().is_none()
}

/// The keeper's hidden mode: blocks every signal, says it is ready, waits
/// for EOF on stdin (zklock gone), then kills its group.
pub fn run_hidden_mode() -> ! {
    // This process has a single thread: its mask is the process's.
    signals::change_mask(libc::SIG_SETMASK, signals::ALL);
    // For ps and top; exec named it after /proc/self/exe.
    let _ = std::fs::write("/proc/self/comm", NAME);
    let mut stdout = io::stdout();
    let _ = stdout.write_all(b"k").and_then(|()| stdout.flush());
    // Reads until EOF (or an error), retrying when interrupted.
    let _ = io::copy(&mut io::stdin(), &mut io::sink());
    // Our group is G: we lead it (see the module comment).
    let _ = rustix::process::kill_current_process_group(Signal::KILL);
    std::process::exit(0)
}
