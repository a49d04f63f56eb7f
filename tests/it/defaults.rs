//! Issue 9, item 5: defaults and timeouts that agree with each other.
//!
//! An unset `--kill-after` fits the granted session; a positive `--timeout` never
//! does worse than `--no-wait`; a command that cannot run is refused before
//! connecting.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::harness::{
    Gated, Inspector, Scene, ServerOptions, TempDir, ZkServer, assert_no_lock_nodes,
    assert_no_nodes, run_bounded, shared_server, unique_path, zklock, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// The `-v` line that names the --kill-after chosen, after a successful run.
fn chosen_kill_after(connect: &str, session_timeout: Option<&str>) -> String {
    let path = unique_path("default-kill-after");
    let mut cmd = zklock_run(connect, &path);
    cmd.arg("-v");
    if let Some(t) = session_timeout {
        cmd.args(["--session-timeout", t]);
    }
    let out = run_bounded(cmd.args(["--", "true"]), LONG);
    out.assert_code(0);
    out.stderr
        .lines()
        .find(|l| l.contains("--kill-after not given"))
        .unwrap_or_else(|| panic!("-v does not say which --kill-after: {}", out.stderr))
        .to_owned()
}

#[test]
fn unset_kill_after_fits_every_granted_session() {
    let connect = shared_server().connect_string();
    // The chosen value is the largest that fits (lease.rs), in 10 ms steps, at most
    // 5 s; at 1 s nothing is left to reconnect in, and half of what is left before
    // the expiry goes to --kill-after.
    for (t, shown, expected) in [
        ("1s", "1s", "190ms"),
        ("2s", "2s", "90ms"),
        ("4s", "4s", "1s 640ms"),
        ("10s", "10s", "5s"),
        ("60s", "1m", "5s"),
    ] {
        let line = chosen_kill_after(&connect, Some(t));
        assert!(
            line.contains(&format!("--kill-after not given: {expected} ")),
            "{t}: {line}"
        );
        assert!(line.contains(&format!("a {shown} session")), "{t}: {line}");
        let reason = match t {
            "1s" => "leaves no room to reconnect in",
            "10s" | "60s" => "the default",
            _ => "the most",
        };
        assert!(line.contains(reason), "{t}: {line}");
    }
}

