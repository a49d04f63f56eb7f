//! The command-line model. Doc comments here are the `--help` text.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit::{CONFLICT_DEFAULT, EXIT_CODE_HELP};
use crate::lock::lease::OnDisconnect;
use crate::lock::recipe::LockKind;
use crate::report::Verbosity;
use crate::session::Settings;
use crate::session::settings::Given;
use crate::values::{LockPath, Seconds, Target, ZnodePath};

/// Run a command while holding a distributed lock in Apache ZooKeeper.
///
/// Exactly one `zklock run` per lock path runs its command at a time, on any
/// number of hosts, in arrival order. The lock is released when the command
/// ends, when zklock is signalled, or when zklock dies (with its session).
#[derive(Debug, Parser)]
#[command(name = "zklock", version, propagate_version = true, after_help = EXIT_CODE_HELP)]
#[command(subcommand_required = true, arg_required_else_help = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take the lock at PATH, run the command, release the lock.
    ///
    /// Examples:
    ///   zklock run /locks/nightly-backup -- ./backup.sh --full
    ///   zklock run -w 5m /locks/deploy -c 'make deploy'
    ///   zklock run --once-per 20h -n -q /locks/nightly-backup -- ./backup.sh
    #[command(after_help = format!("{ENVIRONMENT_HELP}\n\n{EXIT_CODE_HELP}"), verbatim_doc_comment)]
    Run(RunArgs),

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
    #[command(after_help = STATUS_EXIT_HELP, verbatim_doc_comment)]
    Status(StatusArgs),

    /// List every lock under PREFIX (default /), recursively.
    ///
    /// One line per lock path: its kind, number of holders, queue length
    /// and how long the oldest holder has held it.
    ///
    /// Examples:
    ///   zklock list /locks
    ///   zklock list --json
    #[command(after_help = LIST_EXIT_HELP, verbatim_doc_comment)]
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
    #[command(after_help = BREAK_EXIT_HELP, verbatim_doc_comment)]
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
pub const SUBCOMMANDS: [&str; 6] = ["run", "status", "list", "break", "completions", "man"];

const STATUS_EXIT_HELP: &str = "\
Exit status:
  0   every PATH is free (no holder, no waiter)
  1   at least one PATH is held or has waiters
  69  cannot reach the ensemble within --connect-timeout
  77  authentication failed or an ACL denies reading
  64  usage error
  70  any other ZooKeeper or internal error";

const LIST_EXIT_HELP: &str = "\
Exit status:
  0   listed (also when no lock was found)
  69  cannot reach the ensemble within --connect-timeout
  77  authentication failed or an ACL denies reading
  64  usage error
  70  any other ZooKeeper or internal error";

const BREAK_EXIT_HELP: &str = "\
Exit status:
  0   the node was deleted
  1   nothing deleted: the path is free, the node (or --record) does not
      exist, or the answer at the prompt was not yes
  75  nothing deleted: the holder (or record) changed after it was shown
  64  usage error, or no terminal to ask at and no --yes
  69  cannot reach the ensemble within --connect-timeout
  77  authentication failed or an ACL denies the delete
  70  any other ZooKeeper or internal error";

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Lock paths to show.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<LockPath>,

    /// Print one JSON document instead of text (fields in the README).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub connection: ConnectionArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Where to start looking (itself included).
    #[arg(value_name = "PREFIX", default_value = "/")]
    pub prefix: ZnodePath,

    /// Print one JSON document instead of text (fields in the README).
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub connection: ConnectionArgs,
}

#[derive(Debug, Args)]
pub struct BreakArgs {
    /// The lock path whose holder's node to delete.
    #[arg(value_name = "PATH")]
    pub path: LockPath,

    /// Delete this node of PATH (a name shown by `zklock status`) instead of
    /// the current holder's.
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
    pub connection: ConnectionArgs,
}

const ENVIRONMENT_HELP: &str = "\
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
    override_usage = "zklock run [OPTIONS] PATH -- CMD [ARGS]...\n       zklock run [OPTIONS] PATH -c STRING"
)]
pub struct RunArgs {
    /// Lock path in ZooKeeper, e.g. /locks/nightly-backup (created as
    /// needed). With several paths, all are taken (in bytewise order, under
    /// one deadline) before the command starts.
    #[arg(value_name = "PATH", required = true)]
    pub paths: Vec<LockPath>,

    /// The command to run and its arguments, given after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub argv: Vec<OsString>,

