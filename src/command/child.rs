//! The command: spawning it in its own process group, handing it the
//! terminal, forwarding signals to its group and reaping it.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::Result;
use tokio::time::{Instant, sleep_until};

use crate::command::keeper::Keeper;
use crate::command::signals::{Signals, is_terminating};
use crate::command::spawn;
use crate::exit::{ErrorKind, Exit, Failure};

/// How often to look for stragglers in the command's process group after the
/// command itself exited; there is no event for "the group is empty".
const GROUP_POLL: Duration = Duration::from_millis(20);

/// Blocks SIGTTOU and SIGTTIN in the calling thread, so zklock can take the
/// terminal back (tcsetpgrp) and write to it from the background. Call it in
/// the main thread before any other thread exists: threads inherit the mask.
pub fn block_terminal_stops() {
    // SAFETY: sigset_t is plain data initialized by sigemptyset before use;
    // pthread_sigmask only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTTOU);
        libc::sigaddset(&mut set, libc::SIGTTIN);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// The terminal whose foreground zklock holds, if any: that is where an
/// interactive command must be able to read and where Ctrl-C comes from.
fn foreground_terminal() -> Option<libc::c_int> {
    // SAFETY: isatty, tcgetpgrp and getpgrp only read process state.
    (0..=2).find(|&fd| unsafe { libc::isatty(fd) == 1 && libc::tcgetpgrp(fd) == libc::getpgrp() })
}

/// What [`Child::spawn`] needs ready before the lock is taken.
pub struct Prepared {
    /// The program as given, for error messages.
    program: OsString,
    keeper: Keeper,
    start: spawn::Prepared,
}

/// A running command and its process group, whose id is its keeper's pid
/// (keeper.rs: the keeper kills the group if zklock dies).
pub struct Child {
    pid: libc::pid_t,
    pgid: libc::pid_t,
    keeper: Keeper,
    status: Option<ExitStatus>,
    terminal: Option<libc::c_int>,
}

impl Child {
    /// Starts the keeper of the process group `argv` will run in
    /// (keeper.rs) and prepares what starting `argv` needs, ahead of the
    /// command: a run that waits for the lock does this before it waits, so
    /// that it is not on the path from the lock's release to the next
    /// command's start.
    pub fn prepare(argv: &[OsString]) -> Result<Prepared> {
        let program = argv
            .first()
            .ok_or_else(|| Failure::usage("no command given"))?;
        let start = spawn::Prepared::new(argv).map_err(|err| spawn_error(program, err))?;
        let keeper = Keeper::start().map_err(|err| spawn_error(program, err))?;
        Ok(Prepared {
            program: program.clone(),
            keeper,
            start,
        })
    }

    /// Starts the prepared command in the process group of its keeper,
    /// with a clean signal state and `env` added to its environment. Exec
    /// failures map to 127 (not found) and 126 (not executable).
    pub fn spawn(prepared: Prepared, env: &[(&str, String)]) -> Result<Child> {
        let Prepared {
            program,
            keeper,
            mut start,
        } = prepared;
        let terminal = foreground_terminal();
        let pgid = keeper.pid();
        // On failure `keeper` is dropped, which kills it.
        let pid = spawn::launch(&mut start, env, terminal, pgid)
            .map_err(|err| spawn_error(&program, err))?;
        keeper.command_joined();
        if let Some(fd) = terminal {
            // The child did this too; repeating it closes the race with our
            // own later tcsetpgrp, as shells do.
            // SAFETY: plain syscall on a descriptor we checked is a terminal.
            unsafe { libc::tcsetpgrp(fd, pgid) };
        }
        Ok(Child {
            pid,
            pgid,
            keeper,
            status: None,
            terminal,
        })
    }

    /// The command's process id (its group's id is the keeper's).
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Sends `signal` to the whole group; no-op once the group is gone (a
    /// process group id cannot be reused while any member is alive).
    fn signal_group(&self, signal: i32) {
        if self.group_alive() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(-self.pgid, signal) };
        }
    }

    /// Whether any process of the group is still running. Zombies do not
    /// count: they have exited, and an orphaned zombie lingers until init
    /// reaps it, which some container inits do late or never. Nor does the
    /// keeper, had it failed to leave the group.
    fn group_alive(&self) -> bool {
        // SAFETY: signal 0 only checks for existence.
        let rc = unsafe { libc::kill(-self.pgid, 0) };
        if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            return false;
        }
        group_has_running_member(self.pgid, self.keeper.pid())
    }

    /// Reaps our own child, the command (the keeper's zombie is left to
    /// init once zklock exits, see keeper.rs). As PID 1 (a container's
    /// init) orphans of the command become our children too and must be
    /// reaped, or as zombies they would keep the process group alive forever.
    fn reap(&mut self) {
        // SAFETY: getpid has no preconditions.
        let orphans_are_ours = unsafe { libc::getpid() } == 1;
        let target = if orphans_are_ours { -1 } else { self.pid };
        loop {
            let mut raw = 0;
            // SAFETY: waitpid writes the status into a local integer.
            let pid = unsafe { libc::waitpid(target, &mut raw, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            if pid == self.pid {
                self.status = Some(ExitStatus::from_raw(raw));
                self.take_back_terminal();
            }
            self.keeper.note_reaped(pid);
            if !orphans_are_ours {
                return;
            }
        }
    }

    fn take_back_terminal(&mut self) {
        if let Some(fd) = self.terminal.take() {
            // SAFETY: SIGTTOU is blocked (block_terminal_stops), so a
            // background tcsetpgrp succeeds instead of stopping us.
            unsafe { libc::tcsetpgrp(fd, libc::getpgrp()) };
        }
    }
}

/// Scans /proc for a process of group `pgid` that is not a zombie, nor
/// `keeper`; errs on the side of "alive" when /proc cannot be read.
fn group_has_running_member(pgid: libc::pid_t, keeper: libc::pid_t) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let is_pid = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()) && n.parse() != Ok(keeper));
        let stat = if is_pid {
            std::fs::read_to_string(entry.path().join("stat")).ok()
        } else {
            None
        };
        stat.is_some_and(|stat| running_in_group(&stat, pgid))
    })
}

