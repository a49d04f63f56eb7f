//! `zklock hold` under faults and contention (docs/design.md, "Holds"): a
//! session lost at the fault proxy terminates the bound shell; another user
//! can neither release nor reach a hold; holds and runs of one path exclude
//! each other.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::harness::{
    FaultProxy, Inspector, KillOnDrop, LockLog, Mode, shared_server, signal, wait_for_file,
    wait_until,
};
use crate::hold::{LONG, Place, read};

#[test]
fn a_session_lost_at_the_proxy_terminates_the_bound_shell() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let place = Place::at(&proxy.connect_string(), "hold-blackhole");
    let mut shell = place.spawn(
        r#"trap 'echo term > "$OUT/term"; exit 143' TERM
                eval "$("$ZKLOCK" hold --session-timeout 3s -z "$ZK" "$P")"
                echo held > "$OUT/held"
                while true; do sleep 0.1; done"#,
    );
    assert!(wait_for_file(place.file("held"), LONG));
    proxy.set_mode(Mode::Blackhole);
    let status = shell.0.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert_eq!(read(&place.file("term")), "term\n");
    proxy.set_mode(Mode::Pass);
    place.assert_clean(&zk);
}

/// Acting as another user needs root, which the suite has here and in
/// CI's container: a run without it fails rather than passes untested.
fn assert_root() {
    assert!(
        rustix::process::getuid().is_root(),
        "this test needs root, to act as another user (setpriv); run the suite as root"
    );
}

/// `command` as user nobody.
fn as_nobody(command: &[&str]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(command);
    cmd
}

/// A client of the control socket that sends a request (`release`,
/// `paths`) and prints the answer (`b''` for none: the connection closed or
/// reset).
const ASK: &str = r"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
try:
    s.sendall(sys.argv[2].encode() + b'\n')
    answer = s.recv(100)
except (BrokenPipeError, ConnectionResetError):
    answer = b''
print(repr(answer))
";

