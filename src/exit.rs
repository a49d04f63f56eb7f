//! The exit status contract (docs/design.md, "Exit status"), in one type.
//!
//! Expected outcomes (the command's status, a lock that could not be taken)
//! are values of [`Exit`]; failures are `anyhow` errors, and a [`Failure`]
//! anywhere in their chain decides their exit status ([`Exit::for_error`]).

mod table;

use std::process::ExitCode;

pub use table::{BREAK, HOLD, LIST, RELEASE, RUN, STATUS, help};
use zklock::zk::records::Error as ZkError;

/// How `zklock` ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The command ran and exited with this status.
    Command(u8),
    /// The command died of this signal, or zklock was interrupted by it before
    /// the command ran.
    Signal(i32),
    /// The lock was not acquired in time; the code comes from `-E`.
    Conflict(u8),
    /// The lock was lost while the command ran; the command was terminated.
    LockLost,
    /// `--max-runtime` expired; the command was terminated.
    TimedOut,
    /// The ensemble could not be reached within `--connect-timeout`.
    Unavailable,
    /// Authentication failed, or the lock path's ACL denies access.
    NoPermission,
    /// Bad command line.
    Usage,
    /// Any other ZooKeeper or internal error.
    Software,
    /// The command was found but could not be executed.
    NotExecutable,
    /// The command was not found.
    NotFound,
    /// `zklock status`: a lock is held or has waiters.
    Held,
    /// `zklock break`: nothing was deleted (free, no such node, or no).
    NotDeleted,
}

/// What a step of `zklock run` leads to, short of a failure: go on with
/// its result, or end zklock with this exit (a signal, a lock not taken, a
/// run skipped). Failures stay errors.
#[derive(Debug)]
#[must_use]
pub enum Step<T> {
    Go(T),
    End(Exit),
}

/// The documented default of `-E/--conflict-exit-code` (EX_TEMPFAIL).
pub const CONFLICT_DEFAULT: u8 = 75;

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Command(code) | Exit::Conflict(code) => code,
            // Signal numbers on Linux are 1..=64, so this cannot overflow u8.
            Exit::Signal(signal) => 128u8.saturating_add(signal.clamp(0, 127) as u8),
            Exit::LockLost => 76,
            Exit::TimedOut => 124,
            Exit::Unavailable => 69,
            Exit::NoPermission => 77,
            Exit::Usage => 64,
            Exit::Software => 70,
            Exit::NotExecutable => 126,
            Exit::NotFound => 127,
            Exit::Held | Exit::NotDeleted => 1,
        }
    }

    /// The exit status for a failure: a [`Failure`] in the chain decides;
    /// ZooKeeper's own auth errors mean 77; anything else is 70.
    pub fn for_error(err: &anyhow::Error) -> Exit {
        // anyhow's downcast_ref looks through every layer of context.
        if let Some(failure) = err.downcast_ref::<Failure>() {
            return failure.exit;
        }
        match err.downcast_ref::<ZkError>() {
            Some(ZkError::NoAuth | ZkError::AuthFailed | ZkError::SessionClosedRequireSaslAuth) => {
                Exit::NoPermission
            }
            _ => Exit::Software,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// An error message with the exit status it decides; use it as the error
/// itself or as context on a lower-level error.
#[derive(Debug)]
pub struct Failure {
    exit: Exit,
    message: String,
}

impl Failure {
    pub fn new(exit: Exit, message: impl Into<String>) -> Failure {
        Failure {
            exit,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> anyhow::Error {
        Failure::new(Exit::Usage, message).into()
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn codes_match_the_contract() {
        assert_eq!(Exit::Command(0).code(), 0);
        assert_eq!(Exit::Command(42).code(), 42);
        assert_eq!(Exit::Signal(libc::SIGTERM).code(), 143);
        assert_eq!(Exit::Signal(libc::SIGINT).code(), 130);
        assert_eq!(Exit::Conflict(CONFLICT_DEFAULT).code(), 75);
        assert_eq!(Exit::Conflict(0).code(), 0);
        assert_eq!(Exit::LockLost.code(), 76);
        assert_eq!(Exit::TimedOut.code(), 124);
        assert_eq!(Exit::Unavailable.code(), 69);
        assert_eq!(Exit::NoPermission.code(), 77);
        assert_eq!(Exit::Usage.code(), 64);
        assert_eq!(Exit::Software.code(), 70);
        assert_eq!(Exit::NotExecutable.code(), 126);
        assert_eq!(Exit::NotFound.code(), 127);
    }

    #[test]
    fn errors_map_through_their_chain() {
        let usage = Failure::usage("bad path");
        assert_eq!(Exit::for_error(&usage), Exit::Usage);
        assert_eq!(format!("{usage:#}"), "bad path");
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let not_found = Err::<(), _>(io)
            .context(Failure::new(Exit::NotFound, "cannot run x"))
            .unwrap_err();
        let outer = not_found.context("while starting");
        assert_eq!(Exit::for_error(&outer), Exit::NotFound);
        assert!(format!("{outer:#}").starts_with("while starting: cannot run x: No such file"));
        let unavailable =
            anyhow::Error::new(Failure::new(Exit::Unavailable, "no session")).context("connecting");
        assert_eq!(Exit::for_error(&unavailable), Exit::Unavailable);
        let denied = anyhow::Error::new(ZkError::NoAuth).context("creating node");
        assert_eq!(Exit::for_error(&denied), Exit::NoPermission);
        let other = anyhow::Error::new(ZkError::BadVersion);
        assert_eq!(Exit::for_error(&other), Exit::Software);
        assert_eq!(Exit::for_error(&anyhow::anyhow!("boom")), Exit::Software);
    }
}
