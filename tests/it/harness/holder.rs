//! `Holder`: a `zklock run` whose command holds the lock until the test closes its
//! stdin, and reports the `ZKLOCK_*` environment it got; plus checks on lock nodes.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use super::{Inspector, KillOnDrop, LockLog, TempDir, wait_for_exit, wait_until};

const LONG: Duration = Duration::from_secs(30);

/// A zklock whose command logs `start` to a [`LockLog`], writes each `ZKLOCK_*`
/// variable to a file, then waits for EOF on stdin (`cat`), so the test decides when
/// the lock is released without any sleep. zklock's stderr goes to a file, for
/// assertions and failure messages.
///
/// `cat` runs in the background and the shell in `wait`, and the "started" marker
/// comes only once `cat` exists: a TERM from zklock then always reaches `cat` and
/// interrupts `wait`, so the trap logs `end`. A TERM that reached the shell before a
/// foreground `cat` was forked would wait for `cat` (POSIX defers traps until the
/// foreground command ends), and only the SIGKILL after `--kill-after` would end
/// it, leaving no `end` line. (An asynchronous command's stdin is /dev/null, hence
/// fd 3.)
pub struct Holder {
    child: KillOnDrop,
    dir: TempDir,
}

impl Holder {
    /// Spawns `cmd` (a `zklock run ... PATH...` with its options, no command yet) with
    /// the holding command appended.
    pub fn spawn(cmd: &mut Command, log: &LockLog) -> Holder {
        let dir = TempDir::new();
        let d = dir.path().display();
        let body = format!(
            "printf '%s' \"$ZKLOCK_PATH\" > '{d}/ZKLOCK_PATH'\n\
             printf '%s' \"$ZKLOCK_NODE\" > '{d}/ZKLOCK_NODE'\n\
             printf '%s' \"$tokens\" > '{d}/ZKLOCK_FENCING_TOKEN'\n\
             printf '%s' \"$ZKLOCK_SESSION_ID\" > '{d}/ZKLOCK_SESSION_ID'\n\
             echo $$ > '{d}/shell_pid'\n\
             exec 3<&0\n\
             cat <&3 > /dev/null &\n\
             : > '{d}/started'\n\
             wait $!"
        );
        let stderr = File::create(dir.path().join("stderr")).expect("create stderr file");
        let child = cmd
            .arg("--")
            .arg("sh")
            .arg("-c")
            // With several paths, the log gets the first path's token: a log line
            // is one line.
            .arg(format!(
                "tokens=\"$ZKLOCK_FENCING_TOKEN\"\n\
                 ZKLOCK_FENCING_TOKEN=\"${{tokens%%\n*}}\"\n{}",
                log.shell_body(&body)
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn zklock");
        Holder {
            child: KillOnDrop(child),
            dir,
        }
    }

    /// Spawns and waits until the command runs, i.e. the lock is held.
    pub fn start(cmd: &mut Command, log: &LockLog) -> Holder {
        let mut holder = Holder::spawn(cmd, log);
        holder.wait_started(LONG);
        holder
    }

    /// zklock's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the command has started (the lock is held).
    pub fn started(&self) -> bool {
        self.marker().exists()
    }

    /// Waits until the command runs; panics (with zklock's stderr) if zklock exits
    /// first or `timeout` passes.
    pub fn wait_started(&mut self, timeout: Duration) {
        let marker = self.marker();
        let child = &mut self.child;
        let mut exited = None;
        wait_until(timeout, "the locked command starts", || {
            if marker.exists() {
                return true;
            }
            exited = child.try_wait().expect("try_wait");
            exited.is_some()
        });
        if !marker.exists() {
            panic!(
                "zklock exited with {exited:?} before running the command; stderr:\n{}",
                self.stderr()
            );
        }
    }

    /// A variable of the command's environment; panics before the command started.
    pub fn env(&self, name: &str) -> String {
        assert!(self.started(), "{name}: the command has not started");
        std::fs::read_to_string(self.dir.path().join(name))
            .unwrap_or_else(|e| panic!("read {name}: {e}"))
    }

    /// `ZKLOCK_NODE` (one path per line with several lock paths).
    pub fn nodes(&self) -> Vec<String> {
        self.env("ZKLOCK_NODE").lines().map(String::from).collect()
    }

    /// The only node, for a single lock path.
    pub fn node(&self) -> String {
        let nodes = self.nodes();
        assert_eq!(nodes.len(), 1, "one node expected: {nodes:?}");
        nodes.into_iter().next().unwrap()
    }

    /// The pid of the locked shell (the id in its [`LockLog`] lines).
    pub fn shell_pid(&self) -> u32 {
        self.env("shell_pid").trim().parse().expect("shell pid")
    }

    pub fn tokens(&self) -> Vec<i64> {
        self.env("ZKLOCK_FENCING_TOKEN")
            .lines()
            .map(|t| t.parse().unwrap_or_else(|e| panic!("token {t:?}: {e}")))
            .collect()
    }

    /// Ends the command (EOF on its stdin), which releases the lock.
    pub fn release(&mut self) {
        drop(self.child.stdin.take());
    }

    /// Waits for zklock to exit; panics (with its stderr) after `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        match wait_for_exit(&mut self.child, timeout) {
            Some(status) => status,
            None => panic!(
                "zklock still running after {timeout:?}; stderr:\n{}",
                self.stderr()
            ),
        }
    }