    /// Run STRING with `$SHELL -c` (falling back to /bin/sh) instead of CMD.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STRING",
        conflicts_with = "argv"
    )]
    pub shell: Option<OsString>,

    /// Store TEXT (a CI job URL, "nightly backup") in the lock node instead
    /// of the command line. Node data is readable by every client that can
    /// read PATH and shown by every run that finds the lock held: use this
    /// when the command line carries secrets.
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,

    #[command(flatten)]
    pub connection: ConnectionArgs,

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

    /// Exit status when the lock is not acquired (0-255).
    #[arg(short = 'E', long, value_name = "N", allow_negative_numbers = true, default_value_t = CONFLICT_DEFAULT)]
    pub conflict_exit_code: u8,

    /// After forwarding a terminating signal, or when the lock is lost, kill
    /// the command's process group if it is still running after DURATION.
    /// Default: the largest value that fits the session the ensemble grants,
    /// at most 5s (`-v` says which). A value given here that does not fit is
    /// refused (exit 64).
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub kill_after: Option<Seconds>,

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

    /// Send SIGTERM to the command's process group after it has run for
    /// DURATION (waiting for the lock does not count), SIGKILL --kill-after
    /// later; zklock then exits 124.
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub max_runtime: Option<Seconds>,

    /// At exit, write a Prometheus text-format report of the run (for
    /// node_exporter's textfile collector) to FILE, atomically.
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,

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
            (None, false) => Ok(self.argv.clone()),
            (None, true) => Err("no command given: add `-- CMD [ARGS]...` or `-c STRING`".into()),
        }
    }

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

/// How to reach the ensemble; shared by every subcommand that talks to it.
/// Each value comes from the flag, else its environment variable, else the
/// config file's ensemble (`-z @NAME`, or the file's `default`), else the
/// built-in default.
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// ZooKeeper servers: comma-separated host:port list with an optional
    /// /chroot suffix, e.g. `zk1:2181,zk2:2181/apps`; or `@NAME`, an
    /// ensemble of the config file. [default: the config file's `default`
    /// ensemble, else 127.0.0.1:2181]
    #[arg(
        short = 'z',
        long = "zookeeper",
        value_name = "HOSTS",
        env = "ZKLOCK_ZOOKEEPER"
    )]
    pub hosts: Option<Target>,

    /// Session timeout to ask the ensemble for; the lock is released at most
    /// this long after zklock dies or is cut off. [default: 10s]
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub session_timeout: Option<Seconds>,

    /// Give up (exit 69) if no session is established within DURATION.
    /// [default: 10s]
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub connect_timeout: Option<Seconds>,

    /// The config file. [default: $XDG_CONFIG_HOME/zklock/config.toml or
    /// ~/.config/zklock/config.toml, else /etc/zklock/config.toml, if present]
    #[arg(
        long,
        value_name = "FILE",
        env = "ZKLOCK_CONFIG",
        hide_env_values = true
    )]
    pub config: Option<PathBuf>,

    /// Connect over TLS, verifying the servers (and their host names)
    /// against the CA certificates in FILE (PEM).
    #[arg(
        long,
        value_name = "FILE",
        env = "ZKLOCK_TLS_CA",
        hide_env_values = true
    )]
    pub tls_ca: Option<PathBuf>,

    /// Present this client certificate (PEM) for mutual TLS; the server
    /// knows us as `x509:<subject DN>`. Needs --tls-key.
    #[arg(
        long,
        value_name = "FILE",
        env = "ZKLOCK_TLS_CERT",
        hide_env_values = true
    )]
    pub tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        value_name = "FILE",
        env = "ZKLOCK_TLS_KEY",
        hide_env_values = true
    )]
    pub tls_key: Option<PathBuf>,

    /// Authenticate with SASL DIGEST-MD5 as USER (the server knows us as
    /// `sasl:USER`); the password comes from --password-file or
    /// ZKLOCK_PASSWORD.
    #[arg(
        long,
        value_name = "USER",
        env = "ZKLOCK_SASL_USER",
        hide_env_values = true
    )]
    pub sasl_user: Option<String>,

    /// Authenticate with the `digest` scheme as USER (zkCli's `addauth
    /// digest USER:PASSWORD`); the password comes from --password-file or
    /// ZKLOCK_PASSWORD.
    #[arg(
        long,
        value_name = "USER",
        env = "ZKLOCK_DIGEST_USER",
        hide_env_values = true
    )]
    pub digest_user: Option<String>,

    /// Read the password of --sasl-user or --digest-user from FILE (its
    /// first line). Without it: the ZKLOCK_PASSWORD environment variable.
    /// Passwords are never taken from the command line.
    #[arg(
        long,
        value_name = "FILE",
        env = "ZKLOCK_PASSWORD_FILE",
        hide_env_values = true
    )]
    pub password_file: Option<PathBuf>,

    /// Authenticate with Kerberos (SASL GSSAPI) from the ticket cache
    /// (`kinit`, `k5start`). Needs a zklock built with `--features kerberos`.
    #[arg(long, env = "ZKLOCK_KERBEROS", hide_env_values = true)]
    pub kerberos: bool,

    /// The service part of the servers' Kerberos principal
    /// (SERVICE/host@REALM). [default: zookeeper]
    #[arg(
        long,
        value_name = "SERVICE",
        env = "ZKLOCK_KERBEROS_SERVICE",
        hide_env_values = true
    )]
    pub kerberos_service: Option<String>,

    /// The host part of the servers' Kerberos principal. [default: the host
    /// zklock connects to]
    #[arg(
        long,
        value_name = "HOST",
        env = "ZKLOCK_KERBEROS_HOST",
        hide_env_values = true
    )]
    pub kerberos_host: Option<String>,

    /// The ACL of every node zklock creates, in zkCli's syntax
    /// SCHEME:ID:PERMS (e.g. `sasl:backup:cdrwa`, `world:anyone:r`);
    /// repeat it for several entries (ZKLOCK_ACL separates them with `;`).
    /// `creator` = all permissions for the identities we authenticate as,
    /// `open` = all permissions for everyone. Our own identity needs READ,
    /// CREATE and DELETE. [default: `creator` plus `world:anyone:r` with
    /// credentials, else `open`]
    #[arg(
        long,
        value_name = "ACL",
        env = "ZKLOCK_ACL",
        value_delimiter = ';',
        hide_env_values = true
    )]
    pub acl: Vec<String>,
}

