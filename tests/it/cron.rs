//! Cron fleets (issue 12): `--once-per`, `--max-runtime`, `--metrics-file`
//! and `zklock break --record`, against a real ZooKeeper.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{
    Inspector, KazooKind, KazooLock, KillOnDrop, Scene, TempDir, run_bounded, shared_server,
    signal, unique_path, wait_for_contenders, wait_for_exit, wait_for_file, zklock, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);
const RECORD: &str = "zklock.record";

/// A shell command appending a line to `log` (one line per run).
fn appends(log: &Path) -> String {
    format!("echo ran >> '{}'", log.display())
}

fn runs(log: &Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |text| text.lines().count())
}

fn record(zk: &Inspector, path: &str) -> Option<Value> {
    let (data, _) = zk.get_data(&format!("{path}/{RECORD}"))?;
    Some(serde_json::from_slice(&data).expect("the record is JSON"))
}

fn assert_skipped(outcome: &crate::harness::Outcome, path: &str) {
    outcome.assert_code(75);
    let line = outcome.one_error_line();
    assert!(
        line.starts_with(&format!(
            "zklock: not running: {path} last ran successfully "
        )) && line.contains(" on ")
            && line.contains("fencing token")
            && line.ends_with("--once-per 1h"),
        "{line}"
    );
}

#[test]
fn five_together_run_once() {
    let s = Scene::new("once-together");
    let dir = TempDir::new();
    let log = dir.path().join("runs");
    let threads: Vec<_> = (0..5)
        .map(|_| {
            let mut cmd = s.run();
            cmd.args(["--once-per", "1h", "-c", &appends(&log)]);
            std::thread::spawn(move || run_bounded(&mut cmd, LONG))
        })
        .collect();
    let outcomes: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let codes: Vec<i32> = outcomes.iter().map(|o| o.code()).collect();
    assert_eq!(codes.iter().filter(|&&c| c == 0).count(), 1, "{outcomes:?}");
    for outcome in outcomes.iter().filter(|o| o.code() != 0) {
        assert_skipped(outcome, &s.path);
    }
    assert_eq!(runs(&log), 1);
}

#[test]
fn no_wait_staggered_runs_once() {
    let s = Scene::new("once-staggered");
    let dir = TempDir::new();
    let log = dir.path().join("runs");
    // Offsets spread over 0..2 s, not in order.
    let offsets_ms = [0u64, 1300, 450, 1900, 800];
    let started = Instant::now();
    let mut children = Vec::new();
    let mut order: Vec<u64> = offsets_ms.to_vec();
    order.sort_unstable();
    for offset in order {
        while started.elapsed() < Duration::from_millis(offset) {
            std::thread::sleep(Duration::from_millis(5));
        }
        children.push(KillOnDrop(
            s.run()
                .args(["-n", "--once-per", "1h"])
                .args(["-c", &format!("sleep 0.1; {}", appends(&log))])
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn"),
        ));
    }
    let codes: Vec<i32> = children
        .iter_mut()
        .map(|child| wait_for_exit(child, LONG).unwrap().code().unwrap())
        .collect();
    assert_eq!(codes.iter().filter(|&&c| c == 0).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|&&c| c == 75).count(), 4, "{codes:?}");
    assert_eq!(runs(&log), 1);
}

