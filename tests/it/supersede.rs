//! `--supersede`: a newer run removes the older waiting `--supersede` runs from
//! the queue; never the holder, never other waiters.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::{
    Gated, Inspector, KazooKind, KazooLock, KillOnDrop, LockLog, TempDir, assert_no_lock_nodes,
    contenders, run_bounded, shared_server, unique_path, wait_for_contenders, wait_for_exit,
    wait_until, zklock, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// The node beside the lock that names the newest --supersede run.
pub(crate) const NEWEST: &str = "zklock.supersede";

/// A `zklock run` spawned in the background, its stderr kept for the end.
pub(crate) struct Run(KillOnDrop);

impl Run {
    pub(crate) fn spawn(mut cmd: Command) -> Run {
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        Run(KillOnDrop(
            cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")),
        ))
    }

    /// Waits for the exit: its code and what it printed on stderr.
    pub(crate) fn exit(mut self) -> (i32, String) {
        let status = wait_for_exit(&mut self.0, LONG).expect("zklock exits");
        let mut stderr = String::new();
        if let Some(mut pipe) = self.0.stderr.take() {
            pipe.read_to_string(&mut stderr).expect("read stderr");
        }
        let code = status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {status}\n{stderr}"));
        (code, stderr)
    }

    /// zklock's pid.
    pub(crate) fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

/// `zklock run --supersede --label LABEL PATH -- sh -c <logged true>`.
fn superseding(path: &str, label: &str, log: &LockLog) -> Command {
    superseding_with(path, label, &[], log)
}

fn superseding_with(path: &str, label: &str, options: &[&str], log: &LockLog) -> Command {
    let mut cmd = zklock_run(&shared_server().connect_string(), path);
    cmd.args(["--supersede", "--label", label])
        .args(options)
        .args(["--", "sh", "-c"])
        .arg(log.shell_body("true"));
    cmd
}

pub(crate) fn assert_superseded(run: Run, by: &str) {
    let (code, stderr) = run.exit();
    assert_eq!(code, 75, "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("zklock: superseded") && lines[0].contains(by),
        "expected one line naming {by}: {stderr:?}"
    );
}

#[test]
fn the_newest_waiter_replaces_the_older_ones_and_the_holder_stays() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let path = unique_path("supersede-chain");
    let log = LockLog::new();
    // The holder was started with --supersede too: it is never touched.
    let mut holder = zklock_run(&connect, &path);
    holder.arg("--supersede");
    let holder = Gated::start(holder);

    let b = Run::spawn(superseding(&path, "job-B", &log));
    wait_for_contenders(&zk, &path, "-lock-", 2);
    let c = Run::spawn(superseding(&path, "job-C", &log));
    assert_superseded(b, "job-C");
    wait_for_contenders(&zk, &path, "-lock-", 2);
    let d = Run::spawn(superseding(&path, "job-D", &log));
    assert_superseded(c, "job-D");
    wait_until(LONG, "D queued and C gone", || {
        contenders(&zk, &path, "-lock-").len() == 2
    });

    assert!(
        holder.finish().success(),
        "the holder's command was not killed"
    );
    let (code, stderr) = d.exit();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(log.starts(), 1, "only D ran:\n{}", log.contents());
    log.assert_exclusive();
    assert_no_lock_nodes(&zk, &path);
    assert_newest(&zk, &path, "job-D");
}

/// The node beside the lock names the newest --supersede run, and nothing
/// else is left under `path`.
pub(crate) fn assert_newest(zk: &Inspector, path: &str, label: &str) {
    let newest = format!("{path}/{NEWEST}");
    assert_eq!(zk.tree(path), std::slice::from_ref(&newest));
    let (data, _) = zk.get_data(&newest).expect("the newest run is recorded");
    let data: serde_json::Value = serde_json::from_slice(&data).expect("JSON");
    assert_eq!(data["label"], label, "{data}");
    assert!(data["first_czxid"].is_i64(), "{data}");
    // No contender: the lock is free, and the operator commands say nothing of it.
    let connect = shared_server().connect_string();
    for subcommand in ["status", "list"] {
        let out = run_bounded(zklock().args([subcommand, "-z", &connect, path]), LONG);
        out.assert_code(0);
        assert!(!out.stdout.contains(NEWEST), "{}", out.stdout);
    }
}

#[test]
fn quiet_hides_the_line_and_e_sets_the_code() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let path = unique_path("supersede-quiet");
    let log = LockLog::new();
    let holder = Gated::start(zklock_run(&connect, &path));
    let b = Run::spawn(superseding_with(&path, "job-B", &["-q", "-E", "9"], &log));
    wait_for_contenders(&zk, &path, "-lock-", 2);
    let c = Run::spawn(superseding(&path, "job-C", &log));
    assert_eq!(b.exit(), (9, String::new()));
    assert!(holder.finish().success());
    assert_eq!(c.exit().0, 0);
    assert_newest(&zk, &path, "job-C");
}

