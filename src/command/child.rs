//! The command: spawning it in its own process group, handing it the
//! terminal, forwarding signals to its group, following it into job
//! control stops and reaping it.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::Result;
use rustix::process::{Pid, Signal, WaitOptions};
use rustix::termios::{isatty, tcgetpgrp, tcsetpgrp};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use crate::command::keeper::Keeper;
use crate::command::process::Stat;
use crate::command::signals::{self, Signals, is_terminating};
use crate::command::spawn;
use crate::exit::{Exit, Failure};
use crate::report::Report;
use crate::values::human_duration;

/// How often to look for stragglers in the command's process group after the
/// command itself exited; there is no event for "the group is empty".
const GROUP_POLL: Duration = Duration::from_millis(20);

/// Blocks SIGTTOU and SIGTTIN in the calling thread, so zklock can take the
/// terminal back (tcsetpgrp) and write to it from the background. Call it in
/// the main thread before any other thread exists: threads inherit the mask.
pub fn block_terminal_stops() {
    signals::change_mask(
        libc::SIG_BLOCK,
        signals::set(&[libc::SIGTTOU, libc::SIGTTIN]),
    );
}

/// The terminal whose foreground zklock holds, if any: that is where an
/// interactive command must be able to read and where Ctrl-C comes from.
fn foreground_terminal() -> Option<BorrowedFd<'static>> {
    use rustix::stdio::{stderr, stdin, stdout};
    [stdin(), stdout(), stderr()]
        .into_iter()
        .find(|&fd| isatty(fd) && tcgetpgrp(fd).ok() == own_group())
}

/// What [`Child::spawn`] needs ready before the lock is taken.
pub struct Prepared {
    argv: Vec<OsString>,
    /// The keeper's start, on a thread of its own: the spawn blocks its
    /// caller until the keeper's exec, which then overlaps the connection
    /// instead of coming before it. Dropped unjoined, the keeper it started
    /// is dropped (killed) with the thread's result.
    keeper: std::thread::JoinHandle<io::Result<Keeper>>,
}

/// A running command and its process group, whose id is its keeper's pid
/// (keeper.rs: the keeper kills the group if zklock dies).
pub struct Child {
    pid: Pid,
    pgid: Pid,
    keeper: Keeper,
    status: Option<ExitStatus>,
    /// The terminal whose foreground the command's group has from us.
    terminal: Option<BorrowedFd<'static>>,
    /// Since when zklock stopped itself because the command's group stopped.
    stopped_since: Option<Instant>,
    /// The signals ignored when zklock started (`Signals::ignored_at_start`).
    ignored_at_start: u64,
}

impl Child {
    /// Starts the keeper of the process group `argv` will run in, before
    /// waiting for the lock: off the path from release to the next start.
    pub fn prepare(argv: &[OsString]) -> Result<Prepared> {
        let program = program(argv)?;
        // Orphans of the command become our children, not init's: so that
        // the group's members are all found among our descendants (see
        // `running_members`), and reaped by us.
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(|err| spawn_error(program, err.into()))?;
        let keeper = std::thread::Builder::new()
            .name("keeper-start".into())
            .spawn(Keeper::start)
            .map_err(|err| spawn_error(program, err))?;
        Ok(Prepared {
            argv: argv.to_vec(),
            keeper,
        })
    }

    /// Starts the prepared command in the process group of its keeper,
    /// with a clean signal state (those ignored when zklock started, as
    /// `signals` knows, left ignored) and `env` added to its environment.
    /// Exec failures map to 127 (not found) and 126 (not executable). The
    /// keeper has its first order (stop the group at the lease `deadline`,
    /// KILL `kill_after` later) before the command starts: a zklock frozen
    /// at the command's first instruction is covered too.
    pub fn spawn(
        prepared: Prepared,
        env: &[(&str, String)],
        signals: &Signals,
        deadline: Instant,
        kill_after: Duration,
    ) -> Result<Child> {
        let Prepared { argv, keeper } = prepared;
        let program = &argv[0];
        let started = keeper
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the keeper's start panicked")));
        // On failure `keeper` is dropped, which kills it.
        let mut keeper = started.map_err(|err| spawn_error(program, err))?;
        keeper
            .wait_ready()
            .map_err(|err| spawn_error(program, err))?;
        keeper.stop_at(deadline.into_std(), kill_after);
        let terminal = foreground_terminal();
        let pgid = keeper.pid();
        let ignored_at_start = signals.ignored_at_start();
        let pid = spawn::launch(&argv, env, terminal, pgid.as_raw_pid(), ignored_at_start)
            .map_err(|err| spawn_error(program, err))?;
        let mut child = Child {
            pid,
            pgid,
            keeper,
            status: None,
            terminal: None,
            stopped_since: None,
            ignored_at_start,
        };
        // The child did this too; repeating it closes the race with our own
        // later tcsetpgrp, as shells do.
        child.give_terminal(terminal);
        Ok(child)
    }

