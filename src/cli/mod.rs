//! The command-line model. Doc comments here are the `--help` text: the
//! subcommands here, `zklock run`'s options in `run.rs`; the connection and
//! security options every subcommand shares are `session::Options`.

use clap::{Args, Parser, Subcommand};

use crate::exit::{self, help};
use crate::session::Options;
use crate::values::{LockPath, ZnodePath};

mod hold;
pub mod reference;
mod run;

pub use hold::{Format, HOLD_HELP, HoldArgs, OnLost, ReleaseArgs};
pub use run::{ENVIRONMENT_HELP, LockArgs, RunArgs};

/// Run a command while holding a distributed lock in Apache ZooKeeper.
///
/// Exactly one `zklock run` per lock path runs its command at a time, on any
/// number of hosts, in arrival order. The lock is released when the command
/// ends, when zklock is signalled, or when zklock dies (with its session).
#[derive(Debug, Parser)]
#[command(name = "zklock", version, propagate_version = true, after_help = help(exit::RUN))]
#[command(subcommand_required = true, arg_required_else_help = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Deferred: a subcommand's arguments are built only when it is the one
// given (help, man pages and completions build them all), not at every
// start (bench/RESULTS.md). So each subcommand's `after_help`, an exit
// table formatted at run time, is on its Args struct: built with it.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Take the lock at PATH, run the command, release the lock.
    ///
    /// Examples:
    ///   zklock run /locks/nightly-backup -- ./backup.sh --full
    ///   zklock run -w 5m /locks/deploy -c 'make deploy'
    ///   zklock run --once-per 20h -q /locks/nightly-backup -- ./backup.sh
    #[command(verbatim_doc_comment)]
    Run(RunArgs),

    /// Take the lock at PATH and keep it for the calling shell's next steps.
    ///
    /// Waits as `zklock run` does, then prints shell assignments of
    /// ZKLOCK_* and returns, while a holder process keeps the lock: until
    /// the calling process (the script's shell) exits, however it exits, or
    /// until `zklock release`. A lost lock stops the script's steps before
    /// another holder can start (--on-lost).
    ///
    /// Examples:
    ///   eval "$(zklock hold /locks/deploy)" || exit; ./migrate.sh; zklock release
    ///   zklock hold --until-released --max-hold 1h --format github-env \
    ///       /locks/deploy >> "$GITHUB_ENV"
    #[command(verbatim_doc_comment)]
    Hold(HoldArgs),

    /// Release a lock taken by `zklock hold`, and wait for ZooKeeper's answer.
    ///
    /// Without PATH, the hold named by ZKLOCK_HOLD; with PATH, the hold of
    /// PATH on this host taken by the same CI job (a job's last step), or
    /// outside CI in the same session (terminal, cron job, service). The
    /// holder must answer within 30s (69 otherwise).
    ///
    /// Examples:
    ///   zklock release
    ///   zklock release /locks/deploy
    #[command(verbatim_doc_comment)]
    Release(ReleaseArgs),

    /// Show who holds each lock and who waits, in queue order.
    ///
    /// For each PATH: its kind (exclusive, shared, semaphore of N), the
    /// holders, then the waiters, each with its node, fencing token,
    /// session, how long it has held or waited, and what it runs on which
    /// host. A path that does not exist is free. When PATH has a run record
    /// (`run --once-per`), its last run and last success follow.
    ///
    /// Examples:
    ///   zklock status /locks/nightly-backup
    ///   zklock status --json /locks/deploy /locks/db
    #[command(verbatim_doc_comment)]
    Status(StatusArgs),

    /// List every lock under PREFIX (default /), recursively.
    ///
    /// One line per lock path: its kind, number of holders, queue length
    /// and how long the oldest holder has held it.
    ///
    /// Examples:
    ///   zklock list /locks
    ///   zklock list --json
    #[command(verbatim_doc_comment)]
    List(ListArgs),

    /// Delete the node of a lock's current holder (or the node named).
    ///
    /// Shows the holder and, at a terminal, asks before deleting; without a
    /// terminal it refuses unless --yes is given. It deletes only the node
    /// it showed: if the holder changed meanwhile, nothing is deleted. A
    /// holder's zklock that is still running notices the loss and stops its
    /// command (exit 76); the next waiter then takes the lock.
    ///
    /// Examples:
    ///   zklock break /locks/nightly-backup
    ///   zklock break --yes --node _c_0b9d...-lock-0000000042 /locks/deploy
    ///   zklock break --record /locks/nightly-backup
    #[command(verbatim_doc_comment)]
    Break(BreakArgs),

    /// Print the completion script for SHELL on stdout.
    ///
    /// Examples:
    ///   zklock completions bash > /etc/bash_completion.d/zklock
    ///   zklock completions zsh > "${fpath[1]}/_zklock"
    ///   zklock completions fish > ~/.config/fish/completions/zklock.fish
    #[command(verbatim_doc_comment)]
    Completions {
        #[arg(value_name = "SHELL", value_enum)]
        shell: clap_complete::Shell,
    },

    /// Print the man page of zklock, or of one subcommand, as roff.
    ///
    /// Examples:
    ///   zklock man | man -l -
    ///   zklock man run > /usr/local/share/man/man1/zklock-run.1
    #[command(verbatim_doc_comment)]
    Man {
        /// The subcommand whose page to print (zklock-SUBCOMMAND(1)).
        #[arg(value_name = "SUBCOMMAND", value_parser = SUBCOMMANDS)]
        subcommand: Option<String>,
    },
}

