//! The options of `zklock run`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueHint};

use crate::exit::{self, CONFLICT_DEFAULT, help};
use crate::lock::lease::OnDisconnect;
use crate::lock::recipe::LockKind;
use crate::report::Verbosity;
use crate::session::Options;
use crate::values::{LockPath, Seconds};

pub const ENVIRONMENT_HELP: &str = "\
Environment given to the command:
  ZKLOCK_PATH           the lock path as given
  ZKLOCK_NODE           our lock node's full path
  ZKLOCK_FENCING_TOKEN  a number that increases with every new holder of the
                        lock (the node's czxid); pass it to the resource
  ZKLOCK_SESSION_ID     the ZooKeeper session id, in hex

A zklock run inside the command on the same paths finds these variables and
runs at once under this lock (the same values); exclusive inside shared is
refused (64).";

#[derive(Debug, Args)]
#[command(
    override_usage = "zklock run [OPTIONS] PATH -- CMD [ARGS]...\n       zklock run [OPTIONS] PATH -c STRING",
    after_help = format!("{ENVIRONMENT_HELP}\n\n{}", help(exit::RUN))
)]
pub struct RunArgs {
    #[command(flatten)]
    pub lock: LockArgs,

    /// The command to run and its arguments, given after `--`.
    #[arg(last = true, value_name = "CMD", value_hint = ValueHint::CommandWithArguments)]
    pub argv: Vec<OsString>,

    /// Run STRING with `$SHELL -c` (falling back to /bin/sh) instead of CMD.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STRING",
        conflicts_with = "argv"
    )]
    pub shell: Option<OsString>,

    /// After forwarding a terminating signal, or when the lock is lost, kill
    /// the command's process group if it is still running after DURATION.
    /// Default: the largest value that fits the session the ensemble grants,
    /// at most 5s (`-v` says which). A value given here that does not fit is
    /// refused (exit 64).
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub kill_after: Option<Seconds>,

    /// Send SIGTERM to the command's process group after it has run for
    /// DURATION (waiting for the lock does not count), SIGKILL --kill-after
    /// later; zklock then exits 124. 0 means no limit, as in timeout(1).
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub max_runtime: Option<Seconds>,
}