impl ConnectionArgs {
    /// The connection settings: these flags over `ZKLOCK_*`, over the config
    /// file, over the defaults; a bad setting is a usage error.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        Settings::resolve(&self.given()).map_err(crate::exit::Failure::usage)
    }

    /// What the flags and their environment variables gave, for resolving.
    pub fn given(&self) -> Given {
        Given {
            target: self.hosts.clone(),
            session_timeout: self.session_timeout,
            connect_timeout: self.connect_timeout,
            config: self.config.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            sasl_user: self.sasl_user.clone(),
            digest_user: self.digest_user.clone(),
            password_file: self.password_file.clone(),
            kerberos: self.kerberos,
            kerberos_service: self.kerberos_service.clone(),
            kerberos_host: self.kerberos_host.clone(),
            acl: self.acl.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

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
        let Command::Run(bare) = parse(&["zklock", "run", "/l"]).unwrap().command else {
            panic!("not run")
        };
        assert!(
            bare.command_line()
                .unwrap_err()
                .starts_with("no command given")
        );
        let Command::Run(shell) = parse(&["zklock", "run", "/l", "-c", "echo hi"])
            .unwrap()
            .command
        else {
            panic!("not run")
        };
        let line = shell.command_line().unwrap();
        assert_eq!(line[1..], ["-c".into(), "echo hi".into()] as [OsString; 2]);
    }

    #[test]
    fn kinds_and_paths() {
        let run = |args: &[&str]| match Cli::try_parse_from(args.iter().copied()).unwrap().command {
            Command::Run(run) => run,
            _ => panic!("not run"),
        };
        assert_eq!(
            run(&["zklock", "run", "/l", "--", "true"]).lock_kind(),
            LockKind::Exclusive
        );
        assert_eq!(
            run(&["zklock", "run", "-x", "/l", "--", "true"]).lock_kind(),
            LockKind::Exclusive
        );
        assert_eq!(
            run(&["zklock", "run", "-s", "/l", "--", "true"]).lock_kind(),
            LockKind::Read
        );
        assert_eq!(
            run(&["zklock", "run", "--write", "/l", "--", "true"]).lock_kind(),
            LockKind::Write
        );
        assert_eq!(
            run(&["zklock", "run", "--limit", "3", "/l", "--", "true"]).lock_kind(),
            LockKind::Semaphore(3)
        );
        assert_eq!(
            run(&["zklock", "run", "/b", "/a", "--", "true"]).lock_paths(),
            Ok(vec!["/b", "/a"])
        );
        assert!(
            run(&["zklock", "run", "/a", "/b", "/a", "--", "true"])
                .lock_paths()
                .is_err()
        );
    }

    #[test]
    fn wait_limit_follows_flags() {
        let run = |args: &[&str]| match Cli::try_parse_from(args.iter().copied()).unwrap().command {
            Command::Run(run) => run,
            _ => panic!("not run"),
        };
        assert_eq!(
            run(&["zklock", "run", "/l", "--", "true"]).wait_limit(),
            None
        );
        assert_eq!(
            run(&["zklock", "run", "-n", "/l", "--", "true"]).wait_limit(),
            Some(Duration::ZERO)
        );
        assert_eq!(
            run(&["zklock", "run", "-w", "1.5", "/l", "--", "true"]).wait_limit(),
            Some(Duration::from_millis(1500))
        );
    }
}
