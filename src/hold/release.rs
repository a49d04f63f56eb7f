//! `zklock release` (docs/design.md, "Holds"): asks a hold's holder to let
//! go, within a deadline, and says how that went. By PATH, only a hold of
//! the caller's owner (`owner.rs`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use super::client::{self, Found, Unanswered};
use super::control::Released;
use super::owner::Owner;
use crate::cli::ReleaseArgs;
use crate::exit::{Exit, Failure};
use crate::report;
use crate::values::human_duration;

pub fn release(args: ReleaseArgs) -> Result<Exit> {
    let socket = match &args.path {
        None => match std::env::var_os("ZKLOCK_HOLD").filter(|s| !s.is_empty()) {
            Some(socket) => PathBuf::from(socket),
            None => {
                return Err(Failure::usage(
                    "no hold to release: ZKLOCK_HOLD is not set (give the lock PATH)",
                ));
            }
        },
        Some(path) => {
            let owner = Owner::current();
            one_hold(
                path.as_str(),
                &owner,
                client::holds_of(path.as_str(), &owner)?,
            )?
        }
    };
    match client::release(&socket, deadline()) {
        Ok(Released::Confirmed) => Ok(Exit::Command(0)),
        Ok(Released::Unconfirmed(why)) => {
            report::say(format_args!("{why}"));
            Ok(Exit::Command(0))
        }
        Ok(Released::Lost(why)) => {
            report::say(format_args!("the lock was lost before this release: {why}"));
            Ok(Exit::LockLost)
        }
        Err(Unanswered::NoHold) => Err(Failure::usage(format!(
            "no such hold: {} (released already, or its holder has ended)",
            socket.display()
        ))),
        Err(Unanswered::Killed) => {
            report::say(format_args!(
                "the lock was lost before this release: its holder ended without releasing \
                 it (killed?), and the hold with it"
            ));
            Ok(Exit::LockLost)
        }
        Err(Unanswered::NoAnswer(after)) => Err(no_answer(&socket, after)),
        Err(Unanswered::Refused(why)) => Err(Failure::new(Exit::NoPermission, why).into()),
        Err(Unanswered::Io(err)) if err.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(Failure::new(
                Exit::NoPermission,
                format!("{}: {err} (a hold of another user?)", socket.display()),
            )
            .into())
        }
        Err(Unanswered::Io(err)) => {
            Err(err).context(format!("asking the holder at {}", socket.display()))
        }
    }
}

/// The one hold of `path` that `owner` has, or why there is none to
/// release.
fn one_hold(path: &str, owner: &Owner, found: Found) -> Result<PathBuf> {
    let Found {
        mut ours,
        others,
        unanswered,
    } = found;
    let by = format!("by this {} on this host", owner.kind());
    match ours.len() {
        1 => return Ok(ours.remove(0)),
        0 => {}
        n => {
            return Err(Failure::usage(format!(
                "{n} holds of {path} {by}: release one by its ZKLOCK_HOLD"
            )));
        }
    }
    // None found: a holder that did not answer may be the one.
    if let Some(socket) = unanswered.first() {
        return Err(no_answer(socket, client::PATHS_DEADLINE));
    }
    let others = match others {
        0 => String::new(),
        n => format!(
            " ({n} of another {}: released by its own ZKLOCK_HOLD)",
            owner.kind()
        ),
    };
    Err(Failure::usage(format!("no hold of {path} {by}{others}")))
}

/// A holder that took the connection and did not answer: stopped or stuck.
fn no_answer(socket: &std::path::Path, after: Duration) -> anyhow::Error {
    Failure::new(
        Exit::Unavailable,
        format!(
            "no answer from the holder at {} within {} (stopped?): the hold may still be held",
            socket.display(),
            human_duration(after)
        ),
    )
    .into()
}

/// [`client::RELEASE_DEADLINE`]; ZKLOCK_RELEASE_DEADLINE, undocumented, is
/// for the integration tests.
fn deadline() -> Duration {
    std::env::var("ZKLOCK_RELEASE_DEADLINE")
        .ok()
        .and_then(|text| humantime::parse_duration(&text).ok())
        .filter(|deadline| !deadline.is_zero())
        .unwrap_or(client::RELEASE_DEADLINE)
}