    /// The command's process id (its group's id is the keeper's).
    pub fn pid(&self) -> u32 {
        self.pid.as_raw_pid() as u32
    }

    /// Sends `signal` to the whole group; no-op once the group is gone (a
    /// process group id cannot be reused while any member is alive).
    fn signal_group(&self, signal: i32) {
        if let Some(signal) = Signal::from_named_raw(signal)
            && self.group_alive()
        {
            let _ = rustix::process::kill_process_group(self.pgid, signal);
        }
    }

    /// Whether any process of the group but the keeper is still running
    /// (zombies have exited: some container inits reap them late or never).
    fn group_alive(&self) -> bool {
        if rustix::process::test_kill_process_group(self.pgid) == Err(rustix::io::Errno::SRCH) {
            return false;
        }
        running_members(self.pgid, self.keeper.pid()) > 0
    }

    /// Reaps every child that exited: the command, and the orphans of its
    /// processes, which are ours as a subreaper (and as PID 1, a container's
    /// init); returns the signal that stopped the command, if that is what
    /// happened.
    fn reap(&mut self) -> Option<i32> {
        let options = WaitOptions::NOHANG | WaitOptions::UNTRACED;
        let mut stopped = None;
        while let Ok(Some((pid, status))) = rustix::process::wait(options) {
            if let Some(signal) = status.stopping_signal() {
                if pid == self.pid {
                    stopped = Some(signal);
                }
            } else {
                if pid == self.pid {
                    self.status = Some(ExitStatus::from_raw(status.as_raw()));
                    self.take_back_terminal();
                }
                self.keeper.note_reaped(pid);
            }
        }
        stopped
    }

    /// Gives the command's group the foreground of `terminal`.
    fn give_terminal(&mut self, terminal: Option<BorrowedFd<'static>>) {
        if let Some(fd) = terminal {
            let _ = tcsetpgrp(fd, self.pgid);
        }
        self.terminal = terminal;
    }

    fn take_back_terminal(&mut self) {
        if let Some(fd) = self.terminal.take() {
            // SIGTTOU is blocked (block_terminal_stops), so a background
            // tcsetpgrp succeeds instead of stopping us.
            if let Some(group) = own_group() {
                let _ = tcsetpgrp(fd, group);
            }
        }
    }

    /// The command's group stopped by `signal`: take the terminal back and
    /// stop zklock too. Returns once zklock is continued.
    fn stop_with_command(&mut self, signal: i32) {
        self.take_back_terminal();
        self.stopped_since = Some(Instant::now());
        if rustix::process::getpid().is_init() {
            return; // an init cannot be stopped
        }
        // A stop from the terminal would have stopped zklock's whole job:
        // stop that group, with the same signal so that the shell says why
        // (a group id of 1 would address every process). Any other stop
        // stops zklock alone, with SIGSTOP.
        let from_terminal = matches!(signal, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU)
            && self.ignored_at_start & signals::set(&[signal]) == 0;
        let signal = match Signal::from_named_raw(signal) {
            Some(stop) if from_terminal => stop,
            _ => Signal::STOP,
        };
        let _ = match own_group() {
            Some(group) if signal != Signal::STOP && !group.is_init() => {
                rustix::process::kill_process_group(group, signal)
            }
            _ => rustix::process::kill_process(rustix::process::getpid(), signal),
        };
        // TTIN and TTOU are blocked in this thread (block_terminal_stops)
        // and in every other, which inherited the mask: unblocked here, the
        // pending signal stops the process.
        let set = signals::set(&[signal.as_raw()]);
        signals::change_mask(libc::SIG_UNBLOCK, set);
        if matches!(signal, Signal::TTIN | Signal::TTOU) {
            signals::change_mask(libc::SIG_BLOCK, set);
        }
    }