#[test]
fn a_failed_run_lets_the_next_one_run() {
    let s = Scene::new("once-failed");
    let path = &s.path;
    let once = |script: &str| run_bounded(s.run().args(["--once-per", "1h", "-c", script]), LONG);
    once("exit 1").assert_code(1);
    let rec = record(s.zk(), path).expect("a record after a failed run");
    assert_eq!(rec["last_run"]["exit_status"], 1, "{rec}");
    assert!(rec.get("last_success").is_none(), "{rec}");
    once("exit 0").assert_code(0);
    let rec = record(s.zk(), path).unwrap();
    assert_eq!(rec["last_run"], rec["last_success"], "{rec}");
    assert_eq!(rec["last_success"]["exit_status"], 0, "{rec}");
    for field in ["start_ms", "end_ms", "fencing_token"] {
        assert!(rec["last_success"][field].is_i64(), "{field}: {rec}");
    }
    assert!(rec["last_success"]["host"].is_string(), "{rec}");
    assert!(
        rec["last_success"]["start"]
            .as_str()
            .unwrap()
            .ends_with('Z'),
        "{rec}"
    );
    assert_skipped(&once("exit 0"), path);
    // -q hides the line, not the status.
    let quiet = run_bounded(s.run().args(["-q", "--once-per", "1h", "--", "true"]), LONG);
    quiet.assert_code(75);
    assert_eq!(quiet.stderr, "");
    let custom = run_bounded(
        s.run().args(["-E", "0", "--once-per", "1h", "--", "true"]),
        LONG,
    );
    custom.assert_code(0);

    // status shows the record (text and JSON) and not as a holder.
    let status = run_bounded(
        zklock().args(["status", "-z", &s.connect, "--json", path]),
        LONG,
    );
    status.assert_code(0);
    let doc: Value = serde_json::from_str(&status.stdout).unwrap();
    let lock = &doc["locks"][0];
    assert_eq!(lock["kind"], "free", "{lock}");
    assert_eq!(lock["holders"], Value::Array(Vec::new()));
    assert_eq!(lock["last_success"]["exit_status"], 0, "{lock}");
    assert_eq!(lock["last_run"], rec["last_run"], "{lock}");
    let text = run_bounded(zklock().args(["status", "-z", &s.connect, path]), LONG);
    assert!(text.stdout.contains("  last run: "), "{}", text.stdout);
    assert!(text.stdout.contains("  last success: "), "{}", text.stdout);
    let list = run_bounded(
        zklock().args(["list", "-z", &s.connect, "--json", path]),
        LONG,
    );
    list.assert_code(0);
    assert!(!list.stdout.contains(RECORD), "{}", list.stdout);

    // break --record: refuses without --yes off a terminal, then deletes.
    let refused = run_bounded(
        zklock().args(["break", "-z", &s.connect, "--record", path]),
        LONG,
    );
    refused.assert_code(64);
    assert!(
        refused.one_error_line().contains("--yes"),
        "{}",
        refused.stderr
    );
    assert!(record(s.zk(), path).is_some());
    let broken = run_bounded(
        zklock().args(["break", "-z", &s.connect, "--yes", "--record", path]),
        LONG,
    );
    broken.assert_code(0);
    assert_eq!(broken.stdout.trim(), format!("deleted {path}/{RECORD}"));
    assert!(record(s.zk(), path).is_none());
    let again = run_bounded(
        zklock().args(["break", "-z", &s.connect, "--yes", "--record", path]),
        LONG,
    );
    again.assert_code(1);
    once("true").assert_code(0);
}

#[test]
fn shifted_host_clock_still_runs_once() {
    let s = Scene::new("once-faketime");
    let dir = TempDir::new();
    let log = dir.path().join("runs");
    // The tool itself works here: the shifted clock is an hour ahead.
    let shifted = Command::new("faketime")
        .args(["-f", "+1h", "date", "+%s"])
        .output()
        .expect("faketime (Debian package faketime, installed by .ci/setup)");
    let shifted: i64 = String::from_utf8_lossy(&shifted.stdout)
        .trim()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((shifted - now - 3600).abs() < 60, "{shifted} vs {now}");

    run_bounded(
        s.run().args(["--once-per", "1h", "-c", &appends(&log)]),
        LONG,
    )
    .assert_code(0);
    // An hour later by this host's clock, seconds later by the server's.
    let mut late = Command::new("faketime");
    late.args([
        "-f",
        "+1h",
        env!("CARGO_BIN_EXE_zklock"),
        "run",
        "-z",
        &s.connect,
    ])
    .args([&s.path, "--once-per", "1h", "-c", &appends(&log)])
    .env("DONT_FAKE_MONOTONIC", "1")
    .stdin(Stdio::null());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("ZKLOCK_") {
            late.env_remove(key);
        }
    }
    assert_skipped(&run_bounded(&mut late, LONG), &s.path);
    // And the other way round: an hour behind, on a fresh path.
    let other = unique_path("once-faketime-behind");
    let mut early = Command::new("faketime");
    early
        .args([
            "-f",
            "-1h",
            env!("CARGO_BIN_EXE_zklock"),
            "run",
            "-z",
            &s.connect,
        ])
        .args([&other, "--once-per", "1h", "-c", &appends(&log)])
        .env("DONT_FAKE_MONOTONIC", "1")
        .stdin(Stdio::null());
    run_bounded(&mut early, LONG).assert_code(0);
    assert_skipped(
        &run_bounded(
            zklock_run(&s.connect, &other).args(["--once-per", "1h", "-c", &appends(&log)]),
            LONG,
        ),
        &other,
    );
    assert_eq!(runs(&log), 2, "one run per path");
}

