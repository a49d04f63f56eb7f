//! Helpers for the fault-injection scenarios of issue 3 (`faults_*.rs`): a `zklock run`
//! whose command reports what it got and holds the lock until released, and waits on
//! the tree, on processes and on `cons` output.
#![allow(dead_code)]

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::harness::{
    Ensemble, Inspector, KillOnDrop, LockLog, TempDir, pid_alive, wait_until, zklock_run,
};

/// Bound for things that should take seconds; only there to turn a hang into a failure.
pub const LONG: Duration = Duration::from_secs(30);

/// A body that holds the lock until [`Locker::release`] (polling in short sleeps, so a
/// TERM is acted on within a few tens of milliseconds).
pub const HOLD: &str = "while [ ! -e \"$LOCKER_DIR/release\" ]; do sleep 0.02; done";

/// What the locked command was given, as it wrote it down when it started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Info {
    pub node: String,
    pub session: i64,
    pub token: i64,
    /// The locked shell's pid (the id in the [`LockLog`]).
    pub pid: u32,
}

impl Info {
    pub fn node_name(&self) -> &str {
        self.node.rsplit('/').next().unwrap_or(&self.node)
    }
}

/// Parses `0x...` as printed by `{:#x}` (an i64 session id).
pub fn parse_session(hex: &str) -> Option<i64> {
    u64::from_str_radix(hex.trim().trim_start_matches("0x"), 16)
        .ok()
        .map(|v| v as i64)
}

/// `sid=0x...` as ZooKeeper's `cons` prints it.
pub fn cons_sid(session: i64) -> String {
    format!("sid={:#x}", session as u64)
}

/// One `zklock run`: its stderr goes to a file, and its command logs to a [`LockLog`],
/// writes an info file when it starts, then runs `body` (see [`HOLD`]).
pub struct Locker {
    pub name: String,
    child: KillOnDrop,
    dir: TempDir,
    pub spawned: Instant,
    status: Option<ExitStatus>,
}

impl Locker {
    /// `zklock run -z CONNECT [ARGS] PATH -c BODY`.
    pub fn spawn(
        name: &str,
        connect: &str,
        path: &str,
        args: &[&str],
        log: &LockLog,
        body: &str,
    ) -> Locker {
        let dir = TempDir::new();
        let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr file");
        let info = "echo \"$ZKLOCK_NODE $ZKLOCK_SESSION_ID $ZKLOCK_FENCING_TOKEN $$\" \
                    > \"$LOCKER_DIR/info.tmp\" && mv \"$LOCKER_DIR/info.tmp\" \"$LOCKER_DIR/info\"";
        let script = log.shell_body(&format!("{info}\n{body}"));
        let mut cmd = zklock_run(connect, path);
        cmd.args(args)
            .arg("-c")
            .arg(script)
            .env("LOCKER_DIR", dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(stderr);
        // Before the spawn: zklock's own clock (its --timeout) starts at its
        // exec, and a loaded machine may run it a while before spawn returns.
        let spawned = Instant::now();
        let child = KillOnDrop(cmd.spawn().expect("spawn zklock"));
        Locker {
            name: name.to_string(),
            child,
            dir,
            spawned,
            status: None,
        }
    }

    /// zklock's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    pub fn info(&self) -> Option<Info> {
        let text = std::fs::read_to_string(self.dir.path().join("info")).ok()?;
        let mut words = text.split_whitespace();
        Some(Info {
            node: words.next()?.to_string(),
            session: parse_session(words.next()?)?,
            token: words.next()?.parse().ok()?,
            pid: words.next()?.parse().ok()?,
        })
    }

    /// Waits until the command has started (the lock is held); panics if zklock exits
    /// first.
    pub fn wait_info(&mut self, timeout: Duration) -> Info {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(info) = self.info() {
                return info;
            }
            if let Some(status) = self.try_exit() {
                panic!(
                    "{}: zklock exited ({status}) before its command started; stderr:\n{}",
                    self.name,
                    self.stderr()
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "{}: command not started after {timeout:?}; stderr:\n{}",
                    self.name,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Lets a [`HOLD`] body finish.
    pub fn release(&self) {
        std::fs::write(self.dir.path().join("release"), "").expect("write release file");
    }

    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait zklock");
        }
        self.status
    }

    pub fn is_running(&mut self) -> bool {
        self.try_exit().is_none()
    }

    /// Panics (with zklock's stderr) if zklock has exited.
    pub fn assert_running(&mut self, what: &str) {
        if let Some(status) = self.try_exit() {
            panic!(
                "{}: zklock exited ({status}) {what}; stderr:\n{}",
                self.name,
                self.stderr()
            );
        }
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return status;
            }
            if Instant::now() >= deadline {
                panic!(
                    "{}: zklock still running after {timeout:?}; stderr:\n{}",
                    self.name,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the exit and checks its code, showing stderr on a mismatch.
    pub fn expect_exit(&mut self, code: i32, timeout: Duration) -> ExitStatus {
        let status = self.wait_exit(timeout);
        assert_eq!(
            status.code(),
            Some(code),
            "{}: zklock exited with {status}, expected {code}; stderr:\n{}",
            self.name,
            self.stderr()
        );
        status
    }

    /// Checks that zklock said once, on stderr, that it lost the lock and why.
    pub fn assert_one_loss_line(&self, why: &str) {
        let stderr = self.stderr();
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("zklock: lock lost:"))
            .collect();
        assert!(
            lines.len() == 1 && lines[0].contains(why),
            "{}: expected one `lock lost: ...{why}...` line; stderr:\n{stderr}",
            self.name
        );
    }

    /// SIGKILL zklock and reap it.
    pub fn kill(&mut self) -> ExitStatus {
        if self.try_exit().is_none() {
            let _ = self.child.kill();
        }
        self.wait_exit(LONG)
    }
}

/// An exit status as a word for messages and tallies: `0`, `76`, `signal 9`.
/// The usual end of a holder-and-waiter scenario: the holder releases, both
/// exit 0, and the log shows exactly their two runs, exclusive, tokens rising.
pub fn finish_two_runs(holder: &mut Locker, waiter: &mut Locker, log: &LockLog) {
    holder.release();
    holder.expect_exit(0, LONG);
    waiter.expect_exit(0, LONG);
    log.assert_exclusive();
    log.assert_tokens_increase();
    assert_eq!(log.starts(), 2);
}

pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => status.to_string(),
    }
}

