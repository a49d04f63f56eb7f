//! Giving up on a held lock: `--timeout`, `--no-wait` and `-E`.

use std::process::Command;
use std::time::Duration;

use crate::harness::{
    Gated, Inspector, Outcome, TempDir, assert_no_nodes, run_bounded, shared_server, unique_path,
    zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// A lock path held by a gated `zklock run`, and a way to try it while held.
struct HeldLock {
    zk: Inspector,
    path: String,
    holder: Gated,
    holder_nodes: Vec<String>,
    scratch: TempDir,
}

impl HeldLock {
    fn new(tag: &str) -> HeldLock {
        let zk = Inspector::connect(&shared_server().connect_string());
        let path = unique_path(tag);
        let holder = Gated::start(zklock_run(&shared_server().connect_string(), &path));
        let holder_nodes = zk.children(&path);
        assert_eq!(holder_nodes.len(), 1, "{holder_nodes:?}");
        HeldLock {
            zk,
            path,
            holder,
            holder_nodes,
            scratch: TempDir::new(),
        }
    }

    /// Runs a contender with `options`, whose command would leave a marker file.
    /// Checks, right after it exits, that it left no node behind and that its command
    /// did not run.
    fn contend(&self, options: &[&str]) -> Outcome {
        let ran = self.scratch.path().join("contender-ran");
        let mut cmd: Command = zklock_run(&shared_server().connect_string(), &self.path);
        cmd.args(options).arg("--").arg("touch").arg(&ran);
        let out = run_bounded(&mut cmd, LONG);
        assert_eq!(
            self.zk.children(&self.path),
            self.holder_nodes,
            "the contender's node outlived it ({options:?})"
        );
        assert!(
            !ran.exists(),
            "the command ran without the lock ({options:?})"
        );
        out
    }

    fn release(self) {
        assert!(self.holder.finish().success());
        assert_no_nodes(&self.zk, &self.path);
    }
}

/// Giving up is reported on stderr, naming the lock. (Not asserted to be one line: see
/// `gave_up_message_is_one_line_whatever_the_holder_command`.)
fn assert_says_why(out: &Outcome, path: &str) {
    assert!(
        out.stderr.starts_with("zklock: ") && out.stderr.contains(path),
        "stderr: {:?}",
        out.stderr
    );
}

#[test]
fn timeout_expires_with_75_and_removes_our_node() {
    let lock = HeldLock::new("timeout");
    let out = lock.contend(&["--timeout", "1"]);
    out.assert_code(75);
    assert_says_why(&out, &lock.path);
    assert!(
        out.elapsed >= Duration::from_millis(950) && out.elapsed < Duration::from_secs(10),
        "gave up after {:?} with --timeout 1",
        out.elapsed
    );
    lock.release();
}

#[test]
fn no_wait_on_a_held_lock_gives_75_at_once() {
    let lock = HeldLock::new("no-wait");
    for flag in ["--no-wait", "-n"] {
        let out = lock.contend(&[flag]);
        out.assert_code(75);
        assert_says_why(&out, &lock.path);
        assert!(
            out.elapsed < Duration::from_secs(2),
            "{flag} took {:?}",
            out.elapsed
        );
    }
    lock.release();
}

#[test]
fn conflict_exit_code_replaces_75() {
    let lock = HeldLock::new("conflict-code");
    lock.contend(&["-E", "3", "--no-wait"]).assert_code(3);
    lock.contend(&["--conflict-exit-code", "0", "--timeout", "0.2"])
        .assert_code(0);
    lock.contend(&["-E", "255", "-w", "100ms"]).assert_code(255);
    lock.release();
}

#[test]
fn gave_up_message_is_one_line_whatever_the_holder_command() {
    // The gated holder's command is a multi-line `sh -c` script.
    let lock = HeldLock::new("conflict-message");
    let out = lock.contend(&["--no-wait"]);
    out.assert_code(75);
    let line = out.one_error_line();
    assert!(line.contains(&lock.path), "{line}");
    lock.release();
}
