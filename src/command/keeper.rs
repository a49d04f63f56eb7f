//! The keeper: zklock's own executable in a hidden mode, leader of the
//! command's process group G, which SIGKILLs G when zklock ends however it
//! ends (the parent-death signal reaches the command's first process only),
//! and stops G at the lease deadline when zklock cannot (it is frozen). It
//! blocks every signal and reads a pipe whose write end only zklock holds:
//! orders (when to TERM and KILL G), and EOF when zklock is gone. See
//! docs/design.md, "The keeper".

use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::fs::OFlags;
use rustix::process::{Pid, Signal};

use crate::command::signals;
use crate::command::steps::Steps;
use crate::values::{monotonic_ns, on_monotonic_clock};

/// argv[1] of the keeper's hidden mode. Not an option clap knows: `main`
/// checks for it before parsing, and nobody types it by accident.
pub const HIDDEN_MODE: &str = "\u{1}zk-keeper";
/// The keeper's process name, which `pkill zklock` does not match.
const NAME: &str = "zk-keeper";

/// How long after the lease deadline the keeper sends TERM (at most half of
/// K): time for a zklock that is not frozen, which acts at the deadline, to
/// say so, so that the command does not get TERM twice.
const LAG: Duration = Duration::from_millis(100);

/// An order's size on the pipe: when to TERM, when to KILL, each in
/// nanoseconds of CLOCK_MONOTONIC (one clock for every process of the host),
/// little-endian; [`NEVER`] for never. Below PIPE_BUF, so written whole.
const ORDER: usize = 16;
const NEVER: u64 = u64::MAX;

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
        Keeper::spawn(&[])
    }

    /// Starts the keeper of a hold's `steps` (docs/design.md, "Holds"), in
    /// a group of its own: it kills the steps when the holder dies while
    /// they hold, and stops them at the lease deadline when the holder
    /// cannot. Once told to stand down, the holder's end ends it quietly.
    pub fn for_steps(steps: Steps) -> io::Result<Keeper> {
        let group = steps
            .group
            .map_or_else(|| "-".to_owned(), |g| g.to_string());
        Keeper::spawn(&["steps".to_owned(), steps.bound.to_string(), group])
    }

    fn spawn(target: &[String]) -> io::Result<Keeper> {
        let process = Command::new("/proc/self/exe")
            .arg0(NAME)
            .arg(HIDDEN_MODE)
            .args(target)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        // Orders never block zklock: a keeper that does not read (stopped
        // too) keeps the older, earlier, order it has.
        if let Some(stdin) = &process.stdin {
            rustix::fs::fcntl_setfl(stdin, rustix::fs::fcntl_getfl(stdin)? | OFlags::NONBLOCK)?;
        }
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

    /// Has the keeper stop the group at the lease `deadline` as zklock
    /// would, should zklock not do it itself: TERM (and CONT) just after it,
    /// KILL `kill_after` after it. Replaces the order before.
    pub fn stop_at(&mut self, deadline: Instant, kill_after: Duration) {
        let (term, kill) = stop_times(deadline, kill_after);
        self.order(Some(term), Some(kill));
    }

    /// Has the keeper KILL the group at `kill` and send no TERM: zklock sent
    /// it (and KILLs at that time too, if it is not frozen by then).
    pub fn kill_at(&mut self, kill: Instant) {
        self.order(None, Some(kill));
    }

    /// Has the keeper leave the group alone while zklock lives (an empty
    /// group, or one zklock no longer holds a lock for).
    pub fn stand_down(&mut self) {
        self.order(None, None);
    }

    fn order(&mut self, term: Option<Instant>, kill: Option<Instant>) {
        let Some(stdin) = self.process.stdin.as_mut() else {
            return;
        };
        let mut order = [0u8; ORDER];
        order[..8].copy_from_slice(&on_clock(term).to_le_bytes());
        order[8..].copy_from_slice(&on_clock(kill).to_le_bytes());
        // Whole or not at all (below PIPE_BUF); a keeper gone or not reading
        // is zklock's to notice by other means.
        let _ = stdin.write(&order);
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

/// Whether this process is the keeper: its first argument is ours.
pub fn is_hidden_mode() -> bool {
    std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == HIDDEN_MODE)
}

/// What the keeper stops: its own group, G (it leads it: see the module
/// comment), or a hold's steps.
enum Target {
    Group,
    Steps {
        steps: Steps,
        /// The bound process's pidfd, taken at the start while the holder
        /// (which checks it again once we are ready) knew it alive.
        bound: Option<std::os::fd::OwnedFd>,
    },
}

impl Target {
    /// From the arguments after [`HIDDEN_MODE`]: none, or `steps BOUND
    /// GROUP|-`.
    fn from_args() -> Target {
        let args: Vec<String> = std::env::args().skip(2).collect();
        let [kind, bound, group] = args.as_slice() else {
            return Target::Group;
        };
        let (Some(bound), true) = (bound.parse::<i32>().ok(), kind == "steps") else {
            return Target::Group;
        };
        let pidfd = Pid::from_raw(bound).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
        Target::Steps {
            steps: Steps {
                bound,
                group: group.parse().ok(),
            },
            bound: pidfd,
        }
    }

    fn signal(&self, signal: Signal) {
        match self {
            Target::Group => {
                let _ = rustix::process::kill_current_process_group(signal);
            }
            Target::Steps { steps, bound } => {
                let alive = bound.as_ref().is_some_and(|fd| {
                    let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                    rustix::event::poll(&mut fds, Some(&rustix::time::Timespec::default())) == Ok(0)
                });
                let me = [rustix::process::getpid().as_raw_pid()];
                // KILL again, for steps forked while a pass ran.
                let passes = if signal == Signal::KILL { 3 } else { 1 };
                for _ in 0..passes {
                    if steps.signal(signal, alive, &me) == 0 {
                        break;
                    }
                }
            }
        }
    }

    /// Kills the target, then ends (the group's kill ends the keeper too).
    fn kill(&self) -> ! {
        self.signal(Signal::KILL);
        std::process::exit(0)
    }
}

/// When the keeper TERMs and KILLs the group for a lease `deadline`.
fn stop_times(deadline: Instant, kill_after: Duration) -> (Instant, Instant) {
    (deadline + (kill_after / 2).min(LAG), deadline + kill_after)
}

/// `at` in nanoseconds of CLOCK_MONOTONIC ([`on_monotonic_clock`]);
/// [`NEVER`] for None.
fn on_clock(at: Option<Instant>) -> u64 {
    at.map_or(NEVER, on_monotonic_clock)
}

/// The keeper's hidden mode: blocks every signal, says it is ready, then
/// carries out the orders read from stdin until EOF (zklock gone), when it
/// kills its group.
pub fn run_hidden_mode() -> ! {
    // This process has a single thread: its mask is the process's.
    signals::change_mask(libc::SIG_SETMASK, signals::ALL);
    // For ps and top; exec named it after /proc/self/exe.
    let _ = std::fs::write("/proc/self/comm", NAME);
    let target = Target::from_args();
    let mut stdout = io::stdout();
    let _ = stdout.write_all(b"k").and_then(|()| stdout.flush());
    let stdin = rustix::stdio::stdin();
    // Nonblocking, so that every order waiting is read before acting: a
    // keeper continued after a stop acts on zklock's latest order.
    if rustix::fs::fcntl_getfl(stdin)
        .and_then(|flags| rustix::fs::fcntl_setfl(stdin, flags | OFlags::NONBLOCK))
        .is_err()
    {
        target.kill();
    }
    let (mut term, mut kill) = (NEVER, NEVER);
    // A hold's keeper told to stand down lets the holder end in peace (its
    // steps go on without a lock they no longer hold).
    let mut stood_down = false;
    loop {
        let mut order = [0u8; ORDER];
        match rustix::io::read(stdin, &mut order) {
            // Orders are written whole, so they are read whole.
            Ok(ORDER) => {
                term = u64::from_le_bytes(order[..8].try_into().expect("8 bytes"));
                kill = u64::from_le_bytes(order[8..].try_into().expect("8 bytes"));
                stood_down = term == NEVER && kill == NEVER;
                continue;
            }
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
            Ok(0) if stood_down && matches!(target, Target::Steps { .. }) => std::process::exit(0),
            // EOF: zklock is gone. An error: the same, for all we know.
            _ => target.kill(),
        }
        let now = monotonic_ns();
        if kill <= now {
            target.kill();
        }
        if term <= now {
            // A stopped process acts on TERM only once continued.
            target.signal(Signal::TERM);
            if matches!(target, Target::Group) {
                target.signal(Signal::CONT);
            }
            term = NEVER;
        }
        let next = term.min(kill);
        let wait = (next != NEVER).then(|| {
            let ns = next.saturating_sub(monotonic_ns());
            rustix::time::Timespec {
                tv_sec: (ns / 1_000_000_000) as _,
                tv_nsec: (ns % 1_000_000_000) as _,
            }
        });
        let mut fds = [rustix::event::PollFd::new(
            &stdin,
            rustix::event::PollFlags::IN,
        )];
        let _ = rustix::event::poll(&mut fds, wait.as_ref());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keeper_terms_after_zklock_would_and_kills_when_it_would() {
        let deadline = Instant::now() + Duration::from_secs(60);
        for k in [5_000, 500, 190, 40] {
            let kill_after = Duration::from_millis(k);
            let (term, kill) = stop_times(deadline, kill_after);
            assert!(term > deadline && term < kill, "{k}");
            assert!(term - deadline <= LAG, "{k}");
            assert_eq!(kill, deadline + kill_after, "{k}");
        }
    }

    #[test]
    fn instants_cross_to_the_monotonic_clock() {
        let now = Instant::now();
        let clock = monotonic_ns();
        let ahead = on_clock(Some(now + Duration::from_secs(2)));
        let behind = on_clock(Some(now - Duration::from_millis(1)));
        // Within the few microseconds between the two readings.
        assert!(
            ahead.abs_diff(clock + 2_000_000_000) < 50_000_000,
            "{ahead} {clock}"
        );
        assert!(behind < clock);
        assert_eq!(on_clock(None), NEVER);
    }
}
