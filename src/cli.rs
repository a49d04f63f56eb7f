//! The command-line model. Doc comments here are the `--help` text.

use std::ffi::OsString;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit::{CONFLICT_DEFAULT, EXIT_CODE_HELP};
use crate::lease::OnDisconnect;
use crate::recipe::LockKind;

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
    #[command(after_help = format!("{ENVIRONMENT_HELP}\n\n{EXIT_CODE_HELP}"), verbatim_doc_comment)]
    Run(RunArgs),
}

const ENVIRONMENT_HELP: &str = "\
Environment given to the command:
  ZKLOCK_PATH           the lock path as given
  ZKLOCK_NODE           our lock node's full path
  ZKLOCK_FENCING_TOKEN  a number that increases with every new holder of the
                        lock (the node's czxid); pass it to the resource
  ZKLOCK_SESSION_ID     the ZooKeeper session id, in hex";

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
    #[arg(
        long,
        value_name = "DURATION",
        allow_negative_numbers = true,
        default_value = "5s"
    )]
    pub kill_after: Seconds,

    /// What a lost connection means while the command runs: `lease` keeps
    /// it running while the session can still come back (until the lease
    /// deadline); `kill` treats any disconnection as losing the lock.
    #[arg(long, value_name = "POLICY", value_enum, default_value_t = OnDisconnect::Lease)]
    pub on_disconnect: OnDisconnect,

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

/// How to reach the ensemble; shared by every subcommand that talks to it.
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// ZooKeeper servers: comma-separated host:port list with an optional
    /// /chroot suffix, e.g. `zk1:2181,zk2:2181/apps`.
    #[arg(
        short = 'z',
        long = "zookeeper",
        value_name = "HOSTS",
        env = "ZKLOCK_ZOOKEEPER",
        default_value = "127.0.0.1:2181"
    )]
    pub hosts: HostList,

    /// Session timeout to ask the ensemble for; the lock is released at most
    /// this long after zklock dies or is cut off.
    #[arg(
        long,
        value_name = "DURATION",
        allow_negative_numbers = true,
        default_value = "10s"
    )]
    pub session_timeout: Seconds,

    /// Give up (exit 69) if no session is established within DURATION.
    #[arg(
        long,
        value_name = "DURATION",
        allow_negative_numbers = true,
        default_value = "10s"
    )]
    pub connect_timeout: Seconds,
}

/// A duration given as humantime (`30s`, `1m 30s`, `250ms`) or as a bare,
/// possibly fractional, number of seconds (as `flock -w` takes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub Duration);

impl FromStr for Seconds {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.starts_with('-') {
            return Err(format!("`{text}` is negative; durations start at 0"));
        }
        if text.starts_with(|c: char| c.is_ascii_digit() || c == '.')
            && text.chars().all(|c| c.is_ascii_digit() || c == '.')
        {
            let seconds: f64 = text
                .parse()
                .map_err(|_| format!("`{text}` is not a number of seconds"))?;
            return Duration::try_from_secs_f64(seconds)
                .map(Seconds)
                .map_err(|_| format!("`{text}` seconds is out of range"));
        }
        humantime::parse_duration(text)
            .map(Seconds)
            .map_err(|err| format!("`{text}` is not a duration ({err}); try 30s, 2m or 0.5"))
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

/// An absolute ZooKeeper path that may carry a lock: no empty, `.` or `..`
/// component, no trailing slash, no control characters, not the root and not
/// under the reserved `/zookeeper`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockPath(String);

impl LockPath {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for LockPath {
    type Err = String;