/// `--on-disconnect kill` leaves the same room as lease mode: a kill-mode
/// lease of C alone (1 s of a 4 s session) was shorter than the proof lag
/// (1.1 s), so a healthy holder's confirmations never caught up and its
/// command was stopped with 76 about a second in.
#[test]
fn a_healthy_kill_mode_holder_keeps_its_lock_past_the_lag() {
    let path = unique_path("kill-mode-lease");
    let mut cmd = zklock_run(&shared_server().connect_string(), &path);
    cmd.args(["-v", "--session-timeout", "4s", "--on-disconnect", "kill"])
        .args(["--", "sleep", "3"]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(0);
    assert!(
        out.stderr.contains("--kill-after not given: 1s 640ms "),
        "{}",
        out.stderr
    );
}

#[test]
fn unset_kill_after_fits_a_session_shorter_than_asked() {
    let server = ZkServer::start_with(ServerOptions {
        max_session_timeout: Duration::from_secs(3),
        ..ServerOptions::default()
    });
    let connect = server.connect_string();
    // The default 10 s is asked for, 3 s granted.
    let line = chosen_kill_after(&connect, None);
    assert!(line.contains("a 3s session"), "{line}");
    assert!(line.contains("--kill-after not given: 640ms "), "{line}");

    // A value the user gave that does not fit the granted session is refused.
    let path = unique_path("granted-short");
    let out = run_bounded(
        zklock_run(&connect, &path).args(["--kill-after", "2s", "--", "true"]),
        LONG,
    );
    out.assert_code(64);
    let line = out.one_error_line();
    assert!(line.contains("granted a shorter session (3s)"), "{line}");
    assert!(line.contains("--kill-after 2s"), "{line}");
    assert_no_nodes(&Inspector::connect(&connect), &path);
}

#[test]
fn tiny_timeout_takes_a_free_lock_like_no_wait() {
    let connect = shared_server().connect_string();
    let base = unique_path("tiny-timeout");
    for run in 0..10 {
        let path = format!("{base}/{run}");
        for wait in [["-w", "0"], ["-w", "1ms"], ["-w", "0.001"]] {
            let out = run_bounded(
                zklock_run(&connect, &path).args(wait).arg("--").arg("true"),
                LONG,
            );
            assert_eq!(out.code(), 0, "run {run} {wait:?}: {}", out.stderr);
        }
    }
    // A semaphore with a free permit, and a shared lock.
    for kind in [&["--limit", "2"][..], &["-s"]] {
        let path = format!("{base}/kind{}", kind.len());
        let out = run_bounded(
            zklock_run(&connect, &path)
                .args(kind)
                .args(["-w", "1ms", "--", "true"]),
            LONG,
        );
        assert_eq!(out.code(), 0, "{kind:?}: {}", out.stderr);
    }
    // Several free paths: all of them, as --no-wait would.
    let out = run_bounded(
        zklock_run(&connect, &format!("{base}/a"))
            .arg(format!("{base}/b"))
            .args(["-w", "1ms", "--", "true"]),
        LONG,
    );
    assert_eq!(out.code(), 0, "{}", out.stderr);
    assert_no_lock_nodes(&Inspector::connect(&connect), &base);
}

#[test]
fn tiny_timeout_still_gives_up_on_a_held_lock() {
    let s = Scene::new("tiny-timeout-held");
    let holder = Gated::start(s.run());
    let out = run_bounded(s.run().args(["-w", "1ms", "--", "true"]), LONG);
    out.assert_code(75);
    assert!(holder.finish().success());
}

#[test]
fn a_command_that_cannot_run_is_refused_before_waiting() {
    let s = Scene::new("cannot-run");
    // Held, and no --timeout: before resolving the command first, each case below
    // waited here forever.
    let holder = Gated::start(s.run());
    let dir = TempDir::new();
    let not_executable = dir.path().join("deploy.sh");
    std::fs::write(&not_executable, "#!/bin/sh\ntrue\n").unwrap();
    std::fs::set_permissions(&not_executable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let missing = dir.path().join("depoly.sh");
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: [(&str, Vec<String>, Env, i32); 5] = [
        (
            "typo",
            vec!["--".into(), missing.display().to_string()],
            &[],
            127,
        ),
        (
            "not on PATH",
            vec!["--".into(), "zklock-no-such-command".into()],
            &[],
            127,
        ),
        (
            "not executable",
            vec!["--".into(), not_executable.display().to_string()],
            &[],
            126,
        ),
        (
            "a directory",
            vec!["--".into(), dir.path().display().to_string()],
            &[],
            126,
        ),
        (
            "-c with a missing shell",
            vec!["-c".into(), "true".into()],
            &[("SHELL", "/nonexistent/sh")],
            127,
        ),
    ];
    for (why, command, env, code) in cases {
        let mut cmd = s.run();
        cmd.args(&command).envs(env.iter().copied());
        let out = run_bounded(&mut cmd, LONG);
        assert_eq!(out.status.code(), Some(code), "{why}: {}", out.stderr);
        let line = out.one_error_line();
        assert!(line.contains("cannot run"), "{why}: {line}");
        assert!(
            out.elapsed < Duration::from_secs(5),
            "{why}: took {:?}",
            out.elapsed
        );
    }
    assert_eq!(s.zk().children(&s.path).len(), 1, "only the holder's node");
    assert!(holder.finish().success());

    // Before connecting: with no ZooKeeper at all, still 127 at once.
    let out = run_bounded(
        zklock()
            .args(["run", "-z", "127.0.0.1:1", "/it/cannot-run", "--"])
            .arg(&missing),
        LONG,
    );
    out.assert_code(127);
}
