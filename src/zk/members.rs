//! The ensemble's members in the order this session tries them, and the
//! pause after a round of them that answered nothing.
//!
//! Each session shuffles the members once, as ZooKeeper's Java client does,
//! so that a fleet's sessions spread over the ensemble instead of all
//! landing on the first member listed; a reconnection goes on from the
//! member after the one it lost, round the same order. After each round in
//! which no member answered, the session pauses about a second, jittered,
//! so that clients that lost the ensemble together do not come back in step.

use std::time::Duration;

/// The pause after a round of members that answered nothing: from half to
/// one and a half times this.
pub const ROUND_PAUSE: Duration = Duration::from_secs(1);

/// The members in this session's order, and where it is in them.
pub struct Members {
    hosts: Vec<String>,
    next: usize,
    random: Random,
}

impl Members {
    /// `hosts` in an order drawn from `seed`.
    pub fn new(hosts: &[String], seed: u64) -> Members {
        let mut random = Random(seed);
        Members {
            hosts: shuffled(hosts, &mut random),
            next: 0,
            random,
        }
    }

    /// The member to try next.
    pub fn next(&mut self) -> String {
        let host = self.hosts[self.next % self.hosts.len()].clone();
        self.next += 1;
        host
    }

    /// The member tried last (the one connected to, once an attempt
    /// succeeded).
    pub fn last(&self) -> String {
        let n = self.hosts.len();
        self.hosts[(self.next + n - 1) % n].clone()
    }

    /// True once every member has been tried since the last round began.
    pub fn round_done(&self) -> bool {
        self.next % self.hosts.len() == 0
    }

    /// The pause after a round that answered nothing, jittered: about
    /// [`ROUND_PAUSE`], or a tenth of `session` when that is shorter (see
    /// [`pause_base`]).
    pub fn pause(&mut self, session: Option<Duration>) -> Duration {
        jittered(pause_base(session), self.random.next())
    }
}

/// What the pause is jittered around: [`ROUND_PAUSE`] when opening a
/// session; when resuming one (`session`, its timeout), at most a tenth of
/// it, so that pauses of our own (at most 1.5 tenths) cannot expire a
/// session the ensemble still keeps: the default 10 s session keeps the
/// whole second, a 4 s one pauses 0.2-0.6 s.
fn pause_base(session: Option<Duration>) -> Duration {
    session.map_or(ROUND_PAUSE, |timeout| ROUND_PAUSE.min(timeout / 10))
}

/// `base` scaled by a factor in [0.5, 1.5) drawn from `random`.
fn jittered(base: Duration, random: u64) -> Duration {
    let unit = (random >> 11) as f64 / (1u64 << 53) as f64;
    base.mul_f64(0.5 + unit)
}

/// `hosts` shuffled (Fisher-Yates).
fn shuffled(hosts: &[String], random: &mut Random) -> Vec<String> {
    let mut hosts = hosts.to_vec();
    for i in (1..hosts.len()).rev() {
        let j = (random.next() % (i as u64 + 1)) as usize;
        hosts.swap(i, j);
    }
    hosts
}

/// splitmix64: enough to spread sessions, seeded from the system's
/// randomness by the caller.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("zk{i}:2181")).collect()
    }

    #[test]
    fn sessions_start_on_every_member_about_as_often() {
        let mut first = [0u32; 3];
        for seed in 0..3000 {
            let mut members = Members::new(&hosts(3), seed);
            let host = members.next();
            first[host[2..3].parse::<usize>().unwrap()] += 1;
        }
        assert!(first.iter().all(|&n| (850..1150).contains(&n)), "{first:?}");
    }

    #[test]
    fn each_round_tries_every_member_once_in_the_same_order() {
        let mut members = Members::new(&hosts(5), 7);
        let round: Vec<String> = (0..5).map(|_| members.next()).collect();
        assert!(members.round_done());
        let mut sorted = round.clone();
        sorted.sort();
        assert_eq!(sorted, hosts(5));
        let again: Vec<String> = (0..5).map(|_| members.next()).collect();
        assert_eq!(again, round, "a reconnection goes round the same order");
        members.next();
        assert!(!members.round_done());
    }

    #[test]
    fn the_pause_is_about_a_second_and_jittered() {
        let mut members = Members::new(&hosts(1), 1);
        let pauses: Vec<Duration> = (0..1000).map(|_| members.pause(None)).collect();
        assert!(
            pauses
                .iter()
                .all(|p| *p >= ROUND_PAUSE / 2 && *p < ROUND_PAUSE * 3 / 2)
        );
        let short = pauses.iter().filter(|p| **p < ROUND_PAUSE).count();
        assert!(
            (400..600).contains(&short),
            "{short} of 1000 under a second"
        );
        assert_eq!(jittered(ROUND_PAUSE, 0), ROUND_PAUSE / 2);
    }

    #[test]
    fn a_resumed_session_pauses_at_most_a_tenth_of_its_timeout() {
        assert_eq!(pause_base(None), ROUND_PAUSE);
        assert_eq!(pause_base(Some(Duration::from_secs(10))), ROUND_PAUSE);
        assert_eq!(pause_base(Some(Duration::from_secs(30))), ROUND_PAUSE);
        assert_eq!(
            pause_base(Some(Duration::from_secs(4))),
            Duration::from_millis(400)
        );
        let mut members = Members::new(&hosts(1), 1);
        let longest = (0..1000)
            .map(|_| members.pause(Some(Duration::from_secs(4))))
            .max();
        assert!(longest < Some(Duration::from_millis(600)), "{longest:?}");
    }
}