#[test]
fn another_user_can_neither_release_nor_reach_a_hold() {
    assert_root();
    let place = Place::new("hold-other-user");
    let zk = place.zk();
    let hold =
        place.run(r#""$ZKLOCK" hold --until-released --max-hold 10m --format json -z "$ZK" "$P""#);
    hold.assert_code(0);
    let vars: serde_json::Value = serde_json::from_str(&hold.stdout).unwrap();
    let socket = vars["ZKLOCK_HOLD"].as_str().unwrap().to_owned();
    // Through zklock: refused (its runtime directory is not theirs).
    let out = as_nobody(&[env!("CARGO_BIN_EXE_zklock"), "release"])
        .env("ZKLOCK_HOLD", &socket)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    assert!(!place.is_free(zk));
    // Directly on the socket, with the directory opened up: the holder
    // checks who asks and answers nothing.
    let dir = place.runtime_dir();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    let ask = ["/usr/bin/python3", "-c", ASK, &socket];
    // The client works: its own user gets an answer.
    let out = Command::new(ask[0])
        .args(&ask[1..])
        .arg("paths")
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(answer.contains(&place.path), "{out:?}");
    let out = as_nobody(&ask).arg("release").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "b''\n", "{out:?}");
    assert!(!place.is_free(zk));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    place.run(r#""$ZKLOCK" release "$P""#).assert_code(0);
    place.assert_clean(zk);
}

#[test]
fn holds_and_runs_of_one_path_exclude_each_other() {
    const WORKERS: usize = 4;
    const ROUNDS: usize = 6;
    let place = Place::new("hold-race");
    let zk = place.zk();
    let log = LockLog::new();
    let run_body = log.shell_body("sleep 0.02");
    let workers: Vec<KillOnDrop> = (0..WORKERS)
        .map(|worker| {
            let script = format!(
                r#"set -e
                for i in $(seq {ROUNDS}); do
                    if (( (i + {worker}) % 2 )); then
                        eval "$("$ZKLOCK" hold -z "$ZK" "$P")"
                        echo "start $ZKLOCK_FENCING_TOKEN $$" >> "$LOG"
                        sleep 0.02
                        echo "end $ZKLOCK_FENCING_TOKEN $$" >> "$LOG"
                        "$ZKLOCK" release
                    else
                        "$ZKLOCK" run -z "$ZK" "$P" -c "$RUN_BODY"
                    fi
                done"#
            );
            let mut cmd = place.bash(&script);
            cmd.env("LOG", log.path()).env("RUN_BODY", &run_body);
            KillOnDrop(cmd.spawn().unwrap())
        })
        .collect();
    for mut worker in workers {
        let status = worker.0.wait().unwrap();
        assert!(status.success(), "{status:?}\n{}", log.contents());
    }
    assert_eq!(log.starts(), WORKERS * ROUNDS, "{}", log.contents());
    log.assert_exclusive();
    log.assert_tokens_increase();
    wait_until(LONG, "the lock is free", || place.is_free(zk));
    place.assert_clean(zk);
}

/// A `zklock hold` waiting behind `place`'s holder, started directly (its
/// pid is the test's to signal), printing to `$OUT/OUTPUT`; returns once it
/// has queued.
fn waiting_hold(place: &Place, zk: &Inspector, output: &str) -> KillOnDrop {
    let waiter = place.spawn(&format!(
        r#"exec "$ZKLOCK" hold -z "$ZK" "$P" > "$OUT/{output}""#
    ));
    wait_until(LONG, "the waiter queued", || {
        zk.tree(&place.path).len() >= 2
    });
    waiter
}

#[test]
fn a_wait_ends_with_its_zklock_hold_ctrl_c_and_kill_alike() {
    let place = Place::new("hold-wait-signals");
    let zk = place.zk();
    let mut holder = place.held_by_a_shell();
    // The holder's node; a waiter makes 2.
    assert_eq!(zk.tree(&place.path).len(), 1);
    // Ctrl-C reaches `zklock hold`, which passes it on to its holder.
    let mut waiter = waiting_hold(&place, zk, "interrupted");
    signal(waiter.0.id() as i32, libc::SIGINT);
    assert_eq!(waiter.0.wait().unwrap().code(), Some(130));
    // For `eval`, as any hold that does not hold.
    assert_eq!(read(&place.file("interrupted")), "(exit 130)\n");
    wait_until(LONG, "the waiter's node is gone", || {
        zk.tree(&place.path).len() == 1
    });
    // Killed, its holder follows it (a parent-death signal).
    let mut waiter = waiting_hold(&place, zk, "killed");
    signal(waiter.0.id() as i32, libc::SIGKILL);
    let _ = waiter.0.wait();
    wait_until(LONG, "the waiter's node is gone", || {
        zk.tree(&place.path).len() == 1
    });
    // Killed, it prints nothing (docs/holds.md).
    assert_eq!(read(&place.file("killed")), "");
    signal(holder.0.id() as i32, libc::SIGKILL);
    let _ = holder.0.wait();
    place.assert_clean(zk);
}

#[test]
fn break_ends_a_hold_as_any_holder() {
    let place = Place::new("hold-break");
    let zk = place.zk();
    place
        .run(r#""$ZKLOCK" hold --until-released --max-hold 10m -z "$ZK" "$P" > "$OUT/vars""#)
        .assert_code(0);
    let out = place.run(r#""$ZKLOCK" break --yes -z "$ZK" "$P""#);
    out.assert_code(0);
    assert!(place.is_free(zk));
    let release = place.run(r#"eval "$(cat "$OUT/vars")"; "$ZKLOCK" release"#);
    release.assert_code(76);
    assert!(
        release
            .one_error_line()
            .contains("lost before this release"),
        "{}",
        release.stderr
    );
    place.assert_clean(zk);
}
