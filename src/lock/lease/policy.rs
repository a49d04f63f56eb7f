//! The lease rule's arithmetic (docs/design.md, "Session and lease rules"):
//! how long after the server's last answer a holder keeps its command, when
//! it stops it, and which `--kill-after` fits a session. Pure.

use std::time::Duration;

use zklock::zk::clock::Moment;

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
    pub fn deadline_after(&self, sent: Moment) -> Moment {
        sent + self.lease()
    }

    /// How late the leader may learn that a member heard from the session:
    /// the leader pings each follower every tickTime/2 and the follower's
    /// answer lists the sessions it heard from since. zklock cannot read
    /// the ensemble's tickTime; ZooKeeper grants no session shorter than
    /// its minSessionTimeout, 2 tickTime unless an operator lowered it, so
    /// tickTime/2 is at most T/4; 100 ms more for the ping's way and the
    /// leader's scheduling (docs/design.md, "Session and lease rules").
    pub fn proof_lag(&self) -> Duration {
        self.session_timeout / 4 + Duration::from_millis(100)
    }

    /// How often a holder confirms the lease through the leader: a
    /// confirmation proves what was heard a proof lag before it was sent,
    /// so the proven time trails now by at most the lag, two intervals and
    /// the round trips. Three intervals fit in what the lease leaves after
    /// the lag, so that one confirmation may be late and the next still
    /// comes before the deadline; and at most half the lag, so that a long
    /// lease leaves a stall (a server's pause, a reconnection) at least
    /// `lease - 2 lag` of it.
    pub fn confirm_every(&self) -> Duration {
        let room = self.lease().saturating_sub(self.proof_lag());
        (room / 3)
            .min(self.proof_lag() / 2)
            .max(Duration::from_millis(20))
    }

    /// Whether a lease that starts at `now` counting from `proven` must
    /// confirm at once rather than an interval later: its regular
    /// confirmations keep up with the deadline only from a proven time
    /// less than about an interval old, which a lock found ours by a
    /// listing (or a create) has and one made ours by the node ahead's
    /// deletion alone may not (its last answer may be a ping T/3 old).
    /// Half an interval leaves the other half for the round trips.
    pub fn confirms_at_once(&self, proven: Moment, now: Moment) -> bool {
        now.saturating_duration_since(proven) > self.confirm_every() / 2
    }

    /// This policy in a session the ensemble granted `granted` on a
    /// (re)connection: a shorter timeout shortens the lease from then on
    /// (`--kill-after` stays); never longer than the first one's.
    pub fn granted(self, granted: Duration) -> LeasePolicy {
        if granted >= self.session_timeout {
            return self;
        }
        LeasePolicy {
            session_timeout: granted,
            connection_timeout: crate::session::connection_timeout_for(granted),
            ..self
        }
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
    /// before the earliest expiry, and (with `room`) one connection timeout
    /// more: in lease mode to reconnect in, and in both modes so that the
    /// lease (T - K - m, then over 2C, which is P + 0.15 T or more) outlasts
    /// the proof lag by the confirmations' round trips. Without it, a
    /// kill-mode lease of C is shorter than P in short sessions.
    fn kill_after_budget(&self, room: bool) -> Duration {
        let needed = match room {
            true => self.connection_timeout,
            false => Duration::ZERO,
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
        // Kill mode leaves the same room: its lease must outlast the lag.
        assert!(policy(10, 7, OnDisconnect::Kill).check().is_err());
        assert!(policy(10, 5, OnDisconnect::Kill).check().is_ok());
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
        let sent = Moment::now();
        assert_eq!(p.deadline_after(sent), sent + Duration::from_millis(4400));
        // The same KILL time in both modes: the earliest expiry does not
        // depend on what a disconnection means.
        let kill = policy(10, 5, OnDisconnect::Kill);
        assert_eq!(kill.lease(), p.lease());
    }

    #[test]
    fn answers_come_well_within_the_lease() {
        // Sessions of at least 2 ticks of 500 ms (ZooKeeper's minimum).
        let modes = [OnDisconnect::Lease, OnDisconnect::Kill];
        for (t, mode) in [1_000, 2_000, 4_000, 6_000, 10_000, 60_000]
            .into_iter()
            .flat_map(|t| modes.map(|mode| (t, mode)))
        {
            let p = policy_ms(t, u64::MAX, mode)
                .with_default_kill_after()
                .unwrap();
            // A connected holder confirming on time never reaches its
            // deadline: the proven time trails an answer by the lag and
            // one interval, and the next answer comes an interval later,
            // with an interval to spare.
            let every = p.confirm_every();
            assert!(
                p.proof_lag() + every * 3 <= p.lease(),
                "{t} {mode:?}: {p:?}"
            );
            assert!(every >= Duration::from_millis(50), "{t} {mode:?}: {p:?}");
        }
    }

    #[test]
    fn the_proof_lag_is_half_the_longest_tick_the_session_allows() {
        // Production ticks (2 s) allow sessions from 4 s: T/4 = tickTime/2.
        let p = policy(4, 1, OnDisconnect::Lease);
        assert_eq!(p.proof_lag(), Duration::from_millis(1100));
        // 4 s - 1 s - 0.35 s = 2.65 s; 1.55 s after the lag, a third each.
        assert_eq!(p.confirm_every(), Duration::from_nanos(516_666_666));
        // A long lease: half the lag, which leaves a stall lease - 2 lag.
        let long = policy(12, 1, OnDisconnect::Lease);
        assert_eq!(long.proof_lag(), Duration::from_millis(3100));
        assert_eq!(long.confirm_every(), Duration::from_millis(1550));
    }

    #[test]
    fn a_lease_counting_from_an_old_answer_confirms_at_once() {
        let p = policy(4, 1, OnDisconnect::Lease);
        let now = Moment::now();
        // Found ours by a listing answered just now: on schedule.
        assert!(!p.confirms_at_once(now - Duration::from_millis(5), now));
        // By a deletion alone, the last answer a ping 1.2 s before.
        assert!(p.confirms_at_once(now - Duration::from_millis(1200), now));
        // The line between: half an interval.
        let half = p.confirm_every() / 2;
        assert!(!p.confirms_at_once(now - half, now));
        assert!(p.confirms_at_once(now - half - Duration::from_millis(1), now));
    }

    #[test]
    fn a_shorter_granted_session_shortens_the_lease_and_a_longer_one_does_not() {
        let p = policy(10, 2, OnDisconnect::Lease);
        let shorter = p.granted(Duration::from_secs(6));
        assert_eq!(shorter.session_timeout, Duration::from_secs(6));
        assert_eq!(shorter.kill_after, p.kill_after);
        // 6 s - 2 s - (1.2 s / 4 + 0.1 s)
        assert_eq!(shorter.lease(), Duration::from_millis(3600));
        assert!(shorter.lease() < p.lease());
        let longer = p.granted(Duration::from_secs(20));
        assert_eq!(longer.lease(), p.lease());
    }

    #[test]
    fn kill_mode_has_no_grace() {
        assert_eq!(policy(10, 1, OnDisconnect::Kill).grace(), Duration::ZERO);
    }
}
