//! The keeper: a process of zklock's, leader of the command's process
//! group G, which SIGKILLs G when zklock ends however it ends (the
//! parent-death signal reaches the command's first process only), and stops
//! G at the lease deadline when zklock cannot (it is frozen). It blocks
//! every signal and reads a pipe whose write end only zklock holds: orders
//! (when to TERM and KILL G), and EOF when zklock is gone. A run's keeper
//! is a fork of zklock that makes system calls only; a hold's, which must
//! read /proc to find the steps, is zklock's executable in a hidden mode.
//! See docs/design.md, "The keeper".

mod keep;

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use zklock::zk::clock::Moment;

use self::keep::{HIDDEN_MODE, NAME, NEVER, ORDER, forked, nonblocking};
pub use self::keep::{is_hidden_mode, run_hidden_mode};
use crate::command::signals;
use crate::command::steps::Steps;

/// How long after the lease deadline the keeper sends TERM (at most half of
/// K): time for a zklock that is not frozen, which acts at the deadline, to
/// say so, so that the command does not get TERM twice.
const LAG: Duration = Duration::from_millis(100);

/// The keeper of one command's process group.
pub struct Keeper {
    pid: Pid,
    /// The write end of the keeper's stdin, which only zklock holds:
    /// closing it (by dropping, or by zklock's death) makes the keeper kill
    /// the group. Nonblocking: orders never block zklock, and a keeper that
    /// does not read (stopped too) keeps the older, earlier, order it has.
    orders: File,
    /// The keeper's stdout, where a started one says it blocks its signals;
    /// None for a fork, born with them blocked.
    ready: Option<File>,
    /// Reaped already (PID 1 reaps everything): its pid may be reused.
    reaped: bool,
}

