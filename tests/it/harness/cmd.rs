//! Commands that run `zklock`, and oracles over what the locked commands did.

use std::io;
use std::ops::{Deref, DerefMut};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::TempDir;

/// The variables zklock reads to name the CI job it runs in (docs/design.md,
/// "Holder data"), and `CI`.
pub const CI_VARIABLES: &[&str] = &[
    "CI",
    "GITHUB_ACTIONS",
    "GITHUB_SERVER_URL",
    "GITHUB_REPOSITORY",
    "GITHUB_RUN_ID",
    "GITHUB_RUN_ATTEMPT",
    "GITLAB_CI",
    "CI_JOB_URL",
    "JENKINS_URL",
    "JENKINS_HOME",
    "BUILD_URL",
    "BUILDKITE",
    "BUILDKITE_BUILD_URL",
    "CIRCLECI",
    "CIRCLE_BUILD_URL",
];

/// The built binary with a clean environment: no inherited `ZKLOCK_*` (a developer's
/// settings must not change test outcomes), none of the CI job's variables (the CI
/// the tests run in must not either), none of systemd's (a suite run from a unit would
/// notify it) and stdin from /dev/null.
pub fn zklock() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zklock"));
    clean_environment(&mut cmd);
    cmd
}

/// What [`zklock`] does to the environment and stdin of `cmd`, which runs the
/// binary some other way (in a network namespace: `Net::zklock`).
pub fn clean_environment(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        if key.as_bytes().starts_with(b"ZKLOCK_") {
            cmd.env_remove(&key);
        }
    }
    for key in CI_VARIABLES
        .iter()
        .chain(&["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"])
    {
        cmd.env_remove(key);
    }
    cmd.stdin(Stdio::null());
}

/// `zklock run -z CONNECT PATH`; the caller appends options, `--` and the command.
pub fn zklock_run(connect: &str, path: &str) -> Command {
    let mut cmd = zklock();
    cmd.arg("run").arg("-z").arg(connect).arg(path);
    cmd
}

/// `/it/<tag>-<pid>-<n>`: distinct per call and per test process.
pub fn unique_path(tag: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("/it/{tag}-{}-{n}", std::process::id())
}

/// Polls until `path` exists.
pub fn wait_for_file(path: impl AsRef<Path>, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if path.as_ref().exists() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls until the child exits; None if it is still running after `timeout`.
pub fn wait_for_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `sig` to `pid` (negative: a process group); panics on failure.
pub fn signal(pid: i32, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid, sig) } != 0 {
        panic!("kill({pid}, {sig}): {}", io::Error::last_os_error());
    }
}

/// A child that is killed (SIGKILL) and reaped when dropped, so that a failing test
/// does not leave zklock and its command running, holding locks other tests wait for.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Start,
    End,
}

/// One line of a [`LockLog`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub kind: EntryKind,
    /// `ZKLOCK_FENCING_TOKEN`, None if the command did not get one.
    pub token: Option<i64>,
    /// The locked shell's pid.
    pub id: u32,
}

/// A file that locked commands append `start`/`end` lines to.
///
/// The oracles use line order, not timestamps: each line is one short `>>` write, and
/// O_APPEND makes the position-and-write atomic, so the file order is the order in which
/// the events really happened, with no clock to trust.
pub struct LockLog {
    _dir: TempDir,
    path: PathBuf,
}