    fn from_str(path: &str) -> Result<Self, Self::Err> {
        validate_znode_path(path)?;
        if path == "/" {
            return Err("the root `/` cannot be a lock path; use e.g. /locks/NAME".into());
        }
        if path == "/zookeeper" || path.starts_with("/zookeeper/") {
            return Err(format!(
                "`{path}` is under /zookeeper, which ZooKeeper reserves"
            ));
        }
        Ok(LockPath(path.to_owned()))
    }
}

/// ZooKeeper's own path rules (PathUtils.validatePath), as a usage error
/// instead of a server round trip.
fn validate_znode_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!(
            "`{path}` is not an absolute path (it must start with /)"
        ));
    }
    if path.len() > 1 && path.ends_with('/') {
        return Err(format!("`{path}` ends with /"));
    }
    if let Some(bad) = path.chars().find(|&c| is_forbidden_char(c)) {
        return Err(format!(
            "`{}` contains the forbidden character {:?}",
            path.escape_debug(),
            bad
        ));
    }
    if path.len() > 1 {
        for component in path[1..].split('/') {
            match component {
                "" => return Err(format!("`{path}` has an empty component (//)")),
                "." | ".." => return Err(format!("`{path}` has a `{component}` component")),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Surrogates (also forbidden by ZooKeeper) cannot occur in a Rust string.
fn is_forbidden_char(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
}

/// A validated connect string: `host[:port][,host[:port]...][/chroot]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    /// The string handed to the client library, ports filled in.
    connect_string: String,
    chroot: Option<String>,
}

impl HostList {
    pub fn connect_string(&self) -> &str {
        &self.connect_string
    }

    pub fn chroot(&self) -> Option<&str> {
        self.chroot.as_deref()
    }
}

impl FromStr for HostList {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (hosts, chroot) = match text.find('/') {
            Some(i) => (&text[..i], Some(&text[i..])),
            None => (text, None),
        };
        let chroot = match chroot {
            None | Some("/") => None,
            Some(path) => {
                validate_znode_path(path).map_err(|err| format!("bad chroot: {err}"))?;
                Some(path.to_owned())
            }
        };
        if hosts.trim().is_empty() {
            return Err("no host given; expected host:port[,host:port...][/chroot]".into());
        }
        let mut normalized = Vec::new();
        for host in hosts.split(',') {
            normalized.push(normalize_host(host.trim())?);
        }
        let mut connect_string = normalized.join(",");
        if let Some(chroot) = &chroot {
            connect_string.push_str(chroot);
        }
        Ok(HostList {
            connect_string,
            chroot,
        })
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; a missing port means 2181.
fn normalize_host(host: &str) -> Result<String, String> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (v6, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("`{host}`: unclosed ["))?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or_else(|| format!("`{host}`: expected :port after ]"))?,
            ),
        };
        (format!("[{v6}]"), port)
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        }
    };
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._[]:".contains(c))
    };
    if !valid_name(&name) || name.contains(':') && !name.starts_with('[') {
        return Err(format!("`{host}` is not a valid host; expected host:port"));
    }
    let port = match port {
        None => 2181,
        Some(port) => match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(format!("`{host}` has a bad port; expected 1-65535")),
        },
    };
    Ok(format!("{name}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_model_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn durations() {
        let secs = |s: &str| s.parse::<Seconds>().map(|d| d.0);
        assert_eq!(secs("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(secs("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(secs("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(secs("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(secs("10"), Ok(Duration::from_secs(10)));
        assert_eq!(secs("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(secs("0"), Ok(Duration::ZERO));
        for bad in [
            "",
            "-1",
            "abc",
            "1.2.3",
            "10 parsecs",
            "1e999",
            "nan",
            "-5s",
        ] {
            assert!(secs(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn lock_paths() {
        for good in [
            "/a",
            "/locks/nightly-backup",
            "/a/b/c",
            "/zookeeperish",
            "/ä/ü",
        ] {
            assert!(good.parse::<LockPath>().is_ok(), "{good} refused");
        }
        for bad in [
            "",
            "a",
            "locks/x",
            "/",
            "/a/",
            "/a//b",
            "/a/./b",
            "/a/..",
            "/.",
            "/a\nb",
            "/a\u{0}",
            "/zookeeper",
            "/zookeeper/quota",
            "/a\u{7f}",
        ] {
            assert!(bad.parse::<LockPath>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn host_lists() {
        let parse = |s: &str| s.parse::<HostList>();
        let one = parse("127.0.0.1:2181").unwrap();
        assert_eq!(one.connect_string(), "127.0.0.1:2181");
        assert_eq!(one.chroot(), None);
        let many = parse("zk1:2181, zk2,zk3:2888/apps/x").unwrap();
        assert_eq!(many.connect_string(), "zk1:2181,zk2:2181,zk3:2888/apps/x");
        assert_eq!(many.chroot(), Some("/apps/x"));
        assert_eq!(parse("[::1]:2181").unwrap().connect_string(), "[::1]:2181");
        assert_eq!(parse("[::1]").unwrap().connect_string(), "[::1]:2181");
        assert_eq!(parse("zk1:2181/").unwrap().chroot(), None);
        for bad in [
            "",
            ",",
            "zk1:",
            "zk1:0",
            "zk1:99999",
            "zk1:abc",
            "zk1,,zk2",
            "zk1:2181/a/",
            "zk 1",
            "[::1",
            "::1",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
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
        let Command::Run(bare) = parse(&["zklock", "run", "/l"]).unwrap().command;
        assert!(
            bare.command_line()
                .unwrap_err()
                .starts_with("no command given")
        );
        let Command::Run(shell) = parse(&["zklock", "run", "/l", "-c", "echo hi"])
            .unwrap()
            .command;
        let line = shell.command_line().unwrap();
        assert_eq!(line[1..], ["-c".into(), "echo hi".into()] as [OsString; 2]);
    }

    #[test]
    fn kinds_and_paths() {
        let run = |args: &[&str]| match Cli::try_parse_from(args.iter().copied()).unwrap().command {
            Command::Run(run) => run,
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

/// Completions and the man page are generated from this model and committed
/// under `completions/`; this test fails when they drift. Regenerate with
/// `ZKLOCK_REGENERATE=1 cargo test --bin zklock generated_files`.
#[cfg(test)]
mod generated_files {
    use std::path::Path;

    use clap::CommandFactory;
    use clap_complete::Shell;

    use super::Cli;

    fn check(file: &str, contents: &[u8]) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("completions")
            .join(file);
        if std::env::var_os("ZKLOCK_REGENERATE").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, contents).unwrap();
            return;
        }
        let committed = std::fs::read(&path).unwrap_or_default();
        assert!(
            committed == contents,
            "{} is out of date; run ZKLOCK_REGENERATE=1 cargo test --bin zklock generated_files",
            path.display()
        );
    }

    #[test]
    fn completions_are_current() {
        for (shell, file) in [
            (Shell::Bash, "zklock.bash"),
            (Shell::Zsh, "_zklock"),
            (Shell::Fish, "zklock.fish"),
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "zklock", &mut out);
            check(file, &out);
        }
    }

    #[test]
    fn man_page_is_current() {
        let mut out = Vec::new();
        clap_mangen::Man::new(Cli::command())
            .render(&mut out)
            .unwrap();
        check("zklock.1", &out);
        let run = Cli::command()
            .find_subcommand("run")
            .unwrap()
            .clone()
            .name("zklock-run");
        let mut out = Vec::new();
        clap_mangen::Man::new(run).render(&mut out).unwrap();
        check("zklock-run.1", &out);
    }
}
