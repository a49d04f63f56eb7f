//! The keeper's own side: what runs in the keeper process, whether forked
//! by a run (system calls only) or started in the hidden mode by a hold;
//! and the orders' wire format both sides share.

use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use rustix::process::{Pid, Signal};
use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};
use zklock::zk::clock::Moment;

use crate::command::signals;
use crate::command::steps::Steps;

/// argv[1] of the keeper's hidden mode. Not an option clap knows: `main`
/// checks for it before parsing, and nobody types it by accident.
pub(super) const HIDDEN_MODE: &str = "\u{1}zk-keeper";

/// The keeper's process name, which `pkill zklock` does not match.
pub(super) const NAME: &std::ffi::CStr = c"zk-keeper";

/// An order's size on the pipe: when to TERM, when to KILL, each in
/// nanoseconds of CLOCK_MONOTONIC (one clock for every process of the host),
/// little-endian; [`NEVER`] for never. Below PIPE_BUF, so written whole.
pub(super) const ORDER: usize = 16;
pub(super) const NEVER: u64 = u64::MAX;

/// Whether this process is the keeper: its first argument is ours.
pub fn is_hidden_mode() -> bool {
    std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == HIDDEN_MODE)
}

/// What the keeper stops: its own group, G (it leads it: see the module
/// comment in mod.rs), or a hold's steps.
enum Target {
    Group,
    Steps {
        steps: Steps,
        /// The bound process's pidfd, taken at the start while the holder
        /// (which checks it again once we are ready) knew it alive.
        bound: Option<OwnedFd>,
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
            steps: Steps::new(bound, group.parse().ok()),
            bound: pidfd,
        }
    }

    fn signal(&mut self, signal: Signal) {
        match self {
            Target::Group => {
                let _ = rustix::process::kill_current_process_group(signal);
            }
            Target::Steps { steps, bound } => {
                let alive = bound.as_ref().is_some_and(|fd| {
                    let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                    rustix::event::poll(&mut fds, Some(&Timespec::default())) == Ok(0)
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
    fn kill(&mut self) -> ! {
        self.signal(Signal::KILL);
        end()
    }
}

pub(super) fn nonblocking(fd: impl AsFd) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    Ok(rustix::fs::fcntl_setfl(&fd, flags | OFlags::NONBLOCK)?)
}

/// Ends the keeper at once: a fork must not run zklock's exit handlers.
fn end() -> ! {
    // SAFETY: _exit ends the process without touching its memory.
    unsafe { libc::_exit(0) }
}

/// The forked keeper, with every signal blocked from its birth: a process
/// of its own group, holding the orders' read end on stdin, /dev/null on
/// stdout and stderr, and no other descriptor of zklock's or its caller's
/// (the caller's pipes would wait on it). The fork's other threads are
/// gone, perhaps mid-lock: from here on, system calls only.
pub(super) fn forked(orders: OwnedFd) -> ! {
    let _ = rustix::process::setpgid(None, None);
    let moved = rustix::stdio::dup2_stdin(&orders).and_then(|()| {
        // Opened once stdin is taken, so that it cannot land there; left
        // open, as it may be stdout itself.
        let null = std::mem::ManuallyDrop::new(rustix::fs::open(
            c"/dev/null",
            OFlags::RDWR,
            Mode::empty(),
        )?);
        rustix::stdio::dup2_stdout(&*null)?;
        rustix::stdio::dup2_stderr(&*null)
    });
    // SAFETY: close_range only closes descriptors; nothing here uses them.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if moved.is_err() {
        Target::Group.kill();
    }
    let _ = rustix::thread::set_name(NAME);
    keep(Target::Group)
}

/// The keeper's hidden mode (a hold's keeper): blocks every signal, says it
/// is ready, then keeps its target.
pub fn run_hidden_mode() -> ! {
    // This process has a single thread: its mask is the process's.
    signals::change_mask(libc::SIG_SETMASK, signals::ALL);
    // For ps and top; exec named it after /proc/self/exe.
    let _ = rustix::thread::set_name(NAME);
    let target = Target::from_args();
    let mut stdout = io::stdout();
    let _ = stdout.write_all(b"k").and_then(|()| stdout.flush());
    keep(target)
}

/// Carries out the orders read from stdin until EOF (zklock gone), when it
/// kills its target. System calls only, for the fork.
fn keep(mut target: Target) -> ! {
    let stdin = rustix::stdio::stdin();
    // Nonblocking, so that every order waiting is read before acting: a
    // keeper continued after a stop acts on zklock's latest order.
    if nonblocking(stdin).is_err() {
        target.kill();
    }
    let (mut term, mut kill) = (NEVER, NEVER);
    // A hold's keeper told to stand down lets the holder end in peace (its
    // steps go on without a lock they no longer hold).
    let mut stood_down = false;
    // Orders are moments of CLOCK_BOOTTIME, and so is this alarm: poll's
    // own timeout would not count a suspension of the host (zk::clock).
    let alarm = rustix::time::timerfd_create(TimerfdClockId::Boottime, TimerfdFlags::CLOEXEC).ok();
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
            Ok(0) if stood_down && matches!(target, Target::Steps { .. }) => end(),
            // EOF: zklock is gone. An error: the same, for all we know.
            _ => target.kill(),
        }
        let now = Moment::now().as_nanos();
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
        // Set again each time (or disarmed): that also clears its ring.
        let armed = alarm.as_ref().is_some_and(|alarm| set(alarm, next));
        let wait = (next != NEVER && !armed)
            .then(|| timespec(next.saturating_sub(Moment::now().as_nanos())));
        let read = rustix::event::PollFlags::IN;
        // No Vec: a fork of a threaded process must not allocate.
        let mut fds = [
            rustix::event::PollFd::new(&stdin, read),
            rustix::event::PollFd::new(&stdin, read),
        ];
        let watched = match &alarm {
            Some(alarm) => {
                fds[1] = rustix::event::PollFd::new(alarm, read);
                2
            }
            None => 1,
        };
        let _ = rustix::event::poll(&mut fds[..watched], wait.as_ref());
    }
}

/// Arms `alarm` for `at` ([`Moment::as_nanos`]), or disarms it for
/// [`NEVER`]; whether it is armed.
fn set(alarm: &OwnedFd, at: u64) -> bool {
    let value = Itimerspec {
        it_interval: timespec(0),
        // A zero it_value disarms; the boot itself stands for "now".
        it_value: timespec(if at == NEVER { 0 } else { at.max(1) }),
    };
    let set = rustix::time::timerfd_settime(alarm, TimerfdTimerFlags::ABSTIME, &value);
    set.is_ok() && at != NEVER
}

fn timespec(ns: u64) -> Timespec {
    Timespec {
        tv_sec: (ns / 1_000_000_000) as _,
        tv_nsec: (ns % 1_000_000_000) as _,
    }
}
