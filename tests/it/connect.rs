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

/// Issue 38: `--timeout` counts from the start, the connection included:
/// `-w 2s` with no member answering ends at 2 s (69), not at the connect
/// timeout (10 s by default).
#[test]
fn a_wait_limit_bounds_the_connection_too() {
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let mut cmd = zklock();
    cmd.args([
        "run",
        "-z",
        &closed,
        "-w",
        "2s",
        "/it/connect",
        "--",
        "true",
    ]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(69);
    let line = out.one_error_line();
    assert!(line.contains("before --timeout ran out"), "{line}");
    assert!(
        out.elapsed >= Duration::from_millis(1900) && out.elapsed < Duration::from_secs(6),
        "gave up after {:?} with -w 2s",
        out.elapsed
    );
}

/// Issue 38: a member that takes connections and drops them is tried about
/// once a second (a jittered pause after each round of members that
/// answered nothing), not every 100 ms.
#[test]
fn a_member_that_answers_nothing_is_tried_about_once_a_second() {
    let member = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = member.local_addr().unwrap().to_string();
    let mut cmd = zklock();
    cmd.args(["run", "-z", &address, "--connect-timeout", "3s"])
        .args(["/it/connect", "--", "true"]);
    let counting = std::thread::spawn(move || {
        member.set_nonblocking(true).unwrap();
        let (mut accepted, end) = (0, Instant::now() + Duration::from_secs(5));
        while Instant::now() < end {
            match member.accept() {
                Ok(_) => accepted += 1,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        accepted
    });
    run_bounded(&mut cmd, LONG).assert_code(69);
    let accepted = counting.join().unwrap();
    // Attempts at 0 s, then after pauses of 0.5 to 1.5 s each: 2 to 6 in
    // 3 s (the diagnosis after the last adds one).
    assert!((2..=7).contains(&accepted), "{accepted} connections in 3 s");
}

/// Issue 38: a server that answers the handshake with a 60 MiB packet
/// makes zklock reserve nothing of it: the packet is refused from its
/// length (the limit is 4 MiB by default), and zklock's peak memory stays
/// far below its size.
#[test]
fn a_packet_over_the_limit_is_refused_before_it_is_read() {
    use std::io::{Read, Write};
    const CLAIMED: usize = 60 << 20;
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = fake.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in fake.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut len = [0u8; 4];
                stream.read_exact(&mut len)?;
                let mut request = vec![0u8; u32::from_be_bytes(len) as usize];
                stream.read_exact(&mut request)?;
                stream.write_all(&(CLAIMED as u32).to_be_bytes())?;
                let chunk = vec![0u8; 1 << 20];
                for _ in 0..CLAIMED >> 20 {
                    stream.write_all(&chunk)?;
                }
                std::io::Result::Ok(())
            });
        }
    });
    let mut cmd = zklock();
    cmd.args(["run", "-z", &address, "--connect-timeout", "3s"])
        .args(["/it/connect", "--", "true"]);
    cmd.stderr(std::process::Stdio::null());
    let mut child = KillOnDrop(cmd.spawn().unwrap());
    let pid = child.0.id();
    let mut peak_kib = 0;
    let end = Instant::now() + Duration::from_secs(2);
    while Instant::now() < end {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let hwm = status.lines().find(|l| l.starts_with("VmHWM:"));
        let kib = hwm.and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok());
        peak_kib = peak_kib.max(kib.unwrap_or(0));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        peak_kib > 0 && peak_kib < 32 << 10,
        "zklock's peak RSS {peak_kib} KiB, reading a {CLAIMED}-byte packet"
    );
    let status = wait_for_exit(&mut child.0, LONG).expect("zklock ends");
    assert_eq!(status.code(), Some(69), "{status:?}");
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
