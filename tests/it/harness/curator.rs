//! Apache Curator's lock recipes (Debian's `libcurator-recipes-java`), for
//! interoperability tests.
//!
//! `tests/it/curator/CuratorLock.java` is compiled once per source (by its hash)
//! into the target dir with `javac`, against the jars in `/usr/share/java`. One
//! JVM, one Curator client, serves a whole test: it takes and releases locks in
//! named slots on command, so the JVM's start is paid once. Missing Curator or
//! javac is an error, never a skip (`.ci/setup` installs them).

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::node::JAVA;
use super::process::stdout_lines;
use super::{KillOnDrop, LockLog, wait_for_exit};

const SOURCE: &str = include_str!("../curator/CuratorLock.java");
const JAVAC: &str = "/usr/bin/javac";
/// Curator and what it needs at run time, all from Debian packages.
const JARS: [&str; 7] = [
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/slf4j-api.jar",
];
/// Silences slf4j's complaint about a missing binding.
const SLF4J_NOP: &str = "/usr/share/java/slf4j-nop.jar";
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Curator's recipes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CuratorKind {
    /// `InterProcessMutex`.
    Mutex,
    /// `InterProcessReadWriteLock.readLock()`.
    Read,
    /// `InterProcessReadWriteLock.writeLock()`.
    Write,
    /// `InterProcessSemaphoreV2` of N leases.
    Semaphore(u32),
}

impl CuratorKind {
    /// The helper's command for taking it at `path`: its name, `path`, and
    /// a semaphore's N.
    fn command(self, path: &str) -> String {
        match self {
            CuratorKind::Mutex => format!("mutex {path}"),
            CuratorKind::Read => format!("read {path}"),
            CuratorKind::Write => format!("write {path}"),
            CuratorKind::Semaphore(n) => format!("semaphore {path} {n}"),
        }
    }
}

/// What a slot holds: its node (full path) and the node's czxid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CuratorHold {
    pub node: String,
    pub czxid: i64,
}

/// A JVM running one Curator client.
pub struct Curator {
    child: KillOnDrop,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Lines already read, by slot, that their slot has not asked for yet.
    pending: HashMap<String, VecDeque<String>>,
    /// Each slot's id in the lock log.
    ids: HashMap<String, u32>,
    log: String,
}

impl Curator {
    /// Starts the JVM and waits until its client is connected to `hosts`. With a
    /// log, holders append `start`/`end` lines like [`LockLog::shell_body`] does,
    /// with the node's czxid as the token and [`Curator::id`] as the id.
    pub fn start(hosts: &str, log: Option<&LockLog>) -> Curator {
        let log = log.map_or("-".to_string(), |l| l.path().display().to_string());
        let mut child = Command::new(JAVA)
            // A short-lived client: the quick JIT tier starts sooner.
            .args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp"])
            .arg(classpath())
            .arg("CuratorLock")
            .args([hosts, &log])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn java");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = stdout_lines(stdout);
        let mut curator = Curator {
            child: KillOnDrop(child),
            stdin,
            lines,
            pending: HashMap::new(),
            ids: HashMap::new(),
            log,
        };
        match curator.read_line(START_TIMEOUT) {
            Some(line) if line == "ready" => curator,
            other => panic!("the Curator helper did not connect: {other:?} (see its stderr)"),
        }
    }

    /// Starts taking `kind` at `path` in `slot` (a slot holds one lock at a time);
    /// `timeout` None waits for ever. Returns at once: see [`Curator::expect`].
    pub fn acquire(
        &mut self,
        slot: &str,
        kind: CuratorKind,
        path: &str,
        timeout: Option<Duration>,
    ) {
        // Above every pid (pid_max is at most 2^22), so never a shell's id.
        static NEXT_ID: AtomicU32 = AtomicU32::new(1 << 31);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        self.ids.insert(slot.to_string(), id);
        let timeout = timeout.map_or("-".to_string(), |t| t.as_millis().to_string());
        self.send(&format!("{slot} {} {timeout} {id}", kind.command(path)));
    }

    /// Takes `kind` at `path` in `slot` and waits until it holds.
    pub fn hold(&mut self, slot: &str, kind: CuratorKind, path: &str) -> CuratorHold {
        self.acquire(slot, kind, path, None);
        self.acquired(slot, START_TIMEOUT)
    }