/// Until `until`, checks that every locker keeps running, that `starts` commands have
/// started, and that no command starts or ends meanwhile. For "nothing happens during
/// this fault" properties: the duration is the scenario's, a failure shows as soon as
/// it happens.
pub fn hold_steady(lockers: &mut [&mut Locker], log: &LockLog, starts: usize, until: Instant) {
    let before = log.contents();
    assert_eq!(log.starts(), starts, "{before}");
    let since = Instant::now();
    loop {
        for locker in lockers.iter_mut() {
            locker.assert_running("while the lock should be kept");
        }
        let now = log.contents();
        if now != before {
            let stderr: String = lockers
                .iter()
                .map(|l| format!("--- {} stderr:\n{}", l.name, l.stderr()))
                .collect();
            panic!(
                "a command started or ended while the lock should be kept \
                 ({:?} into a {:?} hold):\nbefore:\n{before}now:\n{now}{stderr}",
                since.elapsed(),
                until.saturating_duration_since(since),
            );
        }
        if Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the lock directory has exactly `n` children (queued contenders).
pub fn wait_children(zk: &Inspector, path: &str, n: usize, timeout: Duration) -> Vec<String> {
    let mut last = Vec::new();
    let start = Instant::now();
    loop {
        if let Ok(children) = zk.try_children(path) {
            if children.len() == n {
                return children;
            }
            last = children;
        }
        if start.elapsed() >= timeout {
            panic!("{path}: expected {n} children after {timeout:?}, have {last:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (up to `timeout`, e.g. a session timeout for nodes left to die with a killed
/// session) until no node is left under `path`.
pub fn assert_no_nodes_within(zk: &Inspector, path: &str, timeout: Duration) {
    let start = Instant::now();
    loop {
        let left = zk.tree(path);
        if left.is_empty() {
            return;
        }
        if start.elapsed() >= timeout {
            panic!("nodes left under {path} after {timeout:?}: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Whether `pid` is a process that has not exited (zombies count as exited).
pub fn pid_running(pid: u32) -> bool {
    pid_alive(pid as i32)
}

/// Waits until `pid` has exited; returns how long that took.
pub fn wait_pid_gone(pid: u32, timeout: Duration) -> Duration {
    wait_until(timeout, &format!("process {pid} gone"), || {
        !pid_running(pid)
    })
}

/// The members whose `cons` lists a connection of `session` (paused or stopped members
/// are not asked: `skip`).
pub fn members_serving(ensemble: &Ensemble, session: i64, skip: &[usize]) -> Vec<usize> {
    let sid = cons_sid(session);
    (0..ensemble.len())
        .filter(|i| !skip.contains(i))
        .filter(|&i| {
            ensemble
                .try_four_letter(i, "cons")
                .is_ok_and(|cons| cons.contains(&sid))
        })
        .collect()
}

/// Pids in the order their commands logged `start`.
pub fn start_order(log: &LockLog) -> Vec<u32> {
    log.entries()
        .iter()
        .filter(|e| e.kind == crate::harness::EntryKind::Start)
        .map(|e| e.id)
        .collect()
}

/// A small xorshift generator: the chaos test needs variety, not quality, and prints
/// its seed so that a failing schedule can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn from_env_or_time() -> Rng {
        let seed = std::env::var("ZKLOCK_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("chaos seed: {seed} (set ZKLOCK_CHAOS_SEED to replay)");
        Rng::new(seed)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// Paths under (or at) `path` in a `wchp` answer (watched path, then session lines).
pub fn watched_under(wchp: &str, path: &str) -> Vec<String> {
    let prefix = format!("{path}/");
    wchp.lines()
        .filter(|line| *line == path || line.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// The sessions watching `node` in a `wchp` answer: the indented `0x...` lines
/// under its path.
pub fn watchers_of(wchp: &str, node: &str) -> Vec<i64> {
    wchp.lines()
        .skip_while(|line| *line != node)
        .skip(1)
        .map_while(|line| line.trim().strip_prefix("0x"))
        .filter_map(|hex| u64::from_str_radix(hex, 16).ok())
        .map(|id| id as i64)
        .collect()
}

/// Waits (briefly: closing sessions are processed at once) until no watch is left on
/// `path` or below, as `wchp` from `four_letter` shows.
pub fn assert_no_watches(four_letter: impl Fn(&str) -> String, path: &str) {
    let start = Instant::now();
    loop {
        let left = watched_under(&four_letter("wchp"), path);
        if left.is_empty() {
            return;
        }
        if start.elapsed() >= Duration::from_secs(5) {
            panic!("watches left under {path}: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
