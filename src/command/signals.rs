//! Signal delivery into the async world.
//!
//! Handlers are installed before zklock connects, so a signal that arrives at
//! any point is seen and handled by policy instead of killing zklock with its
//! node still in ZooKeeper. What each signal means is decided where it is
//! received: `run/` while connecting and waiting, `child.rs` while the
//! command runs.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// The standard signals ignored (SIG_IGN) when zklock started, one bit
/// each: `nohup` ignores HUP, a shell without job control INT and QUIT for
/// a background job. They stay ignored for zklock (no handler, so never
/// forwarded) and for the command (spawn.rs leaves them ignored), as with
/// every well-behaved wrapper. Not SIGPIPE: Rust's runtime ignores it
/// itself, and the command gets it at its default. Not SIGCHLD: zklock
/// needs it, and a command with it ignored cannot wait for its children.
static IGNORED_AT_START: AtomicU64 = AtomicU64::new(0);

/// Whether `signal` was ignored when zklock started (and so still is,
/// for zklock). Known once [`Signals::install`] ran; false before.
pub fn ignored_at_start(signal: i32) -> bool {
    (1..64).contains(&signal) && IGNORED_AT_START.load(Ordering::Relaxed) & (1 << signal) != 0
}

/// The bits of [`ignored_at_start`] (for spawn.rs).
pub fn ignored_at_start_set() -> u64 {
    IGNORED_AT_START.load(Ordering::Relaxed)
}

/// Reads which standard signals are ignored now; see [`IGNORED_AT_START`].
fn record_ignored() {
    let mut set = 0u64;
    for signal in 1..32 {
        if matches!(
            signal,
            libc::SIGKILL | libc::SIGSTOP | libc::SIGPIPE | libc::SIGCHLD
        ) {
            continue;
        }
        // SAFETY: sigaction with a null new action only writes the current
        // one into a zeroed local.
        let ignored = unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            libc::sigaction(signal, std::ptr::null(), &mut current) == 0
                && current.sa_sigaction == libc::SIG_IGN
        };
        if ignored {
            set |= 1 << signal;
        }
    }
    IGNORED_AT_START.store(set, Ordering::Relaxed);
}

pub struct Signals {
    delivery: SignalDelivery<AsyncFd<UnixStream>, SignalOnly>,
    queued: Vec<i32>,
}

impl Signals {
    /// Installs handlers for the forwarded signals not ignored at start,
    /// SIGCHLD and SIGCONT, after recording what was ignored: it is the
    /// first to install any. Must run inside the tokio runtime (the read
    /// end is registered with its reactor).
    pub fn install() -> Result<Signals> {
        record_ignored();
        let (read, write) = UnixStream::pair().context("creating the signal pipe")?;
        read.set_nonblocking(true)
            .context("creating the signal pipe")?;
        // SAFETY: the stream owns a valid descriptor, and the AsyncFd owns the
        // stream, so the descriptor is neither closed nor replaced while registered.
        let read = unsafe { AsyncFd::register(read) }.context("registering the signal pipe")?;
        let signals = FORWARDED
            .iter()
            .copied()
            .filter(|&signal| !ignored_at_start(signal))
            .chain([libc::SIGCHLD, libc::SIGCONT]);
        let delivery = SignalDelivery::with_pipe(read, write, SignalOnly, signals)
            .context("installing signal handlers")?;
        Ok(Signals {
            delivery,
            queued: Vec::new(),
        })
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
