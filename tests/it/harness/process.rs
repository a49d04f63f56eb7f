//! Running commands to their end within a bound, and looking at processes by pid.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use super::Inspector;
use super::cmd::{KillOnDrop, wait_for_exit};

/// How a command ended and what it printed.
#[derive(Debug)]
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// From spawn to exit, as seen by the test (polling adds up to ~10 ms).
    pub elapsed: Duration,
}

impl Outcome {
    /// The exit code; panics (showing stderr) if the process died of a signal.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {:?}\n{}", self.status, self.stderr))
    }

    /// Asserts the exit code, showing everything printed when it differs.
    pub fn assert_code(&self, expected: i32) {
        assert_eq!(
            self.status.code(),
            Some(expected),
            "status {:?} after {:?}\nstdout: {}\nstderr: {}",
            self.status,
            self.elapsed,
            self.stdout,
            self.stderr
        );
    }

    /// Asserts that stderr is exactly one line starting with `zklock: `, and returns it.
    pub fn one_error_line(&self) -> &str {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert!(
            lines.len() == 1 && lines[0].starts_with("zklock: ") && self.stderr.ends_with('\n'),
            "expected one `zklock: ` line on stderr, got {:?}",
            self.stderr
        );
        lines[0]
    }
}

/// Runs `cmd` to its end with stdout and stderr captured; kills it and panics if it is
/// still running after `timeout`.
///
/// Only for commands that leave nothing running that holds their output pipes open.
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> Outcome {
    let started = Instant::now();
    let mut child = KillOnDrop(
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")),
    );
    // Read while it runs: a chatty command must not block on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let status = wait_for_exit(&mut child, timeout);
    let elapsed = started.elapsed();
    let Some(status) = status else {
        drop(child);
        let stderr = stderr.join().unwrap_or_default();
        panic!("{cmd:?} still running after {timeout:?}; stderr so far:\n{stderr}");
    };
    Outcome {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
        elapsed,
    }
}

/// SIGKILLs a process group when dropped.
///
/// For tests whose command starts children: if the test fails (or zklock's keeper does),
/// the command's children could outlive zklock. The group's id is not the command's pid
/// (it is zklock's keeper's), so take it from a live member with [`KillGroupOnDrop::of`].
/// Members keep the group id in use while they live, so it cannot name another group.
#[derive(Debug)]
pub struct KillGroupOnDrop(pub i32);

impl KillGroupOnDrop {
    /// The group of `pid`, which must be alive.
    pub fn of(pid: i32) -> KillGroupOnDrop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_else(|e| panic!("process {pid} is gone: {e}"));
        let pgrp = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(2))
            .and_then(|field| field.parse().ok())
            .unwrap_or_else(|| panic!("no process group in {stat:?}"));
        assert!(pgrp > 1, "process {pid} is in group {pgrp}");
        KillGroupOnDrop(pgrp)
    }
}

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions; an empty group gives ESRCH.
        unsafe { libc::kill(-self.0, libc::SIGKILL) };
    }
}

/// Whether `pid` names a process that has not exited. A zombie counts as gone: it has
/// exited, and its reaper (an orphan's is init) may be slow to collect it.
pub fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z" | "X"))
        }
        Err(_) => false,
    }
}

/// Polls until `pid` is gone; false if it still runs after `timeout`.
pub fn wait_pid_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while pid_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Waits for a file holding a pid and a newline (written by `echo $$ > file`), so a
/// half-written file is never parsed.
pub fn read_pid_file(path: &Path, timeout: Duration) -> i32 {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some(line) = text.strip_suffix('\n') {
                return line
                    .trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{} holds {text:?}", path.display()));
            }
        }
        assert!(
            Instant::now() < deadline,
            "no pid in {} after {timeout:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The oracle every test ends with: nothing of ours is left under the lock path.
pub fn assert_no_nodes(zk: &Inspector, path: &str) {
    let left = zk.tree(path);
    assert!(left.is_empty(), "nodes left under {path}: {left:?}");
}

/// The lines a helper process prints, read by a thread of their own, so that
/// a test can wait for a line with a timeout. The channel disconnects once
/// the process closes its stdout.
pub fn stdout_lines(stdout: ChildStdout) -> Receiver<String> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}
