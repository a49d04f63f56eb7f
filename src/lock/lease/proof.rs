//! What proves that the leader still keeps the session (docs/design.md,
//! "Session and lease rules"): the time the lease counts from. Pure.
//!
//! A member answers pings and reads on its own, even cut off from the
//! leader, and the leader learns that a member heard from the session only
//! from the member's answer to its next ping. So an answer proves nothing
//! by itself; it is a mark, and a write answered through the leader (a
//! confirmation) proves every mark taken a proof lag before it was sent:
//! the member had answered the leader's ping with that session by then, on
//! the connection the confirmation went through after it. A handshake
//! resuming the session is proven at once: the member asks the leader,
//! which restarts the session's timeout.

use std::collections::VecDeque;
use std::time::Duration;

use zklock::zk::clock::Moment;

/// The proven time and the marks that may prove a later one.
#[derive(Debug, Clone)]
pub struct Proof {
    proven: Moment,
    /// (when taken, the send time of the latest request answered by then),
    /// oldest first.
    marks: VecDeque<(Moment, Moment)>,
}

impl Proof {
    /// Counting from `proven`.
    pub fn new(proven: Moment) -> Proof {
        Proof {
            proven,
            marks: VecDeque::new(),
        }
    }

    /// The leader restarted the session's timeout no earlier than this.
    pub fn proven(&self) -> Moment {
        self.proven
    }

    /// At `now`, the latest request a member answered was sent at `heard`.
    pub fn mark(&mut self, now: Moment, heard: Moment) {
        if heard <= self.proven {
            return;
        }
        if let Some(last) = self.marks.back_mut()
            && last.1 >= heard
        {
            return;
        }
        self.marks.push_back((now, heard));
    }

    /// A confirmation sent at `sent` was answered through the leader: the
    /// latest mark taken `lag` before it is proven. Whether the proven
    /// time moved.
    pub fn confirmed(&mut self, sent: Moment, lag: Duration) -> bool {
        let Some(by) = sent.checked_sub(lag) else {
            return false;
        };
        let mut moved = false;
        while let Some(&(taken, heard)) = self.marks.front() {
            if taken > by {
                break;
            }
            self.marks.pop_front();
            if heard > self.proven {
                self.proven = heard;
                moved = true;
            }
        }
        moved
    }

    /// Counts from `at` from now on (never backwards): a handshake sent
    /// then resumed the session, or the first confirmation, sent as the
    /// lease began, was answered (the answers that found the lock ours,
    /// docs/design.md, "Session and lease rules").
    pub fn proven_at(&mut self, at: Moment) {
        self.proven = self.proven.max(at);
        self.marks.retain(|&(_, heard)| heard > at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_confirmation_proves_only_marks_taken_a_lag_before_it() {
        let t0 = Moment::now();
        let mut proof = Proof::new(t0);
        // Answers came at 100 and 900 ms for requests sent at 90 and 890.
        proof.mark(t0 + ms(100), t0 + ms(90));
        proof.mark(t0 + ms(900), t0 + ms(890));
        // Sent at 1000 ms, lag 500 ms: only the mark of 100 ms is proven.
        assert!(proof.confirmed(t0 + ms(1000), ms(500)));
        assert_eq!(proof.proven(), t0 + ms(90));
        // Sent at 1500 ms: the mark of 900 ms too.
        assert!(proof.confirmed(t0 + ms(1500), ms(500)));
        assert_eq!(proof.proven(), t0 + ms(890));
        // Nothing left to prove: nothing moves.
        assert!(!proof.confirmed(t0 + ms(3000), ms(500)));
        assert_eq!(proof.proven(), t0 + ms(890));
    }

    #[test]
    fn an_answer_alone_proves_nothing() {
        let t0 = Moment::now();
        let mut proof = Proof::new(t0);
        proof.mark(t0 + ms(100), t0 + ms(90));
        // A confirmation sent right after the answer: within the lag.
        assert!(!proof.confirmed(t0 + ms(150), ms(500)));
        assert_eq!(proof.proven(), t0);
    }

    #[test]
    fn a_resumed_session_is_proven_from_its_handshake() {
        let t0 = Moment::now();
        let mut proof = Proof::new(t0);
        proof.mark(t0 + ms(100), t0 + ms(90));
        proof.mark(t0 + ms(700), t0 + ms(690));
        proof.proven_at(t0 + ms(500));
        assert_eq!(proof.proven(), t0 + ms(500));
        // Older marks are gone; a later one still waits for its proof.
        assert!(proof.confirmed(t0 + ms(1300), ms(500)));
        assert_eq!(proof.proven(), t0 + ms(690));
        // Never backwards.
        proof.proven_at(t0 + ms(10));
        assert_eq!(proof.proven(), t0 + ms(690));
    }
}
