//! The command: spawning it in its own process group, handing it the
//! terminal, forwarding signals to its group, following it into job
//! control stops and reaping it.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use anyhow::Result;
use rustix::process::{Pid, Signal, WaitOptions};
use rustix::termios::{isatty, tcgetpgrp, tcsetpgrp};
use tokio::time::Instant;
use zklock::zk::clock::Moment;

use crate::command::keeper::Keeper;
use crate::command::process::Stat;
use crate::command::signals::{self, Signals};
use crate::command::spawn;
use crate::command::steps::process_table;
use crate::exit::{Exit, Failure};

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
/// None when zklock is a stage of a pipeline (its group has processes that
/// are not its ancestors): the other stages keep the foreground, which a
/// `| less` reads, and zklock forwards the terminal's signals.
fn foreground_terminal() -> Option<BorrowedFd<'static>> {
    use rustix::stdio::{stderr, stdin, stdout};
    [stdin(), stdout(), stderr()]
        .into_iter()
        .find(|&fd| isatty(fd) && tcgetpgrp(fd).ok() == own_group())
        .filter(|_| !in_a_pipeline())
}

/// Whether a process of our group is running that is not one of our
/// ancestors (the shell, a script, a substitution's subshell, all waiting
/// for us): another stage of a pipeline.
fn in_a_pipeline() -> bool {
    let Some(group) = own_group() else {
        return false;
    };
    let table = process_table();
    let parents: HashMap<i32, i32> = table.iter().map(|s| (s.pid, s.ppid)).collect();
    let mut ours = HashSet::new();
    let mut pid = rustix::process::getpid().as_raw_pid();
    while ours.insert(pid) {
        match parents.get(&pid) {
            Some(&parent) if parent > 0 => pid = parent,
            _ => break,
        }
    }
    (table.iter()).any(|s| s.pgrp == group.as_raw_pid() && !s.zombie && !ours.contains(&s.pid))
}

/// What [`Child::spawn`] needs ready before the lock is taken.
pub struct Prepared {
    argv: Vec<OsString>,
    /// Dropped, it is killed.
    keeper: Keeper,
}

/// A running command and its process group, whose id is its keeper's pid
/// (keeper/: the keeper kills the group if zklock dies).
pub struct Child {
    pid: Pid,
    pub(super) pgid: Pid,
    pub(super) keeper: Keeper,
    pub(super) status: Option<ExitStatus>,
    /// The terminal whose foreground the command's group has from us.
    terminal: Option<BorrowedFd<'static>>,
    /// Since when zklock stopped itself because the command's group stopped.
    stopped_since: Option<Instant>,
    /// The signals ignored when zklock started (`Signals::ignored_at_start`).
    ignored_at_start: u64,
}

impl Child {
    /// Starts the keeper of the process group `argv` will run in, before
    /// waiting for the lock: off the path from release to the next start;
    /// or takes `keeper`, started as zklock started (`Keeper::early`).
    pub fn prepare(argv: &[OsString], keeper: Option<Keeper>) -> Result<Prepared> {
        let program = program(argv)?;
        // Orphans of the command become our children, not init's: so that
        // the group's members are all found among our descendants (see
        // `running_members`), and reaped by us.
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(|err| spawn_error(program, err.into()))?;
        let keeper = match keeper {
            Some(keeper) => keeper,
            None => Keeper::start().map_err(|err| spawn_error(program, err))?,
        };
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
        deadline: Moment,
        kill_after: Duration,
    ) -> Result<Child> {
        let Prepared { argv, mut keeper } = prepared;
        let program = &argv[0];
        // On failure `keeper` is dropped, which kills it.
        keeper
            .wait_ready()
            .map_err(|err| spawn_error(program, err))?;
        keeper.stop_at(deadline, kill_after);
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
    pub(super) fn signal_group(&self, signal: i32) {
        if let Some(signal) = Signal::from_named_raw(signal)
            && self.group_alive()
        {
            let _ = rustix::process::kill_process_group(self.pgid, signal);
        }
    }

    /// Whether any process of the group but the keeper is still running
    /// (zombies have exited: some container inits reap them late or never).
    pub(super) fn group_alive(&self) -> bool {
        if rustix::process::test_kill_process_group(self.pgid) == Err(rustix::io::Errno::SRCH) {
            return false;
        }
        running_members(self.pgid, self.keeper.pid()) > 0
    }

    /// Reaps every child that exited: the command, and the orphans of its
    /// processes, which are ours as a subreaper (and as PID 1, a container's
    /// init); returns the signal that stopped the command, if that is what
    /// happened.
    pub(super) fn reap(&mut self) -> Option<i32> {
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
    pub(super) fn stop_with_command(&mut self, signal: i32) {
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
    pub(super) fn continued(&mut self) -> Option<Duration> {
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
/// a scan of /proc would read one per process on the machine. A process
/// whose parent exits during the walk comes back to us after we listed our
/// children, unseen (a chain of forks, each parent exiting at once): so a
/// walk that finds none running counts only if our children are the same
/// after it. Errs on the side of "running" when /proc cannot be read, or
/// when the children never settle.
pub(super) fn running_members(pgid: Pid, keeper: Pid) -> usize {
    for _ in 0..WALKS {
        let Some(ours) = children("self") else {
            return 1;
        };
        let running = running_below(ours.clone(), pgid, keeper);
        if running > 0 {
            return running;
        }
        if children("self").is_some_and(|after| same(&after, &ours)) {
            return 0;
        }
    }
    1
}

/// How many times [`running_members`] walks before it gives up on an answer.
const WALKS: usize = 20;

/// Whether two listings name the same processes, in any order.
fn same(a: &[String], b: &[String]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// The children of process `pid` (`self` for us), from every thread.
fn children(pid: &str) -> Option<Vec<String>> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let list = std::fs::read_to_string(task.path().join("children")).ok()?;
        found.extend(list.split_whitespace().map(str::to_owned));
    }
    Some(found)
}

/// How many processes of group `pgid` but `keeper` are running among `todo`
/// and their descendants.
fn running_below(mut todo: Vec<String>, pgid: Pid, keeper: Pid) -> usize {
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