/// Plain zklock waiters and kazoo waiters are not removed, even between
/// --supersede runs; the newer --supersede run keeps its own place behind them.
#[test]
fn plain_and_kazoo_waiters_stay() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let path = unique_path("supersede-mixed");
    let log = LockLog::new();
    let holder = Gated::start(zklock_run(&connect, &path));

    let b = Run::spawn(superseding(&path, "job-B", &log));
    wait_for_contenders(&zk, &path, "-lock-", 2);
    let mut plain = zklock_run(&connect, &path);
    plain.args(["--", "sh", "-c"]).arg(log.shell_body("true"));
    let plain = Run::spawn(plain);
    wait_for_contenders(&zk, &path, "-lock-", 3);
    let mut kazoo = KazooLock::spawn(KazooKind::Lock, &connect, &path, None, Some(&log));
    wait_for_contenders(&zk, &path, "__lock__", 1);
    let c = Run::spawn(superseding(&path, "job-C", &log));
    assert_superseded(b, "job-C");
    // The holder, the plain waiter, kazoo's and C's.
    wait_until(LONG, "C queued", || {
        zk.children(&path).iter().filter(|c| *c != NEWEST).count() == 4
    });

    assert!(holder.finish().success());
    assert_eq!(plain.exit().0, 0);
    kazoo.expect("acquired", LONG);
    kazoo.release(LONG);
    let (code, stderr) = c.exit();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(log.starts(), 3, "{}", log.contents());
    log.assert_exclusive();
    assert_no_lock_nodes(&zk, &path);
}

/// Hand-offs racing with arrivals: a waiter that becomes the holder just as
/// a newer run tries to remove it keeps the lock and runs to its end.
#[test]
fn a_waiter_that_took_the_lock_is_never_removed() {
    const ROUNDS: usize = 20;
    const RUNS: usize = 5;
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let path = unique_path("supersede-race");
    let log = LockLog::new();
    let scratch = TempDir::new();
    let mut superseded = 0;
    for round in 0..ROUNDS {
        // Spawned back to back: each short hold hands over while the next
        // runs queue and remove the waiters ahead of them.
        let runs: Vec<(Run, std::path::PathBuf)> = (0..RUNS)
            .map(|i| {
                let ran = scratch.path().join(format!("ran-{round}-{i}"));
                let body = format!("touch '{}'", ran.display());
                let mut cmd = zklock_run(&connect, &path);
                cmd.args(["--supersede", "--", "sh", "-c"])
                    .arg(log.shell_body(&body));
                (Run::spawn(cmd), ran)
            })
            .collect();
        let mut ran = 0;
        for (i, (run, marker)) in runs.into_iter().enumerate() {
            let (code, stderr) = run.exit();
            match code {
                0 => assert!(
                    marker.exists(),
                    "round {round} run {i}: exit 0 without running"
                ),
                // A superseded run never started its command.
                75 => assert!(
                    !marker.exists() && stderr.starts_with("zklock: superseded"),
                    "round {round} run {i}: 75 after its command started: {stderr}"
                ),
                _ => panic!("round {round} run {i}: exit {code}: {stderr}"),
            }
            ran += usize::from(code == 0);
            superseded += usize::from(code == 75);
        }
        // The newest run of a round is never superseded.
        assert!(ran >= 1, "round {round}: nobody ran");
    }
    eprintln!("{superseded} of {} runs superseded", ROUNDS * RUNS);
    assert!(log.open_ids().is_empty(), "{}", log.contents());
    log.assert_exclusive();
    log.assert_tokens_increase();
    assert_no_lock_nodes(&zk, &path);
}

#[test]
fn refused_with_shared_limit_or_several_paths() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let (a, b) = (
        unique_path("supersede-usage"),
        unique_path("supersede-usage"),
    );
    for (options, paths, says) in [
        (&["-s"][..], vec![&a], "exclusive"),
        (&["--limit", "2"][..], vec![&a], "--limit"),
        (&[][..], vec![&a, &b], "one PATH"),
    ] {
        let mut cmd = zklock_run(&connect, paths[0]);
        cmd.args(&paths[1..])
            .arg("--supersede")
            .args(options)
            .args(["--", "true"]);
        let out = run_bounded(&mut cmd, LONG);
        out.assert_code(64);
        let line = out.one_error_line();
        assert!(
            line.contains("--supersede") && line.contains(says),
            "{line}"
        );
    }
    assert!(!zk.exists(&a) && !zk.exists(&b));
}