// The options of `zklock run` that take a lock, shared with `zklock hold`
// (docs/design.md, "Holds"). Not a doc comment: clap would make it the
// about text of the subcommands that flatten it.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// Lock path in ZooKeeper, e.g. /locks/nightly-backup (created as
    /// needed). With several paths, all are taken (in bytewise order, under
    /// one deadline) before the command starts.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<LockPath>,

    /// Store TEXT (a CI job URL, "nightly backup") in the lock node instead
    /// of the command line. Node data is readable by every client that can
    /// read PATH and shown by every run that finds the lock held: use this
    /// when the command line carries secrets.
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,

    #[command(flatten)]
    pub connection: Options,

    /// Take an exclusive lock (the default): no other holder of any kind.
    #[arg(short = 'x', long, group = "kind")]
    pub exclusive: bool,

    /// Take a shared (read) lock: other readers may hold it at the same
    /// time, exclusive and write holders may not.
    #[arg(short = 's', long, group = "kind")]
    pub shared: bool,

    /// Take a write lock (Curator's `__WRIT__` node), for sharing a path with
    /// users of Curator's read/write lock; otherwise the same as --exclusive.
    #[arg(long, group = "kind")]
    pub write: bool,

    /// Let up to N commands hold PATH at once (a semaphore). N is recorded
    /// in PATH; every user of the path must ask for the same N.
    #[arg(long, value_name = "N", allow_negative_numbers = true, group = "kind", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,

    /// Give up if the lock is not acquired within DURATION (`30s`, `2m`,
    /// or a number of seconds such as `0.5`). Default: wait forever.
    #[arg(
        short = 'w',
        long,
        value_name = "DURATION",
        allow_negative_numbers = true,
        conflicts_with = "no_wait"
    )]
    pub timeout: Option<Seconds>,

    /// Give up at once if the lock is held (same as --timeout 0).
    #[arg(short = 'n', long)]
    pub no_wait: bool,

    /// Wait for the lock only if fewer than N runs are waiting ahead
    /// (holders do not count); otherwise give up at once (exit as -E),
    /// saying how many wait. 0 takes a free lock and never waits. Runs
    /// arriving together may each count the others: more of them may give
    /// up than needed, but none while fewer than N are ahead of it. Checked
    /// for each PATH as it is queued for (again after a lost session).
    #[arg(long, value_name = "N", conflicts_with = "limit")]
    pub max_waiting: Option<u32>,

    /// When this run queues, remove from the queue every older run on PATH
    /// that is still waiting and was started with --supersede too (each
    /// exits as -E, naming this run): the newest run goes next. The holder,
    /// other waiters and other clients' nodes are never touched. Exclusive
    /// and write locks on one PATH only.
    #[arg(long)]
    pub supersede: bool,

    /// Exit status when the lock is not acquired (0-255).
    #[arg(short = 'E', long, value_name = "N", allow_negative_numbers = true, default_value_t = CONFLICT_DEFAULT)]
    pub conflict_exit_code: u8,

    /// What a lost connection means while the command runs: `lease` keeps
    /// it running while the session can still come back (until the lease
    /// deadline); `kill` treats any disconnection as losing the lock.
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = OnDisconnect::Lease)]
    pub on_disconnect: OnDisconnect,

    /// Run at most once per DURATION (e.g. `20h`): once the lock is held,
    /// skip the command (exit as -E) if the last successful run of PATH
    /// started less than DURATION before now, both times read from the
    /// ZooKeeper server's clock. Runs are recorded in PATH/zklock.record.
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub once_per: Option<Seconds>,

    /// With --once-per: after a failed run, skip the command (exit as -E)
    /// until DURATION has passed since that run started (server clock), so
    /// that hosts firing meanwhile do not retry it back to back; make it
    /// longer than the job runs. Default 0: the next firing of any host
    /// retries at once, as plain cron would, so another host takes over
    /// from a failure that only one host has.
    #[arg(
        long,
        value_name = "DURATION",
        allow_negative_numbers = true,
        requires = "once_per"
    )]
    pub retry_after: Option<Seconds>,

    /// At exit, write a Prometheus text-format report of the run (for
    /// node_exporter's textfile collector) to FILE, atomically.
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,

    /// Health-check pings (healthchecks.io protocol): the host that runs the
    /// command sends URL/start as it starts it, then URL for exit 0 or URL/N
    /// for exit status N (the suffix goes before any ?query). Hosts that do
    /// not run it send nothing. Bounded (10s), never changes the exit
    /// status; a failure is one line. The URL is a secret: only its scheme
    /// and host are ever printed.
    #[arg(long, value_name = "URL", env = "ZKLOCK_PING", hide_env_values = true)]
    pub ping: Option<String>,

    /// With --ping: a host that does not run the command because the lock
    /// is held elsewhere or the job ran successfully recently (exit as -E)
    /// sends a plain URL ping too (a heartbeat from every host). A host that
    /// skips because the last run failed (--retry-after) sends nothing, so
    /// the check stays failed: the failing host reported it once.
    #[arg(long)]
    pub ping_skipped: bool,

    /// Report the connection, the queue position and who holds the lock.
    #[arg(short, long, conflicts_with = "quiet")]
    pub verbose: bool,

    /// Print errors only.
    #[arg(short, long)]
    pub quiet: bool,
}

impl RunArgs {
    /// The command line to run: `-c STRING` becomes `$SHELL -c STRING`
    /// (falling back to /bin/sh); otherwise CMD as given.
    pub fn command_line(&self) -> Result<Vec<OsString>, String> {
        match (&self.shell, self.argv.is_empty()) {
            (Some(script), _) => {
                let sh = std::env::var_os("SHELL")
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "/bin/sh".into());
                Ok(vec![sh, "-c".into(), script.clone()])
            }
            // An empty name cannot be run: refuse it before taking the lock.
            (None, false) if self.argv[0].is_empty() => {
                Err("the command name is empty: add `-- CMD [ARGS]...` or `-c STRING`".into())
            }
            (None, false) => Ok(self.argv.clone()),
            (None, true) => Err("no command given: add `-- CMD [ARGS]...` or `-c STRING`".into()),
        }
    }
}

impl LockArgs {
    /// How long to wait for the lock; `Some(ZERO)` means do not wait.
    pub fn wait_limit(&self) -> Option<Duration> {
        if self.no_wait {
            Some(Duration::ZERO)
        } else {
            self.timeout.map(|t| t.0)
        }
    }

    pub fn lock_kind(&self) -> LockKind {
        match (self.limit, self.shared, self.write) {
            (Some(limit), _, _) => LockKind::Semaphore(limit),
            (None, true, _) => LockKind::Read,
            (None, _, true) => LockKind::Write,
            _ => LockKind::Exclusive,
        }
    }

    /// The lock paths as given; a path given twice is a usage error.
    pub fn lock_paths(&self) -> Result<Vec<&str>, String> {
        let paths: Vec<&str> = self.paths.iter().map(LockPath::as_str).collect();
        for (i, path) in paths.iter().enumerate() {
            if paths[..i].contains(path) {
                return Err(format!("{path} is given twice"));
            }
        }
        Ok(paths)
    }

    pub fn verbosity(&self) -> Verbosity {
        match (self.quiet, self.verbose) {
            (true, _) => Verbosity::Quiet,
            (_, true) => Verbosity::Verbose,
            _ => Verbosity::Normal,
        }
    }
}
