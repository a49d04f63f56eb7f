//! The lease rule's arithmetic (docs/design.md, "Session and lease rules"):
//! how long after the server's last answer a holder keeps its command, when
//! it stops it, and which `--kill-after` fits a session. Pure.

use std::time::Duration;

use tokio::time::Instant;

use crate::values::human_duration;

/// What a disconnection means while holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnDisconnect {
    /// Keep running until the lease deadline while the session reconnects.
    Lease,
    /// Any disconnection loses the lock.
    Kill,
}

#[derive(Debug, Clone, Copy)]
pub struct LeasePolicy {
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
    pub kill_after: Duration,
    pub on_disconnect: OnDisconnect,
}

impl LeasePolicy {
    fn margin(&self) -> Duration {
        self.connection_timeout / 4 + Duration::from_millis(100)
    }

    /// How long after a request the server answered was sent the command
    /// may run without another answer: the server heard from the session
    /// then or later, so TERM at the end of this, and KILL K later, come m
    /// before the earliest expiry (T - K - m).
    pub fn lease(&self) -> Duration {
        self.session_timeout
            .saturating_sub(self.kill_after + self.margin())
    }

    /// The lease deadline given an answer to a request sent at `sent`.
    pub fn deadline_after(&self, sent: Instant) -> Instant {
        sent + self.lease()
    }

    /// How long after the server last heard from us (an answered request,
    /// the client's pings included) a holder asks something itself, if no
    /// other answer came meanwhile: where the lease leaves room, early
    /// enough that its answer, or the client's verdict that the connection
    /// is gone (a request unanswered for C) and one reconnection (C), come
    /// before the deadline; never more often than three times a lease. The
    /// client pings a connection quiet for T/3: where that comes first, a
    /// holder asks nothing.
    pub fn ask_after(&self) -> Duration {
        let lease = self.lease();
        (lease.saturating_sub(self.connection_timeout * 2)).max(lease / 3)
    }

    /// How long the command may keep running after C without an answer
    /// while the same session tries to come back. This is also how long
    /// zklock may be stopped with its command.
    pub fn grace(&self) -> Duration {
        match self.on_disconnect {
            OnDisconnect::Kill => Duration::ZERO,
            OnDisconnect::Lease => self.lease().saturating_sub(self.connection_timeout),
        }
    }

    /// The bound `--kill-after` must stay below: room for K and the margin
    /// before the earliest expiry, and (with `reconnect`, in lease mode) one
    /// connection timeout to reconnect in.
    fn kill_after_budget(&self, reconnect: bool) -> Duration {
        let needed = match (self.on_disconnect, reconnect) {
            (OnDisconnect::Lease, true) => self.connection_timeout,
            _ => Duration::ZERO,
        };
        self.session_timeout
            .saturating_sub(self.connection_timeout + self.margin() + needed)
    }

    /// Refuses settings under which the command could outlive the session.
    pub fn check(&self) -> Result<(), String> {
        let budget = self.kill_after_budget(true);
        if self.kill_after < budget {
            return Ok(());
        }
        Err(format!(
            "--kill-after {} leaves no room in a {} session: a lost lock could not be \
             given up before the session expires; use --kill-after below {} or a longer \
             --session-timeout",
            human_duration(self.kill_after),
            human_duration(self.session_timeout),
            human_duration(budget),
        ))
    }

    /// This policy with the `--kill-after` an unset option takes: the
    /// largest value below the budget, in whole 10 ms, at most
    /// [`DEFAULT_KILL_AFTER`]; in a session too short for that, half of
    /// what is left without a reconnection window. Errs when nothing is.
    pub fn with_default_kill_after(self) -> Result<LeasePolicy, String> {
        const STEP: Duration = Duration::from_millis(10);
        let below = |budget: Duration| {
            let steps =
                budget.saturating_sub(Duration::from_millis(1)).as_millis() / STEP.as_millis();
            STEP * steps as u32
        };
        let mut kill_after = below(self.kill_after_budget(true)).min(DEFAULT_KILL_AFTER);
        if kill_after.is_zero() {
            kill_after = below(self.kill_after_budget(false) / 2);
        }
        if kill_after.is_zero() {
            return Err(format!(
                "a {} session is too short to stop the command before it expires; \
                 use a longer --session-timeout",
                human_duration(self.session_timeout)
            ));
        }
        Ok(LeasePolicy { kill_after, ..self })
    }
}

