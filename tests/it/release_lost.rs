//! Issue 37: a run whose lock is found lost only after its command ended
//! (here our node deleted while zklock was stopped, and the command ending
//! meanwhile) is not a success: its end may have come after another
//! holder's start. The release finds the node gone: exit 76.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{
    Inspector, KillOnDrop, TempDir, pid_alive, shared_server, signal, unique_path, wait_for_exit,
    wait_for_file, zklock_run,
};

#[test]
fn a_lock_found_lost_at_the_release_is_a_lost_run() {
    let (status, stderr) = lost_while_stopped(&[]);
    assert_eq!(status, Some(76), "{stderr}");
    assert!(stderr.contains("lock lost"), "{stderr}");
}

/// With a run to record, the record and the metrics file say it too.
#[test]
fn a_lock_found_lost_after_the_command_is_recorded_as_lost() {
    let dir = TempDir::new();
    let metrics = dir.path().join("zklock.prom");
    let metrics = metrics.to_str().unwrap();
    let (status, stderr) = lost_while_stopped(&["--once-per", "1h", "--metrics-file", metrics]);
    assert_eq!(status, Some(76), "{stderr}");
    let text = std::fs::read_to_string(metrics).unwrap();
    assert!(text.contains("zklock_exit_status{"), "{text}");
    assert!(
        (text.lines()).any(|l| l.starts_with("zklock_exit_status{") && l.ends_with(" 76")),
        "{text}"
    );
}

/// A run whose node is deleted while zklock is stopped and whose command
/// ends meanwhile: its exit status and stderr.
fn lost_while_stopped(args: &[&str]) -> (Option<i32>, String) {
    let server = shared_server();
    let dir = TempDir::new();
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    let body = format!(
        "echo $$ > '{s}.tmp' && mv '{s}.tmp' '{s}'; while [ ! -e '{g}' ]; do sleep 0.01; done",
        s = started.display(),
        g = go.display()
    );
    let path = unique_path("release-lost");
    let mut run = zklock_run(&server.connect_string(), &path);
    run.args(args)
        .args(["-v", "--", "sh", "-c", &body])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut zklock = KillOnDrop(run.spawn().expect("spawn zklock"));
    assert!(
        wait_for_file(&started, Duration::from_secs(30)),
        "never ran"
    );
    let command: i32 = std::fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Let the lease set its watch, then stop zklock (its keeper runs on).
    std::thread::sleep(Duration::from_millis(300));
    let pid = zklock.id() as i32;
    signal(pid, libc::SIGSTOP);
    let inspector = Inspector::connect(&server.connect_string());
    for child in inspector.children(&path) {
        assert!(inspector.delete(&format!("{path}/{child}")));
    }
    std::fs::write(&go, "").unwrap();
    let ended = Instant::now();
    while pid_alive(command) {
        assert!(
            ended.elapsed() < Duration::from_secs(10),
            "the command runs on"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    signal(pid, libc::SIGCONT);
    let status = wait_for_exit(&mut zklock, Duration::from_secs(30)).expect("zklock ends");
    let mut stderr = String::new();
    zklock
        .stderr
        .as_mut()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code(), stderr)
}
