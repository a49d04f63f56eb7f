//! What a hold is bound to (docs/design.md, "Holds"): the calling process
//! (`caller.rs` finds it), through a pidfd that `zklock hold` passes as the
//! holder's stdin, and --max-hold; and what a lost lock does to its steps.

use std::os::fd::OwnedFd;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::unix::AsyncFd;

use super::owner::Owner;
use crate::cli::OnLost;

/// What the hold is bound to.
pub(super) struct Binding {
    /// The calling process: a pidfd, robust to the reuse of its pid. A
    /// waiting hold gives up when it exits; the hold lasts as long as it
    /// does, but with --until-released.
    pub(super) caller: Bound,
    pub(super) until_released: bool,
    pub(super) max_hold: Option<Duration>,
    pub(super) on_lost: OnLost,
    /// Whose the hold is, for `zklock release PATH`.
    pub(super) owner: Owner,
}

impl Binding {
    /// The process the hold is bound to, unless --until-released.
    pub(super) fn bound(&self) -> Option<&Bound> {
        (!self.until_released).then_some(&self.caller)
    }

    /// Resolves once the bound process has exited; never when unbound.
    pub(super) async fn bound_exit(&self) {
        match self.bound() {
            Some(bound) => bound.exited().await,
            None => std::future::pending().await,
        }
    }
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

    /// Whether it has exited, now.
    pub(super) fn has_exited(&self) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            self.pidfd.get_ref(),
            rustix::event::PollFlags::IN,
        )];
        rustix::event::poll(&mut fds, Some(&rustix::time::Timespec::default())) != Ok(0)
    }

    /// Another watch of the same process, on a pidfd of its own.
    pub(super) fn duplicate(&self) -> Result<Bound> {
        let pidfd =
            rustix::io::fcntl_dupfd_cloexec(self.pidfd.get_ref(), 3).context("taking the pidfd")?;
        watch(pidfd, self.pid, self.name.clone())
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
    watch(pidfd, pid, name)
}

fn watch(pidfd: OwnedFd, pid: i32, name: Option<String>) -> Result<Bound> {
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
