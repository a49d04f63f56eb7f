//! Signal delivery into the async world. Handlers are installed before
//! zklock connects, so that no signal kills zklock with its node still in
//! ZooKeeper; what a signal means is decided where it is received: `run/`
//! while connecting and waiting, `child.rs` while the command runs.

use std::os::unix::net::UnixStream;

use anyhow::{Context, Result};
use signal_hook::iterator::backend::SignalDelivery;
use signal_hook::iterator::exfiltrator::SignalOnly;
use tokio::io::unix::AsyncFd;

/// Signals zklock forwards to the command's process group.
pub const FORWARDED: [i32; 7] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
];

/// Forwarded signals whose default action ends a process: receiving one asks
/// the command to stop, so zklock starts the `--kill-after` timer.
pub fn is_terminating(signal: i32) -> bool {
    matches!(
        signal,
        libc::SIGINT | libc::SIGTERM | libc::SIGHUP | libc::SIGQUIT
    )
}

/// Forwarded signals that end zklock itself while it connects or waits, as
/// their default action would, but with cleanup. SIGWINCH is harmless
/// there, and so is SIGCONT (a shell's `fg` after Ctrl-Z stopped zklock).
pub fn aborts_waiting(signal: i32) -> bool {
    FORWARDED.contains(&signal) && signal != libc::SIGWINCH
}

/// A set of signals as the kernel writes one (and /proc/PID/status shows
/// it): bit N-1 for signal N.
pub fn set(signals: &[i32]) -> u64 {
    signals
        .iter()
        .filter(|&&signal| (1..=64).contains(&signal))
        .fold(0, |set, &signal| set | 1 << (signal - 1))
}

/// Every signal, as a [`set`].
pub const ALL: u64 = u64::MAX;

/// Reads which standard signals are ignored now (`nohup`'s HUP), as a
/// [`set`], from /proc (the same dispositions sigaction reports). Not
/// SIGPIPE (Rust's runtime ignores it itself) nor SIGCHLD (zklock needs it,
/// and a command with it ignored cannot wait for its children).
fn ignored_now() -> u64 {
    let ignored = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
            u64::from_str_radix(line.trim(), 16).ok()
        })
        .unwrap_or(0);
    let standard = (1 << 31) - 1; // signals 1 to 31
    let never = set(&[libc::SIGKILL, libc::SIGSTOP, libc::SIGPIPE, libc::SIGCHLD]);
    ignored & standard & !never
}

/// Changes the calling thread's signal mask (`how`: `libc::SIG_BLOCK`,
/// `SIG_UNBLOCK` or `SIG_SETMASK`) with `signals` (a [`set`]); returns the
/// mask it replaced, as a set. rustix has no stable API for signal masks.
/// Only async-signal-safe calls, without allocating: spawn.rs calls it
/// between fork and exec.
pub fn change_mask(how: libc::c_int, signals: u64) -> u64 {
    // SAFETY: both sigset_t are plain data, initialized by sigemptyset
    // before any other use; pthread_sigmask only reads the first, writes
    // the second and changes this thread's mask.
    unsafe {
        let mut new: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut new);
        libc::sigemptyset(&mut old);
        for signal in 1..=64 {
            if signals & set(&[signal]) != 0 {
                // glibc refuses the two signals it reserves (32, 33): they
                // stay as they are.
                libc::sigaddset(&mut new, signal);
            }
        }
        libc::pthread_sigmask(how, &new, &mut old);
        (1..=64)
            .filter(|&signal| libc::sigismember(&old, signal) == 1)
            .fold(0, |mask, signal| mask | set(&[signal]))
    }
}

pub struct Signals {
    delivery: SignalDelivery<AsyncFd<UnixStream>, SignalOnly>,
    queued: Vec<i32>,
    /// The standard signals ignored (SIG_IGN) when zklock started, as a
    /// [`set`]: they stay ignored for zklock and for the command.
    ignored_at_start: u64,
}

impl Signals {
    /// Installs handlers for the forwarded signals not ignored at start,
    /// SIGCHLD and SIGCONT, after recording what was ignored: it is the
    /// first to install any. Must run inside the tokio runtime (the read
    /// end is registered with its reactor).
    pub fn install() -> Result<Signals> {
        let ignored_at_start = ignored_now();
        let (read, write) = UnixStream::pair().context("creating the signal pipe")?;
        read.set_nonblocking(true)
            .context("creating the signal pipe")?;
        // SAFETY: the stream owns a valid descriptor, and the AsyncFd owns the
        // stream, so the descriptor is neither closed nor replaced while registered.
        let read = unsafe { AsyncFd::register(read) }.context("registering the signal pipe")?;
        let signals = FORWARDED
            .iter()
            .copied()
            .filter(|&signal| ignored_at_start & set(&[signal]) == 0)
            .chain([libc::SIGCHLD, libc::SIGCONT]);
        let delivery = SignalDelivery::with_pipe(read, write, SignalOnly, signals)
            .context("installing signal handlers")?;
        Ok(Signals {
            delivery,
            queued: Vec::new(),
            ignored_at_start,
        })
    }

    /// The standard signals ignored when zklock started (and so still,
    /// for zklock), as a [`set`].
    pub fn ignored_at_start(&self) -> u64 {
        self.ignored_at_start
    }

    /// The next signal received. Cancel safe: signals already drained from
    /// the pipe wait in `queued` for the next call.
    pub async fn recv(&mut self) -> i32 {
        loop {
            if let Some(signal) = self.queued.pop() {
                return signal;
            }
            match self.delivery.get_read().readable().await {
                // Clearing readiness before draining is race free: bytes
                // written after the drain make the fd readable again.
                Ok(mut guard) => guard.clear_ready(),
                // The reactor is gone only when the runtime shuts down.
                Err(_) => std::future::pending::<()>().await,
            }
            let mut arrived: Vec<i32> = self.delivery.pending().collect();
            // SIGCHLD last in `queued` order means first out: reaping early
            // lets a forwarded signal see that the command already exited.
            arrived.sort_by_key(|&s| s == libc::SIGCHLD);
            self.queued = arrived;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_number_signals_as_the_kernel_does() {
        assert_eq!(set(&[libc::SIGHUP]), 1);
        assert_eq!(set(&[libc::SIGHUP, libc::SIGINT]), 0b11);
        assert_eq!(set(&[64]), 1 << 63);
        assert_eq!(set(&[0, 65]), 0);
    }

    #[test]
    fn change_mask_returns_the_mask_it_replaced() {
        let usr2 = set(&[libc::SIGUSR2]);
        let before = change_mask(libc::SIG_BLOCK, usr2);
        let during = change_mask(libc::SIG_SETMASK, before);
        assert_eq!(during, before | usr2);
        assert_eq!(change_mask(libc::SIG_BLOCK, 0), before);
    }
}