    /// zklock was continued: if it had stopped with the command, the
    /// command's group gets the terminal again if ours is its foreground
    /// (`fg`; not after `bg`). How long zklock was stopped, if it was.
    fn continued(&mut self) -> Option<Duration> {
        let since = self.stopped_since.take()?;
        if self.status.is_none() {
            self.give_terminal(foreground_terminal());
        }
        Some(since.elapsed())
    }
}

/// How many processes of group `pgid` but `keeper` are running (not
/// zombies). All of them descend from the command, which is our child, and
/// orphans come back to us (we are a subreaper): so walking our descendants
/// through /proc/PID/task/TID/children finds them, reading a few files where
/// a scan of /proc would read one per process on the machine. Errs on the
/// side of "running" when /proc cannot be read.
fn running_members(pgid: Pid, keeper: Pid) -> usize {
    let children = |pid: &str| -> Option<Vec<String>> {
        let mut found = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .flatten()
        {
            let list = std::fs::read_to_string(task.path().join("children")).ok()?;
            found.extend(list.split_whitespace().map(str::to_owned));
        }
        Some(found)
    };
    let Some(mut todo) = children("self") else {
        return 1;
    };
    let mut running = 0;
    while let Some(pid) = todo.pop() {
        if pid == keeper.as_raw_pid().to_string() {
            continue;
        }
        let running_here = Stat::of(&pid).is_some_and(|s| s.pgrp == pgid.as_raw_pid() && !s.zombie);
        running += usize::from(running_here);
        todo.extend(children(&pid).unwrap_or_default());
    }
    running
}

/// zklock's own process group; none when getpgrp(2) would say 0 (see
/// process.rs).
fn own_group() -> Option<Pid> {
    Pid::from_raw(Stat::of("self")?.pgrp)
}

/// Fails (127 not found, 126 not executable) if the command could not be
/// started now; see [`spawn::resolve`].
pub fn check_runnable(argv: &[OsString]) -> Result<()> {
    let program = program(argv)?;
    spawn::resolve(program).map_err(|err| spawn_error(program, err))
}

fn program(argv: &[OsString]) -> Result<&OsString> {
    argv.first()
        .ok_or_else(|| Failure::usage("no command given"))
}

fn spawn_error(program: &OsString, err: io::Error) -> anyhow::Error {
    let kind = match err.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => Exit::NotFound,
        _ => Exit::NotExecutable,
    };
    anyhow::Error::new(err).context(Failure::new(
        kind,
        format!("cannot run {}", program.to_string_lossy()),
    ))
}