/// Every subcommand's name (a unit test keeps it complete).
pub const SUBCOMMANDS: [&str; 8] = [
    "run",
    "hold",
    "release",
    "status",
    "list",
    "break",
    "completions",
    "man",
];

#[derive(Debug, Args)]
#[command(after_help = help(exit::STATUS))]
pub struct StatusArgs {
    /// Lock paths to show.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<LockPath>,

    /// Print one JSON document instead of text (fields: zklock-status(1)).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub connection: Options,
}

#[derive(Debug, Args)]
#[command(after_help = help(exit::LIST))]
pub struct ListArgs {
    /// Where to start looking (itself included).
    #[arg(value_name = "PREFIX", default_value = "/")]
    pub prefix: ZnodePath,

    /// Print one JSON document instead of text (fields: zklock-list(1)).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub connection: Options,
}

#[derive(Debug, Args)]
#[command(after_help = help(exit::BREAK))]
pub struct BreakArgs {
    /// The lock path whose holder's node to delete.
    #[arg(value_name = "PATH")]
    pub path: LockPath,

    /// Delete this node of PATH (a name shown by `zklock status`, or its
    /// full path) instead of the current holder's.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,

    /// Delete PATH's run record (PATH/zklock.record, written by
    /// `run --once-per`) instead of a lock node: the next run then runs.
    #[arg(long, conflicts_with = "node")]
    pub record: bool,

    /// Do not ask; required when stdin is not a terminal.
    #[arg(short = 'y', long)]
    pub yes: bool,

    #[command(flatten)]
    pub connection: Options,
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::time::Duration;

    use super::*;
    use crate::lock::recipe::LockKind;
    use clap::CommandFactory;

    /// The options of a `zklock run` command line.
    fn run(args: &[&str]) -> RunArgs {
        match Cli::try_parse_from(args.iter().copied()).unwrap().command {
            Command::Run(run) => run,
            _ => panic!("not run"),
        }
    }

    #[test]
    fn clap_model_is_consistent() {
        Cli::command().debug_assert();
        let cli = Cli::command();
        let names: Vec<&str> = cli.get_subcommands().map(|c| c.get_name()).collect();
        assert_eq!(names, SUBCOMMANDS);
    }

    #[test]
    fn run_needs_exactly_one_command_form() {
        let parse = |args: &[&str]| Cli::try_parse_from(args.iter().copied());
        assert!(parse(&["zklock", "run", "/l", "--", "true"]).is_ok());
        assert!(parse(&["zklock", "run", "/l", "-c", "true"]).is_ok());
        assert!(parse(&["zklock", "run", "/l", "-c", "x", "--", "true"]).is_err());
        assert!(parse(&["zklock", "run", "-w", "1", "-n", "/l", "--", "true"]).is_err());
        assert!(parse(&["zklock", "run", "-E", "256", "/l", "--", "true"]).is_err());
        assert!(parse(&["zklock", "run", "-s", "--write", "/l", "--", "true"]).is_err());
        assert!(parse(&["zklock", "run", "-s", "--limit", "2", "/l", "--", "true"]).is_err());
        assert!(parse(&["zklock", "run", "--limit", "0", "/l", "--", "true"]).is_err());
        assert!(parse(&["zklock", "run", "--", "true"]).is_err());
        let err = run(&["zklock", "run", "/l"]).command_line().unwrap_err();
        assert!(err.starts_with("no command given"), "{err}");
        let shell = run(&["zklock", "run", "/l", "-c", "echo hi"]);
        let line = shell.command_line().unwrap();
        assert_eq!(line[1..], ["-c".into(), "echo hi".into()] as [OsString; 2]);
    }

    #[test]
    fn kinds_paths_and_wait_limits_follow_flags() {
        for (flags, kind) in [
            (&[][..], LockKind::Exclusive),
            (&["-x"], LockKind::Exclusive),
            (&["-s"], LockKind::Read),
            (&["--write"], LockKind::Write),
            (&["--limit", "3"], LockKind::Semaphore(3)),
        ] {
            let args = [&["zklock", "run"], flags, &["/l", "--", "true"]].concat();
            assert_eq!(run(&args).lock.lock_kind(), kind, "{flags:?}");
        }
        for (flags, limit) in [
            (&[][..], None),
            (&["-n"], Some(Duration::ZERO)),
            (&["-w", "1.5"], Some(Duration::from_millis(1500))),
        ] {
            let args = [&["zklock", "run"], flags, &["/l", "--", "true"]].concat();
            assert_eq!(run(&args).lock.wait_limit(), limit, "{flags:?}");
        }
        let paths = |args: &[&str]| run(&[&["zklock", "run"], args, &["--", "true"]].concat());
        assert_eq!(paths(&["/b", "/a"]).lock.lock_paths(), Ok(vec!["/b", "/a"]));
        assert!(paths(&["/a", "/b", "/a"]).lock.lock_paths().is_err());
    }
}