impl LockLog {
    pub fn new() -> LockLog {
        let dir = TempDir::new();
        let path = dir.path().join("lock.log");
        std::fs::write(&path, "").expect("create lock log");
        LockLog { _dir: dir, path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A `sh -c` script: logs `start <token> <pid>`, runs `body`, logs `end <token> <pid>`
    /// and exits with the body's status.
    ///
    /// When the shell is terminated by a signal (zklock forwarding one, or killing the
    /// group after losing the lock), a trap still logs `end` once the body has been
    /// stopped; only SIGKILL leaves a `start` without an `end`, which the oracles treat
    /// as still holding (the conservative reading).
    pub fn shell_body(&self, body: &str) -> String {
        let log = self.path.display();
        let line =
            |kind: &str| format!("echo \"{kind} ${{ZKLOCK_FENCING_TOKEN:--}} $$\" >> '{log}'");
        format!(
            "trap '{trapped_end}; exit 143' TERM\n\
             trap '{trapped_end}; exit 130' INT\n\
             trap '{trapped_end}; exit 129' HUP\n\
             {start}\n\
             {body}\n\
             rc=$?\n\
             {end}\n\
             exit $rc\n",
            start = line("start"),
            end = line("end"),
            // Inside the single-quoted trap action.
            trapped_end = line("end").replace('\'', "'\\''"),
        )
    }

    pub fn contents(&self) -> String {
        std::fs::read_to_string(&self.path).expect("read lock log")
    }

    /// Parses the log; panics on a malformed line.
    pub fn entries(&self) -> Vec<Entry> {
        let contents = self.contents();
        contents
            .lines()
            .map(|line| {
                parse_entry(line)
                    .unwrap_or_else(|| panic!("malformed lock log line {line:?} in:\n{contents}"))
            })
            .collect()
    }

    pub fn starts(&self) -> usize {
        self.entries()
            .iter()
            .filter(|e| e.kind == EntryKind::Start)
            .count()
    }

    /// Polls until at least `n` commands have started.
    pub fn wait_for_starts(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.starts() >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Pids of commands that logged `start` but not `end`.
    pub fn open_ids(&self) -> Vec<u32> {
        let mut open = Vec::new();
        for entry in self.entries() {
            match entry.kind {
                EntryKind::Start => open.push(entry.id),
                EntryKind::End => open.retain(|&id| id != entry.id),
            }
        }
        open
    }

    /// Logs `end` for a command the test killed with SIGKILL (which no trap sees).
    /// Call it only once the process is known to be gone: the line's position then
    /// truthfully says "ended before this point".
    pub fn record_end(&self, id: u32) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .expect("open lock log");
        writeln!(file, "end - {id}").expect("append to lock log");
    }

    /// The most commands ever between `start` and `end` at once, in append order.
    pub fn max_concurrency(&self) -> usize {
        let mut open: Vec<u32> = Vec::new();
        let mut max = 0;
        for entry in self.entries() {
            match entry.kind {
                EntryKind::Start => {
                    open.push(entry.id);
                    max = max.max(open.len());
                }
                EntryKind::End => {
                    let at = open
                        .iter()
                        .position(|&id| id == entry.id)
                        .unwrap_or_else(|| {
                            panic!(
                                "`end` without `start` for {}:\n{}",
                                entry.id,
                                self.contents()
                            )
                        });
                    open.remove(at);
                }
            }
        }
        max
    }

    pub fn assert_max_concurrency(&self, limit: usize) {
        let max = self.max_concurrency();
        assert!(
            max <= limit,
            "{max} holders at once (limit {limit}):\n{}",
            self.contents()
        );
    }

    pub fn assert_exclusive(&self) {
        self.assert_max_concurrency(1);
    }

    /// Tokens of successive starts strictly increase (meaningful for exclusive logs).
    pub fn assert_tokens_increase(&self) {
        let mut last: Option<i64> = None;
        for entry in self.entries().iter().filter(|e| e.kind == EntryKind::Start) {
            let token = entry
                .token
                .unwrap_or_else(|| panic!("start without a fencing token:\n{}", self.contents()));
            if let Some(last) = last {
                assert!(
                    token > last,
                    "token {token} after {last}:\n{}",
                    self.contents()
                );
            }
            last = Some(token);
        }
    }
}

impl Default for LockLog {
    fn default() -> Self {
        LockLog::new()
    }
}

fn parse_entry(line: &str) -> Option<Entry> {
    let mut words = line.split(' ');
    let kind = match words.next()? {
        "start" => EntryKind::Start,
        "end" => EntryKind::End,
        _ => return None,
    };
    let token = match words.next()? {
        "-" => None,
        t => Some(t.parse().ok()?),
    };
    let id = words.next()?.parse().ok()?;
    words.next().is_none().then_some(Entry { kind, token, id })
}
