//! kazoo (the Python ZooKeeper client, from PyPI) locks, for interoperability tests.
//!
//! `.ci/test` installs kazoo into a venv at `target/kazoo-venv` and points
//! `ZKLOCK_TEST_PYTHON` at its python. A missing kazoo is an error, never a skip.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use super::process::stdout_lines;
use super::{KillOnDrop, LockLog, wait_for_exit};

/// Takes a kazoo lock and reports on stdout: `acquired` once held (after logging
/// `start` to the lock log, if any), or `timeout`. Holds until stdin closes, then logs
/// `end`, releases, prints `released`. The session is always closed on the way out, so
/// a node left behind by a timed-out acquire dies with it at once.
///
/// argv: KIND (Lock, ReadLock, WriteLock), PATH, HOSTS, TIMEOUT (seconds or `-` for
/// none), LOG (a file or `-`).
const SCRIPT: &str = r#"
import os, sys
from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout

kind, path, hosts, timeout, log = sys.argv[1:6]
# zklock's node names, so that kazoo sees zklock's contenders (readers share).
patterns = {
    "Lock": ["-lock-", "__WRIT__", "__READ__"],
    "WriteLock": ["-lock-", "__WRIT__", "__READ__"],
    "ReadLock": ["-lock-", "__WRIT__"],
}[kind]

def note(word):
    if log != "-":
        with open(log, "a") as f:
            f.write("%s - %d\n" % (word, os.getpid()))

zk = KazooClient(hosts=hosts, timeout=10.0)
zk.start(timeout=30)
try:
    lock = getattr(zk, kind)(path, "kazoo-it", extra_lock_patterns=patterns)
    try:
        got = lock.acquire(timeout=None if timeout == "-" else float(timeout))
    except LockTimeout:
        got = False
    if not got:
        print("timeout", flush=True)
        sys.exit(3)
    note("start")
    print("acquired", flush=True)
    sys.stdin.read()
    note("end")
    lock.release()
    print("released", flush=True)
finally:
    zk.stop()
    zk.close()
"#;

/// kazoo's lock classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KazooKind {
    Lock,
    ReadLock,
    WriteLock,
}

impl KazooKind {
    fn class(self) -> &'static str {
        match self {
            KazooKind::Lock => "Lock",
            KazooKind::ReadLock => "ReadLock",
            KazooKind::WriteLock => "WriteLock",
        }
    }

    /// What kazoo puts in its node names.
    pub fn marker(self) -> &'static str {
        match self {
            KazooKind::Lock | KazooKind::WriteLock => "__lock__",
            KazooKind::ReadLock => "__rlock__",
        }
    }
}

/// A python process taking a kazoo lock.
pub struct KazooLock {
    child: KillOnDrop,
    lines: Receiver<String>,
}

impl KazooLock {
    /// Starts acquiring `kind` at `path`; `timeout` None waits forever. With a log,
    /// the holder appends `start`/`end` lines like [`LockLog::shell_body`] does.
    pub fn spawn(
        kind: KazooKind,
        hosts: &str,
        path: &str,
        timeout: Option<Duration>,
        log: Option<&LockLog>,
    ) -> KazooLock {
        let timeout = timeout.map_or("-".to_string(), |t| t.as_secs_f64().to_string());
        let log = log.map_or("-".to_string(), |l| l.path().display().to_string());
        let mut child = Command::new(python())
            .arg("-c")
            .arg(SCRIPT)
            .args([kind.class(), path, hosts, &timeout, &log])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn python");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = stdout_lines(stdout);
        KazooLock {
            child: KillOnDrop(child),
            lines,
        }
    }

    /// The next line the helper prints; None if it printed nothing within `timeout`.
    /// Panics if it exited without printing.
    pub fn next_line(&mut self, timeout: Duration) -> Option<String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().expect("wait for python");
                panic!("the kazoo helper exited with {status} without a word (see its stderr)")
            }
        }
    }

    /// Waits for `word` (`acquired`, `timeout`, `released`); panics on another word or
    /// none within `timeout`.
    pub fn expect(&mut self, word: &str, timeout: Duration) {
        match self.next_line(timeout) {
            Some(line) if line == word => {}
            other => panic!("kazoo helper: expected {word:?} within {timeout:?}, got {other:?}"),
        }
    }

    /// Releases (closes stdin), waits for `released` and a clean exit.
    pub fn release(&mut self, timeout: Duration) {
        drop(self.child.stdin.take());
        self.expect("released", timeout);
        self.assert_exit(0, timeout);
    }

    pub fn assert_exit(&mut self, code: i32, timeout: Duration) {
        let status = wait_for_exit(&mut self.child, timeout)
            .unwrap_or_else(|| panic!("kazoo helper still running after {timeout:?}"));
        assert_eq!(status.code(), Some(code), "kazoo helper exit status");
    }
}

/// The python with kazoo: `$ZKLOCK_TEST_PYTHON`, else the venv `.ci/test` creates.
/// Checked once; panics with instructions if neither imports kazoo.
pub fn python() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/kazoo-venv/bin/python");
        let candidates: Vec<PathBuf> = std::env::var_os("ZKLOCK_TEST_PYTHON")
            .map(PathBuf::from)
            .into_iter()
            .chain([venv])
            .collect();
        let imports_kazoo = |python: &PathBuf| {
            Command::new(python)
                .args(["-c", "import kazoo"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        candidates
            .iter()
            .find(|p| imports_kazoo(p))
            .cloned()
            .unwrap_or_else(|| {
                panic!(
                    "no python with kazoo (tried {candidates:?}): run .ci/test, which installs \
                     kazoo into target/kazoo-venv, or set ZKLOCK_TEST_PYTHON to a python that \
                     can `import kazoo`"
                )
            })
    })
}
