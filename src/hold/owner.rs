//! Who owns a hold, for `zklock release PATH` (docs/design.md, "Holds"):
//! in a CI job, the job; elsewhere, the login or process session (setsid)
//! that called `zklock hold`. `release PATH` ends only a hold whose owner
//! is its own.

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
        let sid = rustix::process::getsid(None).map_or(0, |sid| sid.as_raw_pid());
        let started = std::fs::read_to_string(format!("/proc/{sid}/stat"))
            .ok()
            .and_then(|stat| start_time(&stat));
        Owner(match started {
            Some(at) => format!("session {sid} started {at}"),
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

/// Field 22 of /proc/PID/stat, the process's start time in clock ticks
/// since boot; the fields are counted after the command name's `)`, which
/// may itself hold spaces and parentheses.
fn start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (state).
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_read_past_a_command_name_with_spaces() {
        let stat = "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 100";
        assert_eq!(start_time(stat), Some(987_654));
        assert_eq!(start_time("4242 (x) S 1"), None);
    }

    #[test]
    fn our_own_session_is_one_owner() {
        let mine = Owner::current();
        assert_eq!(mine, Owner::current());
        if !mine.as_str().starts_with("job ") {
            assert!(mine.as_str().contains(" started "), "{}", mine.as_str());
            assert_eq!(mine.kind(), "session");
        }
    }
}