/// `--kill-after` when not given and the session leaves room for it.
pub const DEFAULT_KILL_AFTER: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    /// A session of `t` seconds, with a `--kill-after` of `k` seconds.
    fn policy(t: u64, k: u64, mode: OnDisconnect) -> LeasePolicy {
        policy_ms(t * 1000, k * 1000, mode)
    }

    fn policy_ms(t_ms: u64, k_ms: u64, mode: OnDisconnect) -> LeasePolicy {
        let session_timeout = Duration::from_millis(t_ms);
        LeasePolicy {
            session_timeout,
            connection_timeout: crate::session::connection_timeout_for(session_timeout),
            kill_after: Duration::from_millis(k_ms),
            on_disconnect: mode,
        }
    }

    #[test]
    fn defaults_leave_room() {
        let p = policy(10, 5, OnDisconnect::Lease);
        assert!(p.check().is_ok());
        // 10s - 2s (connection) - 5s (kill) - 0.6s (margin)
        assert_eq!(p.grace(), Duration::from_millis(2400));
    }

    #[test]
    fn kill_after_as_long_as_the_session_is_refused() {
        let err = policy(10, 10, OnDisconnect::Lease).check().unwrap_err();
        assert!(err.contains("--kill-after 10s leaves no room"), "{err}");
        assert!(policy(10, 8, OnDisconnect::Kill).check().is_err());
        assert!(policy(10, 7, OnDisconnect::Kill).check().is_ok());
    }

    #[test]
    fn default_kill_after_fits_the_granted_session() {
        let default =
            |t_ms| policy_ms(t_ms, u64::MAX, OnDisconnect::Lease).with_default_kill_after();
        assert_eq!(default(60_000).unwrap().kill_after, DEFAULT_KILL_AFTER);
        assert_eq!(default(10_000).unwrap().kill_after, DEFAULT_KILL_AFTER);
        assert_eq!(
            default(4_000).unwrap().kill_after,
            Duration::from_millis(1640)
        );
        assert_eq!(
            default(2_000).unwrap().kill_after,
            Duration::from_millis(90)
        );
        // 1 s: no room to reconnect; half of the 0.4 s left before expiry.
        let short = default(1_000).unwrap();
        assert_eq!(short.kill_after, Duration::from_millis(190));
        assert!(short.grace() > Duration::ZERO);
        for t in [400, 1_000, 2_000, 4_000, 10_000, 60_000] {
            let p = default(t).unwrap();
            assert!(p.kill_after > Duration::ZERO, "{t}");
            assert!(
                p.connection_timeout + p.grace() + p.kill_after + p.margin() <= p.session_timeout,
                "{t}: {p:?}"
            );
        }
        assert!(default(100).is_err());
    }

    #[test]
    fn the_lease_counts_from_the_last_answer() {
        let p = policy(10, 5, OnDisconnect::Lease);
        // 10s - 5s (kill) - 0.6s (margin); grace is that less C (2s).
        assert_eq!(p.lease(), Duration::from_millis(4400));
        let sent = Instant::now();
        assert_eq!(p.deadline_after(sent), sent + Duration::from_millis(4400));
        // The same KILL time in both modes: the earliest expiry does not
        // depend on what a disconnection means.
        let kill = policy(10, 5, OnDisconnect::Kill);
        assert_eq!(kill.lease(), p.lease());
    }

    #[test]
    fn answers_come_well_within_the_lease() {
        for t in [400, 1_000, 2_000, 4_000, 10_000, 60_000] {
            let p = policy_ms(t, u64::MAX, OnDisconnect::Lease)
                .with_default_kill_after()
                .unwrap();
            // A connected holder, asking on time, never reaches its
            // deadline between two answers: a lost connection is found
            // (C) before it, with room to reconnect where there is any.
            assert!(p.ask_after() < p.lease(), "{t}: {p:?}");
            if p.check().is_ok() {
                assert!(
                    p.ask_after() + p.connection_timeout < p.lease(),
                    "{t}: {p:?}"
                );
            }
        }
    }

    #[test]
    fn kill_mode_has_no_grace() {
        assert_eq!(policy(10, 1, OnDisconnect::Kill).grace(), Duration::ZERO);
    }
}