    /// Waits for `slot` to hold; panics on another answer or none within `timeout`.
    pub fn acquired(&mut self, slot: &str, timeout: Duration) -> CuratorHold {
        let line = self.expect(slot, "acquired", timeout);
        let (node, czxid) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("Curator helper: {slot} acquired {line:?}"));
        CuratorHold {
            node: node.to_string(),
            czxid: czxid.parse().expect("czxid"),
        }
    }

    /// Waits for `slot`'s next answer to be `word` (`acquired`, `timeout`,
    /// `released`) and returns the rest of its line; panics on another answer or
    /// none within `timeout`.
    pub fn expect(&mut self, slot: &str, word: &str, timeout: Duration) -> String {
        match self.next(slot, timeout) {
            Some(line) if line == word => String::new(),
            Some(line) if line.starts_with(&format!("{word} ")) => {
                line[word.len() + 1..].to_string()
            }
            other => {
                panic!("Curator helper: expected {slot} {word:?} within {timeout:?}, got {other:?}")
            }
        }
    }

    /// `slot`'s next answer, if it comes within `timeout` (zero: only one already
    /// printed).
    pub fn next(&mut self, slot: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(line) = self.pending.get_mut(slot).and_then(VecDeque::pop_front) {
                return Some(line);
            }
            let line = self.read_line(deadline.saturating_duration_since(Instant::now()))?;
            let (from, rest) = line
                .split_once(' ')
                .unwrap_or_else(|| panic!("Curator helper said {line:?}"));
            if rest.starts_with("error ") {
                panic!("Curator helper, slot {from}: {rest} (see its stderr)");
            }
            self.pending
                .entry(from.to_string())
                .or_default()
                .push_back(rest.to_string());
        }
    }

    /// Releases what `slot` holds and waits until it is released.
    pub fn release(&mut self, slot: &str) {
        self.send(&format!("{slot} release"));
        self.expect(slot, "released", START_TIMEOUT);
    }

    /// `slot`'s id in the lock log, for its latest acquire.
    pub fn id(&self, slot: &str) -> u32 {
        self.ids[slot]
    }

    /// Ends the client (closing its session) and expects a clean exit.
    pub fn close(mut self) {
        drop(self.stdin);
        let status = wait_for_exit(&mut self.child, START_TIMEOUT)
            .expect("the Curator helper exits once its stdin closes");
        assert_eq!(status.code(), Some(0), "Curator helper exit status");
    }

    fn send(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").expect("write to the Curator helper");
    }

    fn read_line(&mut self, timeout: Duration) -> Option<String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().expect("wait for java");
                panic!(
                    "the Curator helper exited with {status} (see its stderr; log {})",
                    self.log
                )
            }
        }
    }
}

/// The helper's classes and Curator's jars.
fn classpath() -> String {
    let mut parts = vec![classes().display().to_string()];
    parts.extend(JARS.iter().map(|j| j.to_string()));
    if Path::new(SLF4J_NOP).exists() {
        parts.push(SLF4J_NOP.to_string());
    }
    parts.join(":")
}

/// The compiled helper: a directory under the target dir named by the source's
/// hash, compiled at most once (and by one test process: it compiles into a
/// directory of its own and renames it into place).
fn classes() -> &'static PathBuf {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        for (path, what) in [(JAVAC, "javac (default-jdk-headless)")]
            .into_iter()
            .chain(JARS.map(|j| (j, "Curator's jars (libcurator-recipes-java)")))
        {
            assert!(
                Path::new(path).exists(),
                "{what} not found at {path}: the interop tests run Apache Curator; run \
                 .ci/setup, or `sudo apt-get install libcurator-recipes-java default-jdk-headless`"
            );
        }
        let mut hasher = DefaultHasher::new();
        SOURCE.hash(&mut hasher);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("curator-lock-{:016x}", hasher.finish()));
        if dir.join("CuratorLock.class").exists() {
            return dir;
        }
        let building = dir.with_extension(format!("building-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&building);
        std::fs::create_dir_all(&building).expect("create the helper's build dir");
        let source = building.join("CuratorLock.java");
        std::fs::write(&source, SOURCE).expect("write CuratorLock.java");
        let output = Command::new(JAVAC)
            .arg("-d")
            .arg(&building)
            .arg("-cp")
            .arg(JARS.join(":"))
            .arg(&source)
            .output()
            .expect("run javac");
        assert!(
            output.status.success(),
            "javac CuratorLock.java:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // Another test process may have got there first; its classes are the same.
        if std::fs::rename(&building, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&building);
        }
        assert!(
            dir.join("CuratorLock.class").exists(),
            "no classes in {}",
            dir.display()
        );
        dir
    })
}
