//! No usable ZooKeeper: exit 69 within `--connect-timeout`, with one clear line; and a
//! signal while connecting ends zklock at once.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use crate::harness::{KillOnDrop, run_bounded, signal, wait_for_exit, wait_until, zklock};

const LONG: Duration = Duration::from_secs(30);

/// Runs `zklock run` against `connect` with a 1 s connect timeout and checks the outcome.
fn gives_up_within_connect_timeout(connect: &str) {
    let mut cmd = zklock();
    cmd.args(["run", "-z", connect, "--connect-timeout", "1s"])
        .args(["/it/connect", "--", "true"]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(69);
    let line = out.one_error_line();
    assert!(line.contains(connect), "{line}");
    assert!(
        out.elapsed >= Duration::from_millis(950) && out.elapsed < Duration::from_secs(10),
        "gave up after {:?} with --connect-timeout 1s",
        out.elapsed
    );
}

#[test]
fn closed_port_exits_69_after_connect_timeout() {
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    gives_up_within_connect_timeout(&closed.to_string());
}

#[test]
fn silent_port_exits_69_after_connect_timeout() {
    // The kernel accepts connections into the backlog; nobody ever answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    gives_up_within_connect_timeout(&silent.local_addr().unwrap().to_string());
    drop(silent);
}

#[test]
fn signal_while_connecting_exits_128_plus_n_at_once() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    silent.set_nonblocking(true).unwrap();
    let mut cmd = zklock();
    cmd.args(["run", "-z", &silent.local_addr().unwrap().to_string()])
        .args(["--connect-timeout", "60s", "/it/connect", "--", "true"]);
    let mut zklock = KillOnDrop(cmd.spawn().expect("spawn zklock"));
    // Keep the accepted socket open: zklock is then waiting for a handshake reply.
    let mut accepted = None;
    wait_until(LONG, "zklock connects", || {
        accepted = silent.accept().ok();
        accepted.is_some()
    });

    let sent = Instant::now();
    signal(zklock.id() as i32, libc::SIGINT);
    let status = wait_for_exit(&mut zklock, LONG).expect("zklock still running");
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{status}");
    assert!(
        took < Duration::from_secs(2),
        "SIGINT while connecting took {took:?}"
    );
}

/// Issue 20: a host name that does not resolve ends at once, naming the host.
#[test]
fn unresolvable_host_exits_69_at_once_naming_it() {
    let mut cmd = zklock();
    cmd.args([
        "run",
        "-z",
        "nonexistent.invalid:2181",
        "--connect-timeout",
        "30s",
    ])
    .args(["/it/connect", "--", "true"]);
    let out = run_bounded(&mut cmd, LONG * 2);
    out.assert_code(69);
    let line = out.one_error_line();
    assert!(
        line.contains("cannot resolve nonexistent.invalid"),
        "{line}"
    );
    assert!(
        out.elapsed < Duration::from_secs(10),
        "took {:?} with --connect-timeout 30s",
        out.elapsed
    );
}

/// `-v` names the member the session was opened on, not the whole list.
#[test]
fn verbose_names_the_member_connected_to() {
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let live = crate::harness::shared_server().connect_string();
    let mut cmd = zklock();
    cmd.args(["run", "-v", "-z", &format!("{closed},{live}")])
        .args([&crate::harness::unique_path("connect-member"), "--", "true"]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(0);
    let line = (out.stderr.lines())
        .find(|line| line.contains("connected to "))
        .unwrap_or_else(|| panic!("no `connected to` line in {:?}", out.stderr));
    assert!(
        line.contains(&format!("connected to {live} (session")),
        "{line}"
    );
}