    /// Releases and expects a clean exit.
    pub fn finish(&mut self) {
        self.release();
        let status = self.wait(LONG);
        assert_eq!(status.code(), Some(0), "stderr:\n{}", self.stderr());
    }

    /// Waits for exit and checks the status code.
    pub fn assert_exit(&mut self, code: i32, timeout: Duration) {
        let status = self.wait(timeout);
        assert_eq!(status.code(), Some(code), "stderr:\n{}", self.stderr());
    }

    /// What zklock printed on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    fn marker(&self) -> PathBuf {
        self.dir.path().join("started")
    }
}

/// Full paths of the children of `dir` whose names contain `marker`, sorted.
pub fn contenders(zk: &Inspector, dir: &str, marker: &str) -> Vec<String> {
    zk.children(dir)
        .into_iter()
        .filter(|c| c.contains(marker))
        .map(|c| format!("{dir}/{c}"))
        .collect()
}

/// Waits until `dir` has at least `n` children whose names contain `marker` (queued
/// contenders), and returns them.
pub fn wait_for_contenders(zk: &Inspector, dir: &str, marker: &str, n: usize) -> Vec<String> {
    let mut found = Vec::new();
    wait_until(LONG, &format!("{n} `{marker}` nodes under {dir}"), || {
        found = contenders(zk, dir, marker);
        found.len() >= n
    });
    found
}

/// Ephemeral nodes (lock nodes, leases, gates) anywhere under `path`. Container and
/// persistent directories may remain: the server reaps empty containers later.
pub fn ephemerals(zk: &Inspector, path: &str) -> Vec<String> {
    zk.tree(path)
        .into_iter()
        .filter(|node| zk.stat(node).is_some_and(|s| s.ephemeral_owner != 0))
        .collect()
}

/// Panics if any ephemeral node is left under `path`.
pub fn assert_no_lock_nodes(zk: &Inspector, path: &str) {
    let left = ephemerals(zk, path);
    assert!(left.is_empty(), "lock nodes left under {path}: {left:?}");
}

/// Waits until no ephemeral node is left under `path`: for holders that died without
/// deleting their nodes, whose sessions the server has yet to expire.
pub fn wait_no_lock_nodes(zk: &Inspector, path: &str, timeout: Duration) {
    wait_until(timeout, &format!("no lock nodes under {path}"), || {
        ephemerals(zk, path).is_empty()
    });
}

/// Whether `pid` is gone or a zombie: it runs nothing any more.
pub fn is_dead(pid: u32) -> bool {
    !super::pid_alive(pid as i32)
}
