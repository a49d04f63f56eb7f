//! The keeper: a small process that SIGKILLs the command's whole process
//! group when zklock ends, however it ends.
//!
//! Why: the parent-death signal (spawn.rs) reaches the command's first
//! process only. Without the keeper, the processes it started (pipelines,
//! `sh -c 'a; b'`, background jobs) would run on after zklock was killed,
//! beside the next holder once the session expired.
//!
//! How: zklock runs its own executable (`/proc/self/exe`) in a hidden mode,
//! as the leader of a new process group G, before it connects (so the start
//! is off the lock hand-off's path). The command later joins G. The keeper
//! blocks every signal it can, so neither the signals zklock forwards to G
//! nor the terminal's (Ctrl-C, Ctrl-Z) touch it; then it reads its stdin, a
//! pipe whose write end only zklock holds. When zklock exits or dies, the
//! kernel closes that end, and the keeper kills G, itself included.
//!
//! * It stays in G, so a kill of zklock's process group (`timeout -s KILL`,
//!   a CI runner cancelling a job, `kill -9 -PGID`) does not reach it.
//! * G's id is the keeper's pid: while the keeper lives (or is zklock's
//!   unreaped zombie) no other group can have that id, so neither its kill
//!   nor zklock's can hit a stranger. After a normal end G holds only the
//!   keeper, and its kill ends just itself.
//! * It is called `zk-keeper`, which `pkill zklock` and `killall zklock` do
//!   not match. Killing both zklock and its keeper (by pid) leaves only the
//!   parent-death signal of the command's first process: nothing is left to
//!   watch the rest (README).
//! * Being in G, it makes "is G empty?" a /proc scan that skips it
//!   (child.rs).

use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use rustix::process::{Pid, Signal};

use crate::command::signals;

/// argv[1] of the keeper's hidden mode. Not an option clap knows: `main`
/// checks for it before parsing, and nobody types it by accident.
pub const HIDDEN_MODE: &str = "\u{1}zk-keeper";
/// The keeper's process name (see the module comment for why not `zklock`).
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
        let mut byte = [0u8; 1];
        let ready = match self.process.stdout.take() {
            Some(mut stdout) => stdout.read(&mut byte)?,
            None => 1,
        };
        if ready == 1 {
            Ok(())
        } else {
            Err(io::Error::other("the keeper process ended at its start"))
        }
    }

    /// Lets the keeper end when zklock does (its kill then finds G empty
    /// but for itself): ending it here would put a process's exit beside
    /// the delete the next waiter waits for.
    pub fn end_with_zklock(self) {
        // The write end stays open until zklock exits, and the keeper is
        // not killed.
        std::mem::forget(self);
    }

    /// Whether `pid` was the keeper, now reaped by waitpid(-1); its pid is
    /// free then.
    pub fn note_reaped(&mut self, pid: Pid) -> bool {
        let ours = pid == self.pid();
        self.reaped |= ours;
        ours
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
    let mut stdin = io::stdin();
    let mut buffer = [0u8; 64];
    loop {
        match stdin.read(&mut buffer) {
            Ok(0) => break,
            Err(err) if err.kind() != io::ErrorKind::Interrupted => break,
            _ => {}
        }
    }
    // Our group is G: we lead it (see the module comment).
    let _ = rustix::process::kill_current_process_group(Signal::KILL);
    std::process::exit(0)
}