/// Parses `/proc/PID/stat`: `pid (comm) state ppid pgrp ...`, where comm may
/// itself contain spaces and parentheses.
fn running_in_group(stat: &str, pgid: libc::pid_t) -> bool {
    let Some((_, after_comm)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = after_comm.split_whitespace();
    let (Some(state), Some(_ppid), Some(pgrp)) = (fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    pgrp.parse() == Ok(pgid) && !matches!(state, "Z" | "X")
}

/// Fails (127 not found, 126 not executable) if the command could not be
/// started now; see [`spawn::resolve`].
pub fn check_runnable(argv: &[OsString]) -> Result<()> {
    let program = argv
        .first()
        .ok_or_else(|| Failure::usage("no command given"))?;
    spawn::resolve(program).map_err(|err| spawn_error(program, err))
}

fn spawn_error(program: &OsString, err: io::Error) -> anyhow::Error {
    let kind = match err.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => ErrorKind::NotFound,
        _ => ErrorKind::NotExecutable,
    };
    anyhow::Error::new(err).context(Failure::new(
        kind,
        format!("cannot run {}", program.to_string_lossy()),
    ))
}

/// Supervises the command until it and its whole process group are gone.
///
/// Signal policy, implemented here and nowhere else:
///
/// * INT, TERM, HUP, QUIT, USR1, USR2 and WINCH sent to zklock are forwarded
///   to the command's process group, so the command's own children get them
///   too. Synchronous signals (SEGV, BUS, FPE, ILL, ...) concern zklock itself
///   and are never forwarded.
/// * At a terminal the command's group is the foreground group: Ctrl-C,
///   Ctrl-\ and window changes reach it from the kernel, once, and zklock,
///   no longer in the foreground, does not see them (no double delivery).
/// * A terminating signal (INT, TERM, HUP, QUIT) starts the `--kill-after`
///   timer; when it fires, or when a second terminating signal arrives, the
///   group gets SIGKILL.
/// * Losing the lock sends TERM to the group and starts the same timer; so
///   does `max_runtime` running out (then the result is [`Exit::TimedOut`]).
/// * SIGCHLD: only our own child is reaped. After it exits, zklock keeps
///   forwarding and waits until the group is empty: the lock covers every
///   process the command left behind, as flock(1) covers every holder of its
///   descriptor.
/// * The group is never signalled once it is empty.
///
/// Returns the command's status, or [`Exit::LockLost`] if the lock was lost,
/// and the group's keeper, for [`Keeper::end_with_zklock`] once the lock is
/// released.
pub async fn supervise(
    mut child: Child,
    signals: &mut Signals,
    mut lost: Pin<&mut dyn Future<Output = String>>,
    kill_after: Duration,
    max_runtime: Option<Duration>,
    on_loss: &mut dyn FnMut(&str),
) -> (Exit, Keeper) {
    let mut time_up = max_runtime.map(|limit| Instant::now() + limit);
    let mut timed_out = false;
    let mut kill_at: Option<Instant> = None;
    let mut lock_lost = false;
    let mut group_check: Option<Instant> = None;
    let far_future = || Instant::now() + Duration::from_secs(86400 * 365);
    loop {
        if child.status.is_some() {
            if !child.group_alive() {
                break;
            }
            group_check = Some(Instant::now() + GROUP_POLL);
        }
        tokio::select! {
            signal = signals.recv() => {
                if signal == libc::SIGCHLD {
                    child.reap();
                    continue;
                }
                if is_terminating(signal) {
                    if kill_at.is_some() {
                        child.signal_group(libc::SIGKILL);
                    } else {
                        kill_at = Some(Instant::now() + kill_after);
                    }
                }
                child.signal_group(signal);
            }
            reason = &mut lost, if !lock_lost => {
                lock_lost = true;
                on_loss(&reason);
                child.signal_group(libc::SIGTERM);
                kill_at.get_or_insert(Instant::now() + kill_after);
            }
            () = sleep_until(time_up.unwrap_or_else(far_future)), if time_up.is_some() => {
                time_up = None;
                timed_out = true;
                child.signal_group(libc::SIGTERM);
                kill_at.get_or_insert(Instant::now() + kill_after);
            }
            () = sleep_until(kill_at.unwrap_or_else(far_future)), if kill_at.is_some() => {
                child.signal_group(libc::SIGKILL);
                kill_at = None;
            }
            () = sleep_until(group_check.unwrap_or_else(far_future)), if group_check.is_some() => {
                group_check = None;
                child.reap();
            }
        }
    }
    let status = child
        .status
        .expect("loop ends only after the child was reaped");
    let exit = if lock_lost {
        Exit::LockLost
    } else if timed_out {
        Exit::TimedOut
    } else if let Some(signal) = status.signal() {
        Exit::Signal(signal)
    } else {
        Exit::Command(status.code().unwrap_or(0) as u8)
    };
    (exit, child.keeper)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_parsing() {
        assert!(running_in_group("812 (sleep) S 811 811 700 0 -1", 811));
        assert!(!running_in_group("812 (sleep) Z 811 811 700 0 -1", 811));
        assert!(!running_in_group("812 (sleep) S 811 900 700 0 -1", 811));
        assert!(running_in_group("812 (a) b (c)) R 1 811 700", 811));
        assert!(!running_in_group("garbage", 811));
    }
}
