//! The host's clock for everything a session's timeout is measured
//! against: CLOCK_BOOTTIME ([`Moment`]), and one timer on it ([`Alarm`]).
//! CLOCK_MONOTONIC, and tokio's `Instant` and timers on it, stop while the
//! host is suspended (a laptop's lid closed, `systemctl suspend`), while the
//! ensemble's clocks, which expire the session, do not: a lease deadline on
//! them would pass that much after the server expired the session, and a
//! woken host would run its command on beside the next holder's. CLOCK_BOOTTIME
//! counts the suspension too, so a host woken past a deadline finds it
//! passed at once (docs/design.md, "Session and lease rules").
//!
//! The alarm is a timerfd: the kernel wakes the process at that moment and
//! not before, and on waking from a suspension that passed it. tokio's
//! timer wheel would also wake it at each slot boundary the deadline lies
//! beyond (every 64 ms slot and 4.096 s slot on the way), so an idle session
//! would not sleep until its ping (docs/design.md, "The protocol layer").

use std::io;
use std::ops::{Add, Sub};
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::time::{
    ClockId, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, clock_gettime,
    timerfd_create, timerfd_settime,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A moment on CLOCK_BOOTTIME: the time since the host booted, its
/// suspensions included. One clock for every process of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Moment(Duration);

impl Moment {
    pub fn now() -> Moment {
        let now = clock_gettime(ClockId::Boottime);
        Moment(Duration::new(now.tv_sec as u64, now.tv_nsec as u32))
    }

    /// The moment `ns` nanoseconds after boot ([`Moment::as_nanos`]).
    pub fn from_nanos(ns: u64) -> Moment {
        Moment(Duration::from_nanos(ns))
    }

    /// Nanoseconds since boot: how a moment crosses to another process.
    pub fn as_nanos(self) -> u64 {
        u64::try_from(self.0.as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn checked_sub(self, duration: Duration) -> Option<Moment> {
        self.0.checked_sub(duration).map(Moment)
    }

    pub fn saturating_duration_since(self, earlier: Moment) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    pub fn elapsed(self) -> Duration {
        Moment::now().saturating_duration_since(self)
    }

    /// tokio's `Instant` of this moment as the two clocks stand now: for a
    /// timer that may run late by a suspension still to come (the time the
    /// ensemble's clocks decide nothing by), or a tokio API.
    pub fn to_instant(self) -> tokio::time::Instant {
        let (now, instant) = (Moment::now(), tokio::time::Instant::now());
        match self.0.checked_sub(now.0) {
            Some(ahead) => instant + ahead,
            None => (instant.checked_sub(now.0 - self.0)).unwrap_or(instant),
        }
    }

    fn timespec(self) -> Timespec {
        Timespec {
            tv_sec: self.0.as_secs() as _,
            tv_nsec: self.0.subsec_nanos() as _,
        }
    }
}

impl Add<Duration> for Moment {
    type Output = Moment;
    fn add(self, duration: Duration) -> Moment {
        Moment(self.0.saturating_add(duration))
    }
}

/// At the boot at the earliest: an earlier moment is as long past.
impl Sub<Duration> for Moment {
    type Output = Moment;
    fn sub(self, duration: Duration) -> Moment {
        Moment(self.0.saturating_sub(duration))
    }
}

/// Zero if `earlier` is not earlier.
impl Sub<Moment> for Moment {
    type Output = Duration;
    fn sub(self, earlier: Moment) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// Resolves at `at`, or at once on waking from a suspension that passed it.
/// Nothing happens before the first poll: a branch of a `select!` that is
/// disabled costs no system call.
pub async fn sleep_until(at: Moment) {
    if let Ok(mut alarm) = Alarm::new()
        && alarm.set(at).is_ok()
        && alarm.ring().await.is_ok()
    {
        return;
    }
    // No timerfd to be had (out of descriptors): tokio's timer, which a
    // suspension still to come would make late.
    tokio::time::sleep_until(at.to_instant()).await
}

pub struct Alarm {
    fd: AsyncFd<OwnedFd>,
    /// The moment it is set for, so that setting it again for the same
    /// moment makes no system call.
    at: Option<Moment>,
}

impl Alarm {
    /// An alarm set for nothing yet. Must run inside the runtime.
    pub fn new() -> io::Result<Alarm> {
        let fd = timerfd_create(
            TimerfdClockId::Boottime,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        // SAFETY: the AsyncFd owns the descriptor, so it is neither closed
        // nor replaced while registered.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Alarm { fd, at: None })
    }

    /// Rings at `at` (at once if that has passed), and no longer at the
    /// moment set before.
    pub fn set(&mut self, at: Moment) -> io::Result<()> {
        if self.at == Some(at) {
            return Ok(());
        }
        // Absolute: a zero it_value would disarm the timer, so the boot
        // itself stands for "now".
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let value = Itimerspec {
            it_interval: zero,
            it_value: at.max(Moment(Duration::from_nanos(1))).timespec(),
        };
        timerfd_settime(self.fd.get_ref(), TimerfdTimerFlags::ABSTIME, &value)?;
        self.at = Some(at);
        Ok(())
    }

    /// Resolves once the moment set has come.
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
    async fn rings_at_the_moment_set_and_only_at_the_last_one() {
        let mut alarm = Alarm::new().unwrap();
        let start = Moment::now();
        alarm.set(start + Duration::from_secs(3600)).unwrap();
        alarm.set(start + Duration::from_millis(30)).unwrap();
        alarm.ring().await.unwrap();
        assert!(start.elapsed() >= Duration::from_millis(30));
        // A past moment rings at once rather than never.
        alarm.set(start).unwrap();
        alarm.ring().await.unwrap();
    }

    #[tokio::test]
    async fn sleeps_until_a_moment() {
        let start = Moment::now();
        sleep_until(start + Duration::from_millis(30)).await;
        assert!(start.elapsed() >= Duration::from_millis(30));
        sleep_until(start).await;
    }

    #[test]
    fn moments_cross_to_tokio_instants_and_to_other_processes() {
        let (now, instant) = (Moment::now(), tokio::time::Instant::now());
        let ahead = (now + Duration::from_secs(2)).to_instant();
        let behind = (now - Duration::from_millis(1)).to_instant();
        // Within the few microseconds between the readings.
        let off = ahead.duration_since(instant + Duration::from_secs(2));
        assert!(off < Duration::from_millis(50), "{off:?}");
        assert!(behind < instant);
        assert_eq!(Moment::from_nanos(now.as_nanos()), now);
        assert_eq!(now - Duration::MAX, Moment::from_nanos(0));
        assert_eq!(now - (now + Duration::from_secs(1)), Duration::ZERO);
    }
}
