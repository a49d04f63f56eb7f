//! Who owns a hold, for `zklock release PATH` (docs/design.md, "Holds"):
//! in a CI job, the job; elsewhere, the login or process session (setsid)
//! that called `zklock hold`. `release PATH` ends only a hold whose owner
//! is its own.

use crate::command::process::Stat;
use crate::origin::ci::CiJob;

/// A hold's owner, as one line of text: `job URL...` or `session SID`,
/// with the session leader's start time when it could be read (a session
/// id reused after its leader ended then names another owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner(String);

impl Owner {
    /// The owner of what this process does: its CI job, else its session.
    pub fn current() -> Owner {
        let var = |name: &str| std::env::var(name).ok();
        if let Some(job) = CiJob::job_identity(var) {
            return Owner(format!("job {job}"));
        }
        // Session 0 (the kernel's own, or one led from outside our PID
        // namespace) has no leader to read: it is one owner.
        let sid = Stat::of("self").map_or(0, |me| me.session);
        let leader = Stat::of(sid).filter(|_| sid > 0);
        Owner(match leader {
            Some(leader) => format!("session {sid} started {}", leader.start_time),
            None => format!("session {sid}"),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What kind of owner this is, for messages: `CI job` or `session`.
    pub fn kind(&self) -> &'static str {
        match self.0.starts_with("job ") {
            true => "CI job",
            false => "session",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_session_is_one_owner() {
        let mine = Owner::current();
        assert_eq!(mine, Owner::current());
        let session = Stat::of("self").unwrap().session;
        if !mine.as_str().starts_with("job ") {
            assert!(mine.as_str().starts_with(&format!("session {session}")));
            // A leader outside our PID namespace cannot be read.
            assert_eq!(mine.as_str().contains(" started "), session > 0);
            assert_eq!(mine.kind(), "session");
        }
    }
}