/// A run that gives up waiting for the run going on (the record's
/// `running`, not a listing of the queue) says who holds the lock, as one
/// that waited in the queue does.
#[test]
fn once_per_giving_up_names_the_run_going_on() {
    let s = Scene::new("once-give-up");
    let dir = TempDir::new();
    let go = dir.path().join("go");
    let mut holder = KillOnDrop(
        s.run()
            .args(["--once-per", "1h", "--label", "running-host", "-c"])
            .arg(format!(
                "while [ ! -e '{}' ]; do sleep 0.05; done",
                go.display()
            ))
            .spawn()
            .unwrap(),
    );
    wait_for_contenders(s.zk(), &s.path, "-lock-", 1);
    let out = run_bounded(
        s.run().args(["--once-per", "1h", "-w", "1s", "--", "true"]),
        LONG,
    );
    out.assert_code(75);
    let line = out.one_error_line();
    assert!(
        line.contains("held by") && line.contains("running-host"),
        "{line}"
    );
    std::fs::write(&go, "").unwrap();
    assert_eq!(wait_for_exit(&mut holder, LONG).unwrap().code(), Some(0));
}

#[test]
fn once_per_refuses_limit_shared_and_several_paths() {
    let s = Scene::new("once-refuse");
    for extra in [
        &["--limit", "2"][..],
        &["--shared"][..],
        &["/it/another-path"][..],
    ] {
        let out = run_bounded(
            s.run()
                .args(["--once-per", "1h"])
                .args(extra)
                .args(["--", "true"]),
            LONG,
        );
        out.assert_code(64);
        assert!(
            out.one_error_line().contains("--once-per"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn record_is_invisible_to_curator_and_kazoo_contenders() {
    let s = Scene::new("once-interop");
    let path = &s.path;
    run_bounded(s.run().args(["--once-per", "1h", "--", "true"]), LONG).assert_code(0);
    assert!(record(s.zk(), path).is_some());

    // kazoo takes the lock at once, the record notwithstanding.
    let mut kazoo = KazooLock::spawn(KazooKind::Lock, &s.connect, path, Some(LONG), None);
    kazoo.expect("acquired", LONG);
    let status = run_bounded(
        zklock().args(["status", "-z", &s.connect, "--json", path]),
        LONG,
    );
    let doc: Value = serde_json::from_str(&status.stdout).unwrap();
    let lock = &doc["locks"][0];
    assert_eq!(lock["holders"].as_array().unwrap().len(), 1, "{lock}");
    assert_eq!(lock["holders"][0]["client"], "kazoo", "{lock}");
    assert_eq!(lock["holders"][0]["position"], 1, "{lock}");
    assert_eq!(lock["waiting"], Value::Array(Vec::new()), "{lock}");
    kazoo.release(LONG);

    // A Curator-named contender is the only holder; zklock queues behind
    // it, not behind the record.
    let (curator, _) = s.zk().create_ephemeral_sequential(
        &format!("{path}/_c_3c4f1a52-6a4e-4a5e-9f55-0c7a3c1c1a11-lock-"),
        b"10.0.0.7",
    );
    let status = run_bounded(
        zklock().args(["status", "-z", &s.connect, "--json", path]),
        LONG,
    );
    let doc: Value = serde_json::from_str(&status.stdout).unwrap();
    let lock = &doc["locks"][0];
    assert_eq!(lock["holders"][0]["client"], "curator", "{lock}");
    assert_eq!(lock["holders"].as_array().unwrap().len(), 1, "{lock}");
    assert_eq!(lock["waiting"], Value::Array(Vec::new()), "{lock}");
    // A window the last run is outside of: the waiter reads the record
    // (a recent success would skip it there, issue 38), then queues.
    let mut waiter = KillOnDrop(
        s.run()
            .args(["--once-per", "1ms", "--", "true"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_contenders(s.zk(), path, "-lock-", 2);
    assert!(s.zk().delete(&curator));
    let status = wait_for_exit(&mut waiter, LONG).expect("the waiter ends");
    assert_eq!(status.code(), Some(0), "ran once it held the lock");
    s.assert_no_lock_nodes();
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A run as the record stores it, started at `start_ms` (server clock).
fn recorded_run(start_ms: i64, exit_status: u8, host: &str) -> Value {
    serde_json::json!({
        "start_ms": start_ms,
        "start": "written by hand",
        "end_ms": start_ms + 1000,
        "end": "written by hand",
        "host": host,
        "exit_status": exit_status,
        "fencing_token": 1,
    })
}

/// Creates PATH (a fresh one) with a record written by hand, as a leader
/// whose clock jumped or an operator's edit would leave it.
fn write_record(zk: &Inspector, path: &str, record: Value) {
    zk.create_all(path);
    zk.create(
        &format!("{path}/{RECORD}"),
        record.to_string().as_bytes(),
        true,
    );
}

fn last_success_gauge(file: &Path, path: &str) -> Option<f64> {
    let samples = parse_metrics(&std::fs::read_to_string(file).expect("metrics file"));
    samples
        .get(&format!(
            "zklock_last_success_timestamp_seconds{{path=\"{path}\"}}"
        ))
        .copied()
}

#[test]
fn a_success_dated_far_ahead_is_not_recent() {
    let s = Scene::new("once-future");
    let path = &s.path;
    let dir = TempDir::new();
    let log = dir.path().join("runs");
    let file = dir.path().join("job.prom");
    let day_ahead = now_ms() + 24 * 3_600_000;
    let bogus = recorded_run(day_ahead, 0, "leader-ahead");
    write_record(
        s.zk(),
        path,
        serde_json::json!({"last_run": bogus, "last_success": bogus}),
    );
    // A file an earlier zklock wrote from that record.
    std::fs::write(
        &file,
        format!(
            "# HELP zklock_last_success_timestamp_seconds x\n\
             # TYPE zklock_last_success_timestamp_seconds gauge\n\
             zklock_last_success_timestamp_seconds{{path=\"{path}\"}} {}\n",
            day_ahead as f64 / 1000.0
        ),
    )
    .unwrap();
    let once = |script: &str| {
        run_bounded(
            s.run()
                .args(["--once-per", "1h", "--metrics-file"])
                .arg(&file)
                .args(["-c", script]),
            LONG,
        )
    };
    // It runs, says why in one line, and exports no future success.
    let failed = once(&format!("{}; exit 1", appends(&log)));
    failed.assert_code(1);
    let line = failed.one_error_line();
    assert!(
        line.starts_with(&format!(
            "zklock: running: {path} last ran successfully 23h 59m"
        )) && line
            .contains(" in the future by the server's clock, on leader-ahead at written by hand")
            && line.ends_with("dated further ahead than --once-per 1h is not recent"),
        "{line}"
    );
    assert_eq!(runs(&log), 1);
    assert_eq!(last_success_gauge(&file, path), None);
    // Until a run succeeds, every firing runs.
    let ran = once(&appends(&log));
    ran.assert_code(0);
    assert!(ran.one_error_line().ends_with("is not recent"));
    assert_eq!(runs(&log), 2);
    let rec = record(s.zk(), path).unwrap();
    let start_ms = rec["last_success"]["start_ms"].as_i64().unwrap();
    assert!(start_ms <= now_ms(), "{rec}");
    assert_eq!(
        last_success_gauge(&file, path),
        Some(start_ms as f64 / 1000.0)
    );
    assert_skipped(&once(&appends(&log)), path);
    assert_eq!(runs(&log), 2);
}

#[test]
fn a_success_dated_ahead_within_the_window_is_recent() {
    let s = Scene::new("once-skew");
    let dir = TempDir::new();
    let file = dir.path().join("job.prom");
    let ahead = recorded_run(now_ms() + 600_000, 0, "leader-ahead");
    write_record(
        s.zk(),
        &s.path,
        serde_json::json!({"last_run": ahead, "last_success": ahead}),
    );
    let out = run_bounded(
        s.run()
            .args(["--once-per", "1h", "--metrics-file"])
            .arg(&file)
            .args(["--", "true"]),
        LONG,
    );
    assert_skipped(&out, &s.path);
    let line = out.one_error_line();
    assert!(
        line.contains(" last ran successfully 9m ")
            && line.contains(" in the future by the server's clock, on leader-ahead"),
        "{line}"
    );
    // Exported as now at the latest, never as the future date.
    let exported = last_success_gauge(&file, &s.path).expect("a last success");
    assert!(exported <= now_ms() as f64 / 1000.0, "{exported}");
    assert!(exported > (now_ms() - 60_000) as f64 / 1000.0, "{exported}");
}

#[test]
fn retry_after_holds_a_failed_job_back() {
    let s = Scene::new("once-retry");
    let path = &s.path;
    let dir = TempDir::new();
    let log = dir.path().join("runs");
    let once = |retry: &str, script: &str| {
        run_bounded(
            s.run()
                .args(["--once-per", "1h", "--retry-after", retry, "-c", script]),
            LONG,
        )
    };
    once("1h", &format!("{}; exit 3", appends(&log))).assert_code(3);
    let failed = record(s.zk(), path).unwrap()["last_run"].clone();
    let failed_ms = failed["start_ms"].as_i64().unwrap();
    // Any other host firing within the hour skips, as a recent success would.
    let skipped = once("1h", &appends(&log));
    skipped.assert_code(75);
    let line = skipped.one_error_line();
    let retry_at = humantime::format_rfc3339_millis(
        std::time::UNIX_EPOCH + Duration::from_millis(failed_ms as u64 + 3_600_000),
    );
    assert!(
        line.starts_with(&format!("zklock: not running: {path} last ran "))
            && line.contains(&format!(
                " at {} (fencing token ",
                failed["start"].as_str().unwrap()
            ))
            && line.ends_with(&format!(
                ", and failed (exit status 3); --retry-after 1h: next try at the first firing after {retry_at}"
            )),
        "{line}"
    );
    assert_eq!(runs(&log), 1);
    let quiet = run_bounded(
        s.run()
            .args(["-q", "-E", "9", "--once-per", "1h", "--retry-after", "1h"])
            .args(["--", "true"]),
        LONG,
    );
    quiet.assert_code(9);
    assert_eq!(quiet.stderr, "");
    // Without --retry-after the next firing retries at once, as before.
    // With a short one, runs are skipped until it has passed since the
    // failed run started, on the server's clock.
    let deadline = Instant::now() + LONG;
    loop {
        let out = once("2s", &appends(&log));
        if out.code() == 0 {
            break;
        }
        out.assert_code(75);
        assert!(Instant::now() < deadline, "still skipped: {}", out.stderr);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(runs(&log), 2);
    let rec = record(s.zk(), path).unwrap();
    let retried_ms = rec["last_success"]["start_ms"].as_i64().unwrap();
    assert!(retried_ms - failed_ms >= 2000, "{failed_ms} then {rec}");
    // A success ends the wait: the window decides again.
    assert_skipped(&once("1h", &appends(&log)), path);

    // A failure recorded 30 minutes ago: held back by 1h, not by 20m.
    let other = unique_path("once-retry-hand");
    write_record(
        s.zk(),
        &other,
        serde_json::json!({"last_run": recorded_run(now_ms() - 1_800_000, 1, "web7")}),
    );
    let run = |retry: &str| {
        run_bounded(
            zklock_run(&s.connect, &other).args([
                "--once-per",
                "1h",
                "--retry-after",
                retry,
                "--",
                "true",
            ]),
            LONG,
        )
    };
    run("1h").assert_code(75);
    run("20m").assert_code(0);

    let refused = run_bounded(s.run().args(["--retry-after", "1h", "--", "true"]), LONG);
    refused.assert_code(64);
    assert!(
        refused.one_error_line().contains("--once-per"),
        "{}",
        refused.stderr
    );
}

#[test]
fn max_runtime_terminates_then_kills() {
    let s = Scene::new("max-runtime");
    let out = run_bounded(
        s.run().args([
            "--max-runtime",
            "1s",
            "--kill-after",
            "2s",
            "--",
            "sleep",
            "30",
        ]),
        LONG,
    );
    out.assert_code(124);
    assert!(out.elapsed >= Duration::from_secs(1), "{:?}", out.elapsed);
    assert!(
        out.elapsed < Duration::from_secs(6),
        "TERM ends sleep: {:?}",
        out.elapsed
    );
    assert!(
        out.one_error_line().contains("--max-runtime 1s"),
        "{}",
        out.stderr
    );
    s.assert_no_lock_nodes();

    // A command that ignores TERM gets KILL --kill-after later.
    let stubborn = run_bounded(
        s.run()
            .args(["--max-runtime", "0.5", "--kill-after", "1s"])
            .args(["-c", "trap '' TERM; sleep 30"]),
        LONG,
    );
    stubborn.assert_code(124);
    assert!(
        stubborn.elapsed >= Duration::from_millis(1500),
        "{:?}",
        stubborn.elapsed
    );
    assert!(
        stubborn.elapsed < Duration::from_secs(8),
        "{:?}",
        stubborn.elapsed
    );
    s.assert_no_lock_nodes();

    // Waiting for the lock does not count.
    let dir = TempDir::new();
    let go = dir.path().join("go");
    let mut holder = KillOnDrop(
        s.run()
            .args([
                "-c",
                &format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display()),
            ])
            .spawn()
            .unwrap(),
    );
    wait_for_contenders(s.zk(), &s.path, "-lock-", 1);
    let mut waiter = KillOnDrop(
        s.run()
            .args(["--max-runtime", "1s", "--", "true"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_contenders(s.zk(), &s.path, "-lock-", 2);
    std::thread::sleep(Duration::from_millis(1500)); // longer than --max-runtime, while waiting
    std::fs::write(&go, "").unwrap();
    assert_eq!(wait_for_exit(&mut holder, LONG).unwrap().code(), Some(0));
    assert_eq!(wait_for_exit(&mut waiter, LONG).unwrap().code(), Some(0));
}

#[test]
fn zero_max_runtime_is_no_limit_and_zero_connect_timeout_is_refused() {
    let s = Scene::new("zero-durations");
    let connect = &s.connect;
    // As in timeout(1): 0 is no limit.
    let out = run_bounded(
        s.run()
            .args(["--max-runtime", "0", "-c", "sleep 0.5; echo done"]),
        LONG,
    );
    out.assert_code(0);
    assert_eq!(out.stdout, "done\n");
    assert_eq!(out.stderr, "");
    s.assert_no_lock_nodes();
    // Refused before connecting, flag or config file.
    let out = run_bounded(
        s.run().args(["--connect-timeout", "0s", "--", "true"]),
        LONG,
    );
    out.assert_code(64);
    assert!(
        out.one_error_line().contains("connect timeout of 0"),
        "{}",
        out.stderr
    );
    let dir = TempDir::new();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!("[ensembles.z]\nhosts = \"{connect}\"\nconnect-timeout = \"0\"\n"),
    )
    .unwrap();
    let out = run_bounded(
        zklock()
            .args(["status", "-z", "@z", "--config"])
            .arg(&config)
            .arg(&s.path),
        LONG,
    );
    out.assert_code(64);
    assert!(
        out.one_error_line().contains("connect timeout of 0"),
        "{}",
        out.stderr
    );
}

/// Parses a Prometheus text-format file strictly enough to catch a torn or
/// malformed one: every sample follows its `# HELP` and `# TYPE` lines,
/// label values are quoted and every value is a number. Returns the samples
/// by `name{labels}`.
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    assert!(text.ends_with('\n'), "incomplete: {text:?}");
    let mut samples = BTreeMap::new();
    let mut help = None;
    let mut typed = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split(' ').next().unwrap().to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert_eq!(kind, "gauge", "{line}");
            assert_eq!(help.as_deref(), Some(name), "HELP before TYPE: {line}");
            typed = Some(name.to_owned());
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("name value");
        let (name, labels) = series.split_once('{').expect("labels");
        assert_eq!(typed.as_deref(), Some(name), "TYPE before samples: {line}");
        let labels = labels.strip_suffix('}').expect("closing brace");
        for pair in labels.split("\",") {
            let (key, value) = pair.split_once("=\"").expect("key=\"value\"");
            assert!(
                key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{line}"
            );
            assert!(
                !value.trim_end_matches('"').contains('"') || value.contains("\\\""),
                "{line}"
            );
        }
        let value: f64 = value.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
        samples.insert(series.to_owned(), value);
    }
    samples
}

fn outcome_of(samples: &BTreeMap<String, f64>, path: &str) -> String {
    let ones: Vec<&String> = samples
        .iter()
        .filter(|(k, v)| k.starts_with("zklock_outcome{") && **v == 1.0)
        .map(|(k, _)| k)
        .collect();
    assert_eq!(ones.len(), 1, "{samples:?}");
    assert_eq!(
        samples
            .keys()
            .filter(|k| k.starts_with("zklock_outcome{"))
            .count(),
        6
    );
    let prefix = format!("zklock_outcome{{path=\"{path}\",outcome=\"");
    ones[0]
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix("\"}"))
        .unwrap_or_else(|| panic!("{ones:?}"))
        .to_owned()
}

#[test]
fn metrics_file_for_each_outcome() {
    let s = Scene::new("metrics");
    let path = &s.path;
    let dir = TempDir::new();
    let file = dir.path().join("job.prom");
    let file_arg = file.to_str().unwrap().to_owned();
    let run = |args: &[&str]| {
        let out = run_bounded(s.run().args(["--metrics-file", &file_arg]).args(args), LONG);
        let text = std::fs::read_to_string(&file).expect("metrics file written");
        (out, parse_metrics(&text))
    };
    let gauge = |samples: &BTreeMap<String, f64>, name: &str| {
        samples.get(&format!("{name}{{path=\"{path}\"}}")).copied()
    };

    let (out, m) = run(&["--once-per", "1h", "--", "true"]);
    out.assert_code(0);
    assert_eq!(outcome_of(&m, path), "ran");
    assert_eq!(gauge(&m, "zklock_exit_status"), Some(0.0));
    assert!(gauge(&m, "zklock_fencing_token").unwrap() > 0.0);
    assert!(gauge(&m, "zklock_wait_seconds").unwrap() >= 0.0);
    assert!(gauge(&m, "zklock_held_seconds").unwrap() >= 0.0);
    let rec = record(s.zk(), path).unwrap();
    let success = rec["last_success"]["start_ms"].as_i64().unwrap() as f64 / 1000.0;
    assert_eq!(
        gauge(&m, "zklock_last_success_timestamp_seconds"),
        Some(success)
    );

    let (out, m) = run(&["--once-per", "1h", "--", "true"]);
    out.assert_code(75);
    assert_eq!(outcome_of(&m, path), "skipped");
    assert_eq!(gauge(&m, "zklock_exit_status"), Some(75.0));
    assert_eq!(
        gauge(&m, "zklock_last_success_timestamp_seconds"),
        Some(success)
    );

    let (out, m) = run(&["--max-runtime", "0.2", "--", "sleep", "30"]);
    out.assert_code(124);
    assert_eq!(outcome_of(&m, path), "timed-out");
    // Without --once-per a failure keeps the last success of the file.
    assert_eq!(
        gauge(&m, "zklock_last_success_timestamp_seconds"),
        Some(success)
    );

    let (out, m) = run(&["--", "/nonexistent/command"]);
    out.assert_code(127);
    assert_eq!(outcome_of(&m, path), "error");
    assert_eq!(gauge(&m, "zklock_exit_status"), Some(127.0));

    let (out, m) = run(&["--", "sh", "-c", "exit 3"]);
    out.assert_code(3);
    assert_eq!(outcome_of(&m, path), "ran");
    assert_eq!(gauge(&m, "zklock_exit_status"), Some(3.0));

    // Held elsewhere: not acquired, no token.
    let dir2 = TempDir::new();
    let go = dir2.path().join("go");
    let mut holder = KillOnDrop(
        s.run()
            .args([
                "-c",
                &format!("while [ ! -e '{}' ]; do sleep 0.05; done", go.display()),
            ])
            .spawn()
            .unwrap(),
    );
    wait_for_contenders(s.zk(), path, "-lock-", 1);
    let (out, m) = run(&["-n", "--", "true"]);
    out.assert_code(75);
    assert_eq!(outcome_of(&m, path), "not-acquired");
    assert_eq!(gauge(&m, "zklock_fencing_token"), None);
    // A signal while waiting ends it too, and the file is still written.
    let mut waiting = KillOnDrop(
        s.run()
            .args(["--metrics-file", &file_arg, "--", "true"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_contenders(s.zk(), path, "-lock-", 2);
    signal(waiting.id() as i32, libc::SIGTERM);
    assert_eq!(wait_for_exit(&mut waiting, LONG).unwrap().code(), Some(143));
    let m = parse_metrics(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(outcome_of(&m, path), "not-acquired");
    assert_eq!(gauge(&m, "zklock_exit_status"), Some(143.0));
    std::fs::write(&go, "").unwrap();
    wait_for_exit(&mut holder, LONG).unwrap();

    // Lost: the node is deleted under the running command.
    let started = dir2.path().join("started");
    let mut lost = KillOnDrop(
        s.run()
            .args(["--metrics-file", &file_arg, "--kill-after", "1s"])
            .args([
                "-c",
                &format!("touch '{}'; exec sleep 30", started.display()),
            ])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(wait_for_file(&started, LONG));
    let nodes = wait_for_contenders(s.zk(), path, "-lock-", 1);
    assert!(s.zk().delete(&nodes[0]));
    assert_eq!(wait_for_exit(&mut lost, LONG).unwrap().code(), Some(76));
    let m = parse_metrics(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(outcome_of(&m, path), "lost");
    assert_eq!(gauge(&m, "zklock_exit_status"), Some(76.0));
}

#[test]
fn metrics_file_labels_are_escaped_and_unwritable_dirs_refused() {
    let dir = TempDir::new();
    // Refused before connecting: the ensemble here does not exist.
    let out = run_bounded(
        zklock_run("127.0.0.1:1", "/it/metrics-refused").args([
            "--metrics-file",
            "/nonexistent-dir/x.prom",
            "--",
            "true",
        ]),
        LONG,
    );
    out.assert_code(64);
    assert!(
        out.one_error_line().contains("/nonexistent-dir/x.prom"),
        "{}",
        out.stderr
    );
    let out = run_bounded(
        zklock_run("127.0.0.1:1", "/it/metrics-refused").args([
            "--metrics-file",
            dir.path().to_str().unwrap(),
            "--",
            "true",
        ]),
        LONG,
    );
    out.assert_code(64);

    let connect = shared_server().connect_string();
    let path = format!("{}/a\"b\\c", unique_path("metrics-label"));
    let file = dir.path().join("label.prom");
    run_bounded(
        zklock_run(&connect, &path).args(["--metrics-file", file.to_str().unwrap(), "--", "true"]),
        LONG,
    )
    .assert_code(0);
    let text = std::fs::read_to_string(&file).unwrap();
    let escaped = path.replace('\\', "\\\\").replace('"', "\\\"");
    let m = parse_metrics(&text);
    assert_eq!(outcome_of(&m, &escaped), "ran");
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["label.prom"]);
}

#[test]
fn metrics_file_is_replaced_atomically() {
    let s = Scene::new("metrics-atomic");
    let path = &s.path;
    let dir = TempDir::new();
    let file = dir.path().join("atomic.prom");
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (file, stop, path) = (file.clone(), Arc::clone(&stop), path.clone());
        std::thread::spawn(move || {
            let mut complete = 0;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(text) = std::fs::read_to_string(&file) {
                    let samples = parse_metrics(&text);
                    outcome_of(&samples, &path);
                    assert!(text.contains("zklock_held_seconds{"), "{text}");
                    complete += 1;
                }
            }
            complete
        })
    };
    for i in 0..8 {
        let out = run_bounded(
            s.run()
                .args(["--metrics-file", file.to_str().unwrap()])
                .args(["-c", &format!("exit {}", i % 2)]),
            LONG,
        );
        assert_eq!(out.code(), i % 2);
    }
    stop.store(true, Ordering::Relaxed);
    let complete = reader.join().expect("every read saw a complete file");
    assert!(complete > 0);
}

#[test]
fn metrics_file_not_named_prom_is_warned_about() {
    let s = Scene::new("metrics-name");
    let dir = TempDir::new();
    let txt = dir.path().join("job.txt");
    let out = run_bounded(
        s.run().arg("--metrics-file").arg(&txt).args(["--", "true"]),
        LONG,
    );
    out.assert_code(0);
    assert_eq!(
        out.one_error_line(),
        format!(
            "zklock: --metrics-file {} does not end in .prom: node_exporter's textfile \
             collector reads only *.prom files",
            txt.display()
        )
    );
    // Written all the same; -q (a name chosen on purpose) hides the line.
    assert!(parse_metrics(&std::fs::read_to_string(&txt).unwrap()).len() > 6);
    for (file, quiet) in [(txt.clone(), true), (dir.path().join("job.prom"), false)] {
        let mut cmd = s.run();
        if quiet {
            cmd.arg("-q");
        }
        let out = run_bounded(
            cmd.arg("--metrics-file").arg(&file).args(["--", "true"]),
            LONG,
        );
        out.assert_code(0);
        assert_eq!(out.stderr, "", "{file:?}");
    }
}