impl Keeper {
    /// Starts the keeper as the leader of a new process group, whose id is
    /// [`Keeper::pid`]. It kills that group when zklock ends. A fork, with
    /// no exec: a second start of zklock's executable costs the run more
    /// CPU than the rest of zklock's own start (docs/design.md, "The
    /// keeper").
    pub fn start() -> io::Result<Keeper> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        nonblocking(&write)?;
        // Born with every signal blocked: the child is ready at once.
        let before = signals::change_mask(libc::SIG_SETMASK, signals::ALL);
        // SAFETY: fork copies this thread alone, while others may hold
        // locks: the child makes system calls only (rustix's, raw) and
        // never returns (`forked`). The parent only restores its mask.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            forked(read);
        }
        signals::change_mask(libc::SIG_SETMASK, before);
        let pid = match Pid::from_raw(pid) {
            Some(pid) if pid.as_raw_pid() > 0 => pid,
            _ => return Err(io::Error::last_os_error()),
        };
        // Here too, so that the group exists whichever of the two runs first.
        let _ = rustix::process::setpgid(Some(pid), Some(pid));
        Ok(Keeper {
            pid,
            orders: File::from(write),
            ready: None,
            reaped: false,
        })
    }

    /// A run's keeper, forked as zklock starts, when its first argument is
    /// `run` and `--once-per` is not among the others (a --once-per run
    /// starts its keeper only once the lock is taken). zklock is smallest
    /// then: the fork has the least to copy, and zklock's later writes land
    /// on pages of its own, not on pages it shares with the keeper. A hint
    /// from the raw arguments, not a parse: the run takes this keeper if
    /// there is one (`Child::prepare`) and starts its own if not; unused
    /// (a usage error, `--help`), it is killed when dropped.
    pub fn early() -> Option<Keeper> {
        let mut args = std::env::args_os().skip(1);
        if args.next().is_none_or(|first| first != "run") {
            return None;
        }
        if args.any(|arg| arg.as_encoded_bytes().starts_with(b"--once-per")) {
            return None;
        }
        Keeper::start().ok()
    }

    /// Starts the keeper of a hold's `steps` (docs/design.md, "Holds"), in
    /// a group of its own: it kills the steps when the holder dies while
    /// they hold, and stops them at the lease deadline when the holder
    /// cannot. Once told to stand down, the holder's end ends it quietly.
    pub fn for_steps(steps: &Steps) -> io::Result<Keeper> {
        let group = steps
            .group
            .map_or_else(|| "-".to_owned(), |g| g.to_string());
        Keeper::spawn(&["steps".to_owned(), steps.bound.to_string(), group])
    }

    fn spawn(target: &[String]) -> io::Result<Keeper> {
        let mut process = Command::new("/proc/self/exe")
            .arg0(NAME.to_str().expect("ASCII"))
            .arg(HIDDEN_MODE)
            .args(target)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pid = Pid::from_child(&process);
        let (Some(stdin), Some(stdout)) = (process.stdin.take(), process.stdout.take()) else {
            unreachable!("both piped");
        };
        let orders = File::from(OwnedFd::from(stdin));
        nonblocking(&orders)?;
        Ok(Keeper {
            pid,
            orders,
            ready: Some(File::from(OwnedFd::from(stdout))),
            reaped: false,
        })
    }

    /// The keeper's pid: the id of the command's process group.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Waits until the keeper blocks its signals (a started one says so
    /// with one byte), before the command joins its group and signals
    /// reach it. It has long done so when a lock is taken after a round
    /// trip.
    pub fn wait_ready(&mut self) -> io::Result<()> {
        // Taken, so that the pipe closes once read.
        let Some(mut stdout) = self.ready.take() else {
            return Ok(());
        };
        match stdout.read(&mut [0u8])? {
            1 => Ok(()),
            _ => Err(io::Error::other("the keeper process ended at its start")),
        }
    }

    /// Has the keeper stop the group at the lease `deadline` as zklock
    /// would, should zklock not do it itself: TERM (and CONT) just after it,
    /// KILL `kill_after` after it. Replaces the order before.
    pub fn stop_at(&mut self, deadline: Moment, kill_after: Duration) {
        let (term, kill) = stop_times(deadline, kill_after);
        self.order(Some(term), Some(kill));
    }

    /// Has the keeper KILL the group at `kill` and send no TERM: zklock sent
    /// it (and KILLs at that time too, if it is not frozen by then).
    pub fn kill_at(&mut self, kill: Moment) {
        self.order(None, Some(kill));
    }

    /// Has the keeper leave the group alone while zklock lives (an empty
    /// group, or one zklock no longer holds a lock for).
    pub fn stand_down(&mut self) {
        self.order(None, None);
    }

    fn order(&mut self, term: Option<Moment>, kill: Option<Moment>) {
        let mut order = [0u8; ORDER];
        order[..8].copy_from_slice(&on_clock(term).to_le_bytes());
        order[8..].copy_from_slice(&on_clock(kill).to_le_bytes());
        // Whole or not at all (below PIPE_BUF); a keeper gone or not reading
        // is zklock's to notice by other means.
        let _ = self.orders.write(&order);
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
            let _ = rustix::process::kill_process(self.pid, Signal::KILL);
        }
    }
}

/// When the keeper TERMs and KILLs the group for a lease `deadline`.
fn stop_times(deadline: Moment, kill_after: Duration) -> (Moment, Moment) {
    (deadline + (kill_after / 2).min(LAG), deadline + kill_after)
}

/// `at` as the keeper reads it ([`Moment::as_nanos`]); [`NEVER`] for None.
fn on_clock(at: Option<Moment>) -> u64 {
    at.map_or(NEVER, Moment::as_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keeper_terms_after_zklock_would_and_kills_when_it_would() {
        let deadline = Moment::now() + Duration::from_secs(60);
        for k in [5_000, 500, 190, 40] {
            let kill_after = Duration::from_millis(k);
            let (term, kill) = stop_times(deadline, kill_after);
            assert!(term > deadline && term < kill, "{k}");
            assert!(term - deadline <= LAG, "{k}");
            assert_eq!(kill, deadline + kill_after, "{k}");
        }
    }
}
