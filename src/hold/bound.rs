//! What a hold is bound to (docs/design.md, "Holds"): the calling process,
//! through a pidfd that `zklock hold` passes as the holder's stdin, and
//! --max-hold; and what a lost lock does to that process.

use std::os::fd::OwnedFd;
use std::time::Duration;

use anyhow::{Context, Result};
use rustix::process::Signal;
use tokio::io::unix::AsyncFd;

use super::owner::Owner;
use crate::cli::OnLost;

/// What the hold is bound to.
pub(super) struct Binding {
    /// The calling process, when bound to it: a pidfd, robust to the reuse
    /// of its pid.
    pub(super) bound: Option<Bound>,
    pub(super) max_hold: Option<Duration>,
    pub(super) on_lost: OnLost,
    /// Whose the hold is, for `zklock release PATH`.
    pub(super) owner: Owner,
}

pub(super) struct Bound {
    pidfd: AsyncFd<OwnedFd>,
    pub(super) pid: i32,
    /// Its name (`comm`), if it could still be read.
    pub(super) name: Option<String>,
}

impl Bound {
    /// Resolves once the process has exited (its pidfd reads ready).
    pub(super) async fn exited(&self) {
        let _ = self.pidfd.readable().await;
    }

    pub(super) fn terminate(&self) {
        let _ = rustix::process::pidfd_send_signal(self.pidfd.get_ref(), Signal::TERM);
    }
}

/// The bound process's pidfd, which `zklock hold` passed as our stdin;
/// stdin becomes /dev/null.
pub(super) fn bound_from_stdin(pid: i32) -> Result<Bound> {
    let stdin = rustix::stdio::stdin();
    let pidfd = rustix::io::fcntl_dupfd_cloexec(stdin, 3).context("taking the pidfd")?;
    rustix::stdio::dup2_stdin(dev_null()?)?;
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|name| name.trim_end().to_owned())
        .filter(|name| !name.is_empty());
    // SAFETY: the AsyncFd owns the descriptor, which is neither closed nor
    // replaced while it is registered.
    let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
        .context("watching the calling process")?;
    Ok(Bound { pidfd, pid, name })
}

/// What the holder's stdio becomes: nothing of the caller's stays open.
pub(super) fn dev_null() -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDWR,
        rustix::fs::Mode::empty(),
    )
}
