//! Issue 37: a stalled server (its JVM stopped, as a long fsync or a GC
//! pause would) is not a lost connection: the lease decides when the command
//! must stop. A stall the lease covers keeps the lock even under
//! `--on-disconnect kill`; a stall past the lease deadline stops the command
//! before the session can expire and a waiter on another member starts.

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{
    Ensemble, KillOnDrop, ServerOptions, TempDir, ZkServer, interval, recording, stamped_start,
    unique_path, wait_for_exit, wait_for_file, zklock_run,
};

#[test]
fn a_stall_the_lease_covers_keeps_the_lock_under_on_disconnect_kill() {
    let mut server = ZkServer::start();
    let dir = TempDir::new();
    let started = dir.path().join("started");
    let body = format!("touch '{}'; sleep 8", started.display());
    // T = 15 s, K = 0.5 s: a lease of 13.65 s that leaves a stall at least
    // 5.9 s (lease - 2 proof lags), and a C of 3 s: the stall is longer.
    let mut run = zklock_run(&server.connect_string(), &unique_path("stall"));
    run.args(["--session-timeout", "15s", "--kill-after", "500ms"])
        .args(["--on-disconnect", "kill", "-v", "--", "sh", "-c", &body])
        .stderr(Stdio::piped());
    let mut child = KillOnDrop(run.spawn().expect("spawn zklock"));
    assert!(
        wait_for_file(&started, Duration::from_secs(30)),
        "never ran"
    );
    server.pause();
    std::thread::sleep(Duration::from_millis(4500));
    server.resume();
    let status = wait_for_exit(&mut child, Duration::from_secs(30)).expect("zklock ends");
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn a_stall_past_the_lease_deadline_stops_the_command_before_the_session_can_expire() {
    let mut ensemble = Ensemble::start_with(3, ServerOptions::production());
    let leader = ensemble.leader();
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let dir = TempDir::new();
    let log = dir.path().join("intervals.log");
    fs::write(&log, "").unwrap();
    let path = unique_path("stall-past");
    let spawn = |member: usize, script: &str| {
        let mut run = zklock_run(&ensemble.member_connect_string(member), &path);
        run.args(["--session-timeout", "4s", "-v", "--", "bash", "-c", script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        KillOnDrop(run.spawn().expect("spawn zklock"))
    };
    let mut holder = spawn(followers[0], &recording(&log, "H"));
    let began = Instant::now();
    while interval(&fs::read_to_string(&log).unwrap(), "H").is_none() {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the holder never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut waiter = spawn(followers[1], &stamped_start(&log, "W"));
    // The waiter queues behind the holder.
    std::thread::sleep(Duration::from_secs(2));
    ensemble.pause(followers[0]);
    let waited = Instant::now();
    while interval(&fs::read_to_string(&log).unwrap(), "W").is_none() {
        assert!(
            waited.elapsed() < Duration::from_secs(40),
            "the waiter never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = wait_for_exit(&mut holder, Duration::from_secs(30)).expect("the holder ends");
    ensemble.resume(followers[0]);
    let _ = wait_for_exit(&mut waiter, Duration::from_secs(30));
    let mut stderr = String::new();
    std::io::Read::read_to_string(holder.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let text = fs::read_to_string(&log).unwrap();
    let (_, held_until) = interval(&text, "H").unwrap();
    let (waiter_start, _) = interval(&text, "W").unwrap();
    assert!(held_until < waiter_start, "{text}\n{stderr}");
    assert_eq!(status.code(), Some(76), "{stderr}");
}
