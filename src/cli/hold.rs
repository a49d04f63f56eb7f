//! The options of `zklock hold` and `zklock release` (docs/design.md,
//! "Holds").

use clap::{Args, ValueEnum};

use super::run::LockArgs;
use crate::exit::{self, help};
use crate::values::{LockPath, Seconds};

pub const HOLD_HELP: &str = "\
Printed on stdout once the lock is held, for the shell:
  ZKLOCK_HOLD           the hold, for `zklock release`
  ZKLOCK_PATH, ZKLOCK_NODE, ZKLOCK_FENCING_TOKEN, ZKLOCK_SESSION_ID
                        as `zklock run` gives its command
When it does not hold, --format sh prints `(exit N)` (not at a terminal), so
that the eval fails with zklock's status: use `set -e`, or
`eval \"$(zklock hold ...)\" || exit`.

The hold's steps are the script's shell and what it runs (its whole process
group when it leads one): a lost lock, --max-hold or a signal to the holder
stops them (TERM, KILL after --kill-after) before the lock is released, and
a keeper stops them should the holder be killed or frozen.

A zklock run or hold inside the hold on the same paths runs at once under it;
such a run in another shell (a CI step) follows the hold's lease.";

#[derive(Debug, Args)]
#[command(
    override_usage = "eval \"$(zklock hold [OPTIONS] PATH...)\"",
    after_help = format!("{HOLD_HELP}\n\n{}", help(exit::HOLD))
)]
pub struct HoldArgs {
    #[command(flatten)]
    pub lock: LockArgs,

    /// How to print the variables: `sh` (export lines for eval), `json`
    /// (one object), or `github-env` (lines for "$GITHUB_ENV").
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = Format::Sh)]
    pub format: Format,

    /// Hold the lock until `zklock release` (by ZKLOCK_HOLD, or by PATH from
    /// the same CI job or session on this host), not only while the calling
    /// process lives: for CI jobs whose steps are separate shells. Needs
    /// --max-hold.
    #[arg(long, requires = "max_hold")]
    pub until_released: bool,

    /// Release the lock after DURATION at the latest (`1h`); with steps
    /// still running, that counts as losing the lock (they are stopped).
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub max_hold: Option<Seconds>,

    /// When the steps are stopped (a lost lock, --max-hold, a signal to the
    /// holder), KILL those still running DURATION after their TERM.
    /// Default: the largest value that fits the session the ensemble
    /// grants, at most 5s (`-v` says which). A value that does not fit is
    /// refused (exit 64).
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub kill_after: Option<Seconds>,

    /// What a lost lock does to the steps: `term` stops them, TERM then
    /// KILL after --kill-after, before the lock is released (the default
    /// when bound to the calling process); `none` leaves them alone (the
    /// default with --until-released; `zklock release` then exits 76).
    #[arg(long, value_name = "ACTION", value_enum)]
    pub on_lost: Option<OnLost>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Sh,
    Json,
    GithubEnv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnLost {
    Term,
    None,
}

impl HoldArgs {
    /// What a lost lock does: `--on-lost` as given, or by the binding.
    pub fn on_lost(&self) -> OnLost {
        self.on_lost.unwrap_or(match self.until_released {
            true => OnLost::None,
            false => OnLost::Term,
        })
    }
}

#[derive(Debug, Args)]
#[command(after_help = help(exit::RELEASE))]
pub struct ReleaseArgs {
    /// The lock path of the hold to release: one of this CI job, or outside
    /// CI of this session, on this host. Default: the hold named by
    /// ZKLOCK_HOLD in the environment.
    #[arg(value_name = "PATH")]
    pub path: Option<LockPath>,
}
