//! `--max-waiting N`: join a lock's queue only if fewer than N runs wait ahead.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::{
    Gated, Inspector, KillOnDrop, Outcome, TempDir, assert_no_nodes, run_bounded, shared_server,
    unique_path, wait_for_exit, wait_until, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// A lock held by a gated run, with `waiters` more runs queued behind it.
struct Queue {
    zk: Inspector,
    path: String,
    holder: Gated,
    runs: Vec<KillOnDrop>,
    scratch: TempDir,
}

impl Queue {
    fn new(tag: &str, holder_options: &[&str], waiters: usize) -> Queue {
        let zk = Inspector::connect(&shared_server().connect_string());
        let path = unique_path(tag);
        let mut holder = zklock_run(&shared_server().connect_string(), &path);
        holder.args(holder_options);
        let mut queue = Queue {
            holder: Gated::start(holder),
            zk,
            path,
            runs: Vec::new(),
            scratch: TempDir::new(),
        };
        for i in 0..waiters {
            queue.join(&format!("waiter-{i}"), &[]);
        }
        queue
    }

    fn command(&self, options: &[&str], marker: &str) -> Command {
        let mut cmd = zklock_run(&shared_server().connect_string(), &self.path);
        cmd.args(options)
            .arg("--")
            .arg("touch")
            .arg(self.scratch.path().join(marker));
        cmd
    }

    /// Starts a run that must queue (its node appears) and keep waiting.
    fn join(&mut self, marker: &str, options: &[&str]) {
        let before = self.zk.children(&self.path).len();
        let mut cmd = self.command(options, marker);
        cmd.stdout(Stdio::null());
        self.runs
            .push(KillOnDrop(cmd.spawn().expect("spawn a waiter")));
        wait_until(LONG, &format!("{marker} queued"), || {
            self.zk.children(&self.path).len() == before + 1
        });
        let run = self.runs.last_mut().unwrap();
        assert!(run.try_wait().unwrap().is_none(), "{marker} exited");
    }

    /// Runs a contender that must give up: nothing of it left, its command not run.
    fn refused(&self, options: &[&str]) -> Outcome {
        let before = self.zk.children(&self.path);
        let out = run_bounded(&mut self.command(options, "refused"), LONG);
        assert_eq!(self.zk.children(&self.path), before, "{options:?}");
        assert!(!self.ran("refused"), "{options:?}: the command ran");
        out
    }

    fn ran(&self, marker: &str) -> bool {
        self.scratch.path().join(marker).exists()
    }

    /// Releases the holder; every queued run then runs and succeeds.
    fn release(mut self) {
        assert!(self.holder.finish().success());
        for (i, run) in self.runs.iter_mut().enumerate() {
            let status = wait_for_exit(run, LONG).unwrap_or_else(|| panic!("run {i} waits on"));
            assert!(status.success(), "run {i}: {status}");
        }
        assert_no_nodes(&self.zk, &self.path);
    }
}

/// The one line a refused run prints.
fn assert_counted(out: &Outcome, path: &str, waiting: usize, limit: usize) {
    out.assert_code(75);
    let line = out.one_error_line();
    let runs = match waiting {
        1 => "1 run is".to_owned(),
        n => format!("{n} runs are"),
    };
    assert_eq!(
        line,
        format!("zklock: not waiting for {path}: {runs} already waiting (--max-waiting {limit})")
    );
}

#[test]
fn gives_up_exactly_when_n_or_more_wait_ahead() {
    for depth in [0, 1, 3] {
        let mut queue = Queue::new("max-waiting", &[], depth);
        for limit in [0, 1, 3, 4] {
            if depth >= limit {
                let limit_arg = limit.to_string();
                let out = queue.refused(&["--max-waiting", &limit_arg]);
                assert_counted(&out, &queue.path, depth, limit);
            }
        }
        // The smallest limit above the depth joins, and runs in its turn.
        let limit = [1, 3, 4].into_iter().find(|&l| l > depth).unwrap();
        queue.join("joined", &["--max-waiting", &limit.to_string()]);
        queue.release();
    }
}

#[test]
fn a_free_lock_is_taken_even_with_zero() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let path = unique_path("max-waiting-free");
    let mut cmd = zklock_run(&connect, &path);
    cmd.args(["--max-waiting", "0", "--", "true"]);
    run_bounded(&mut cmd, LONG).assert_code(0);
    assert_no_nodes(&zk, &path);
}

#[test]
fn conflict_exit_code_and_quiet_apply() {
    let queue = Queue::new("max-waiting-code", &[], 1);
    queue
        .refused(&["--max-waiting", "1", "-E", "3"])
        .assert_code(3);
    let out = queue.refused(&["--max-waiting", "0", "-q"]);
    out.assert_code(75);
    assert_eq!(out.stderr, "");
    // -n never waits: it says who holds the lock, as without --max-waiting.
    let out = queue.refused(&["--max-waiting", "0", "-n"]);
    out.assert_code(75);
    assert!(!out.stderr.contains("already waiting"), "{}", out.stderr);
    queue.release();
}

/// Readers holding together are holders; readers queued behind a writer wait.
#[test]
fn shared_holders_do_not_count() {
    let mut queue = Queue::new("max-waiting-shared", &["-s"], 0);
    let mut second = zklock_run(&shared_server().connect_string(), &queue.path);
    second.arg("-s");
    let second = Gated::start(second);
    // Another reader shares the lock at once, whatever the limit.
    let mut reader = queue.command(&["-s", "--max-waiting", "0"], "reader");
    run_bounded(&mut reader, LONG).assert_code(0);
    assert!(queue.ran("reader"));
    queue.join("writer", &["--write"]);
    let out = queue.refused(&["-s", "--max-waiting", "1"]);
    assert_counted(&out, &queue.path, 1, 1);
    queue.join("late-reader", &["-s", "--max-waiting", "2"]);
    assert!(second.finish().success());
    queue.release();
}

#[test]
fn each_path_is_checked_and_earlier_ones_released() {
    let queue = Queue::new("max-waiting-b", &[], 1);
    let first = unique_path("max-waiting-a");
    let mut cmd = zklock_run(&shared_server().connect_string(), &first);
    cmd.arg(&queue.path)
        .args(["--max-waiting", "1", "--", "true"]);
    let out = run_bounded(&mut cmd, LONG);
    // /it/max-waiting-a... sorts before /it/max-waiting-b...
    assert_counted(&out, &queue.path, 1, 1);
    assert_no_nodes(&queue.zk, &first);
    queue.release();
}

#[test]
fn refused_with_limit() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let path = unique_path("max-waiting-limit");
    let mut cmd = zklock_run(&connect, &path);
    cmd.args(["--limit", "2", "--max-waiting", "1", "--", "true"]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(64);
    out.one_error_line();
    assert_no_nodes(&zk, &path);
}
