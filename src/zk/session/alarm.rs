//! The session's one timer (the next ping, or the moment the connection
//! counts as dead), as a timerfd: the kernel wakes the process at that
//! instant and not before. tokio's timer wheel would also wake it at each
//! slot boundary the deadline lies beyond (every 64 ms slot and 4.096 s
//! slot on the way), so an idle session would not sleep until its ping
//! (docs/design.md, "The protocol layer").

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

pub struct Alarm {
    fd: AsyncFd<OwnedFd>,
    /// The instant it is set for, so that setting it again for the same
    /// instant makes no system call.
    at: Option<Instant>,
}

impl Alarm {
    /// An alarm set for nothing yet. Must run inside the runtime.
    pub fn new() -> io::Result<Alarm> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        // SAFETY: the AsyncFd owns the descriptor, so it is neither closed
        // nor replaced while registered.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Alarm { fd, at: None })
    }

    /// Rings at `at` (at once if that has passed), and no longer at the
    /// instant set before.
    pub fn set(&mut self, at: Instant) -> io::Result<()> {
        if self.at == Some(at) {
            return Ok(());
        }
        // Relative to now: an Instant is CLOCK_MONOTONIC, but its seconds
        // are not exposed. A zero it_value would disarm the timer.
        let after = at
            .saturating_duration_since(Instant::now())
            .max(Duration::from_nanos(1));
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let value = Itimerspec {
            it_interval: zero,
            it_value: Timespec::try_from(after).map_err(|_| io::ErrorKind::InvalidInput)?,
        };
        timerfd_settime(self.fd.get_ref(), TimerfdTimerFlags::empty(), &value)?;
        self.at = Some(at);
        Ok(())
    }

    /// Resolves once the instant set has come.
    pub async fn ring(&mut self) -> io::Result<()> {
        loop {
            let mut ready = self.fd.readable().await?;
            let mut expirations = [0u8; 8];
            match rustix::io::read(self.fd.get_ref(), &mut expirations) {
                Ok(_) => {
                    // The read drained it: wait for the kernel's next edge
                    // rather than read again to learn so.
                    ready.clear_ready();
                    self.at = None;
                    return Ok(());
                }
                Err(rustix::io::Errno::AGAIN) => ready.clear_ready(),
                Err(err) => return Err(err.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rings_at_the_instant_set_and_only_at_the_last_one() {
        let mut alarm = Alarm::new().unwrap();
        let start = Instant::now();
        alarm.set(start + Duration::from_secs(3600)).unwrap();
        alarm.set(start + Duration::from_millis(30)).unwrap();
        alarm.ring().await.unwrap();
        assert!(start.elapsed() >= Duration::from_millis(30));
        // A past instant rings at once rather than never.
        alarm.set(start).unwrap();
        alarm.ring().await.unwrap();
    }
}