/// Supervises the command until it and its whole process group are gone,
/// by the policy of docs/design.md, "The command and signals", which is
/// implemented here and nowhere else, and hands the keeper the lease
/// `deadline` (the lock's, as the lease moves it) for when zklock cannot
/// act. Returns the command's status, or [`Exit::LockLost`] or
/// [`Exit::TimedOut`], and the group's keeper, for
/// [`Keeper::end_with_zklock`] once the lock is released. `lock_lost` is
/// told why, once, as the command is stopped for a lost lock.
pub async fn supervise(
    mut child: Child,
    signals: &mut Signals,
    mut lost: Pin<&mut dyn Future<Output = String>>,
    mut deadline: watch::Receiver<Instant>,
    limits: Limits,
    report: &Report,
    lock_lost_because: &dyn Fn(std::fmt::Arguments<'_>),
) -> (Exit, Keeper) {
    let mut time_up = limits.max_runtime.map(|limit| Instant::now() + limit);
    let mut timed_out = false;
    let mut kill_at: Option<Instant> = None;
    let mut lock_lost = false;
    let mut group_check: Option<Instant> = None;
    let mut told_waiting = false;
    let far_future = || Instant::now() + Duration::from_secs(86400 * 365);
    // TERM now and KILL at `kill` (at once if that has passed), or earlier
    // if a KILL is due already.
    let terminate = |child: &Child, kill_at: &mut Option<Instant>, kill: Instant| {
        if kill > Instant::now() {
            child.signal_group(libc::SIGTERM);
            // A stopped process acts on TERM only once continued.
            child.signal_group(libc::SIGCONT);
        }
        *kill_at = Some(kill_at.map_or(kill, |at| at.min(kill)));
    };
    // The lock is lost: TERM, and KILL by the lease's rule; the keeper
    // KILLs then too, should zklock be frozen by then.
    let give_up = |child: &mut Child, kill_at: &mut Option<Instant>, deadline: Instant| {
        let kill = kill_time(deadline, Instant::now(), limits.kill_after);
        terminate(child, kill_at, kill);
        child.keeper.kill_at(kill.into_std());
    };
    let mut watching = true;
    child
        .keeper
        .stop_at(deadline.borrow_and_update().into_std(), limits.kill_after);
    let status = loop {
        if let Some(status) = child.status {
            if !child.group_alive() {
                break status;
            }
            if !told_waiting {
                told_waiting = true;
                let others = running_members(child.pgid, child.keeper.pid());
                let ended = match status.signal() {
                    Some(signal) => format!("was killed by signal {signal}"),
                    None => format!("exited with status {}", status.code().unwrap_or(0)),
                };
                report.info(format_args!(
                    "the command {ended}; waiting for the {others} other process{} of its group",
                    if others == 1 { "" } else { "es" }
                ));
            }
            group_check = Some(Instant::now() + GROUP_POLL);
        }
        tokio::select! {
            signal = signals.recv() => {
                if signal == libc::SIGCHLD {
                    if let Some(stop) = child.reap() {
                        child.stop_with_command(stop);
                    }
                    continue;
                }
                if signal == libc::SIGCONT {
                    let stopped = child.continued().filter(|time| *time >= limits.stop_limit);
                    if let Some(stopped) = stopped.filter(|_| !lock_lost) {
                        (lock_lost, watching) = (true, false);
                        lock_lost_because(format_args!(
                            "zklock was stopped for {}, longer than its session \
                             can be kept without it; terminating the command",
                            human_duration(stopped)
                        ));
                        give_up(&mut child, &mut kill_at, *deadline.borrow());
                    }
                } else if is_terminating(signal) {
                    if kill_at.is_some() {
                        child.signal_group(libc::SIGKILL);
                    } else {
                        kill_at = Some(Instant::now() + limits.kill_after);
                    }
                }
                child.signal_group(signal);
            }
            reason = &mut lost, if !lock_lost => {
                (lock_lost, watching) = (true, false);
                lock_lost_because(format_args!("{reason}; terminating the command"));
                give_up(&mut child, &mut kill_at, *deadline.borrow());
            }
            changed = deadline.changed(), if watching => match changed {
                Ok(()) => child
                    .keeper
                    .stop_at(deadline.borrow_and_update().into_std(), limits.kill_after),
                Err(_) => watching = false,
            },
            () = sleep_until(time_up.unwrap_or_else(far_future)), if time_up.is_some() => {
                time_up = None;
                timed_out = true;
                terminate(&child, &mut kill_at, Instant::now() + limits.kill_after);
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
    };
    if !lock_lost && Instant::now() >= *deadline.borrow() {
        // Found ended only past the deadline: zklock could not act in time
        // (it was stopped), and the keeper stopped the command.
        lock_lost = true;
        lock_lost_because(format_args!(
            "no answer from ZooKeeper past the lease deadline; the keeper stopped the command"
        ));
    }
    // The group is empty.
    child.keeper.stand_down();
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

/// When to KILL the group after losing the lock at `now`, with the lease
/// deadline at `deadline` (docs/design.md, "Session and lease rules"): K
/// after the TERM sent now, and no later than K after the deadline. A zklock
/// that wakes up past the deadline (it was stopped) has no grace left and
/// less of K: none once K past it, when it kills at once.
pub fn kill_time(deadline: Instant, now: Instant, kill_after: Duration) -> Instant {
    now.min(deadline) + kill_after
}

/// The times [`supervise`] keeps to.
pub struct Limits {
    /// From a terminating signal or the lock's loss to SIGKILL.
    pub kill_after: Duration,
    /// The command's `--max-runtime`, if any.
    pub max_runtime: Option<Duration>,
    /// How long zklock may be stopped before it counts the lock as lost.
    pub stop_limit: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_comes_k_after_the_deadline_at_the_latest() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let k = Duration::from_secs(5);
        // Lost before the deadline (a node deleted): K after the TERM.
        let now = deadline - Duration::from_secs(3);
        assert_eq!(kill_time(deadline, now, k), now + k);
        // Woken 2s past the deadline: what is left of K.
        let now = deadline + Duration::from_secs(2);
        assert_eq!(kill_time(deadline, now, k) - now, Duration::from_secs(3));
        // Woken K or more past it: no grace left, KILL at once.
        let now = deadline + Duration::from_secs(7);
        assert!(kill_time(deadline, now, k) <= now);
    }
}
