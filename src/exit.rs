//! The exit status contract (docs/design.md, "Exit status"), in one type.
//!
//! Expected outcomes (the command's status, a lock that could not be taken)
//! are values of [`Exit`]; failures are `anyhow` errors, and a [`Failure`]
//! anywhere in their chain decides their exit status ([`Exit::for_error`]).

use std::process::ExitCode;

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

/// The exit-code table shown by `--help`; kept next to the type so the two
/// cannot drift apart unnoticed (a unit test checks every code appears).
pub const EXIT_CODE_HELP: &str = "\
Exit status:
  <command's>  the command ran and exited with that status
  128+N        the command died of signal N, or zklock was interrupted by
               signal N before it ran the command
  75           lock not acquired: --timeout expired or --no-wait found it held;
               or --max-waiting found the queue full;
               or --once-per found a recent successful run;
               or a newer --supersede run superseded it
               (-E/--conflict-exit-code changes it)
  76           lock lost while the command ran; the command was terminated
  69           cannot reach the ensemble or establish a session within
               --connect-timeout
  77           authentication failed or the lock path's ACL denies access
  64           usage error (bad path, duration, missing command, ...)
  70           any other ZooKeeper or internal error
  124          --max-runtime expired; the command was terminated
  126 / 127    command not executable / not found";

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

    /// The codes in the first column of the `--help` table's rows
    /// (`75`, `126 / 127`; `128+N` and `<command's>` are not numbers).
    fn listed_codes() -> Vec<u8> {
        let rows = EXIT_CODE_HELP.lines().skip(1);
        let first_column = rows
            .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
            .filter_map(|line| line.trim_start().split("  ").next());
        let mut codes: Vec<u8> = first_column
            .flat_map(|column| column.split(" / "))
            .filter_map(|code| code.parse().ok())
            .collect();
        codes.sort_unstable();
        codes
    }

    #[test]
    fn help_table_lists_the_codes_of_exit() {
        // Every way `zklock run` ends with a code of its own: a new variant
        // must be placed in the table or left out here on purpose.
        let mut fixed: Vec<u8> = [
            Exit::Command(0),
            Exit::Signal(1),
            Exit::Conflict(CONFLICT_DEFAULT),
            Exit::LockLost,
            Exit::TimedOut,
            Exit::Unavailable,
            Exit::NoPermission,
            Exit::Usage,
            Exit::Software,
            Exit::NotExecutable,
            Exit::NotFound,
            Exit::Held,
            Exit::NotDeleted,
        ]
        .into_iter()
        .filter(|exit| match exit {
            // The command's status, and 128+N: rows of their own.
            Exit::Command(_) | Exit::Signal(_) => false,
            // `status` and `break` only, with tables of their own.
            Exit::Held | Exit::NotDeleted => false,
            Exit::Conflict(_)
            | Exit::LockLost
            | Exit::TimedOut
            | Exit::Unavailable
            | Exit::NoPermission
            | Exit::Usage
            | Exit::Software
            | Exit::NotExecutable
            | Exit::NotFound => true,
        })
        .map(Exit::code)
        .collect();
        fixed.sort_unstable();
        assert_eq!(listed_codes(), fixed, "{EXIT_CODE_HELP}");
        assert!(EXIT_CODE_HELP.contains("\n  128+N "));
        assert_eq!(Exit::Signal(9).code(), 128 + 9);
    }

    #[test]
    fn every_way_to_75_is_named_wherever_75_is() {
        let row = |text: &'static str| {
            (text.lines())
                .find(|line| line.starts_with("| 75 |"))
                .expect("a row for 75")
        };
        let readme = row(include_str!("../README.md"));
        let design = row(include_str!("../docs/design.md"));
        // The help's entry: its row and the lines that continue it.
        let help: String = (EXIT_CODE_HELP.lines())
            .skip_while(|line| !line.starts_with("  75 "))
            .take_while(|line| line.starts_with("  75 ") || line.starts_with("   "))
            .collect();
        let options: Vec<&str> = readme
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|word| word.starts_with("--"))
            .collect();
        assert!(options.len() >= 5, "{readme}");
        for option in options {
            assert!(help.contains(option), "{option} not under 75 in --help");
            assert!(
                design.contains(option),
                "{option} not under 75 in design.md"
            );
        }
    }
}
