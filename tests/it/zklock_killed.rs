//! zklock killed outright (`kill -9`, as the OOM killer does): every process of the
//! command's process group goes with it, not only the command, so nothing of the old
//! command runs beside the next holder once the session expires.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{
    Inspector, KillGroupOnDrop, KillOnDrop, TempDir, read_pid_file, shared_server, signal,
    unique_path, wait_pid_gone, wait_until, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// The issue's bound, "gone within 1 s", with as much again as slack for a loaded
/// two-core machine (the time taken is printed).
const GONE_WITHIN: Duration = Duration::from_secs(2);

/// A short session, so that the oracle (no nodes left) does not wait long.
const SHORT_SESSION: [&str; 4] = ["--session-timeout", "4s", "--kill-after", "0.2s"];

/// Runs `sh -c SCRIPT sh DIR` under zklock, waits until each of `members` wrote its pid
/// file in DIR (`echo $$ > "$1/NAME"`), kills zklock with SIGKILL, and checks that every
/// member is gone within the bound, and that no file `after` was made.
fn every_member_dies_with_zklock(tag: &str, script: &str, members: &[&str]) {
    let zk = Inspector::connect(&shared_server().connect_string());
    let path = unique_path(tag);
    let dir = TempDir::new();
    let mut cmd = zklock_run(&shared_server().connect_string(), &path);
    cmd.args(SHORT_SESSION)
        .args(["--", "sh", "-c", script, "sh"])
        .arg(dir.path())
        .stdout(Stdio::null());
    let mut zklock = KillOnDrop(cmd.spawn().expect("spawn zklock"));
    let pids: Vec<i32> = members
        .iter()
        .map(|name| read_pid_file(&dir.path().join(name), LONG))
        .collect();
    // Cleans up after the old behaviour too: the survivors stay in the group.
    let _group = KillGroupOnDrop::of(pids[0]);

    let killed = Instant::now();
    signal(zklock.id() as i32, libc::SIGKILL);
    for (name, &pid) in members.iter().zip(&pids) {
        assert!(
            wait_pid_gone(pid, GONE_WITHIN.saturating_sub(killed.elapsed())),
            "{name} (pid {pid}) still runs {:?} after kill -9 of zklock",
            killed.elapsed()
        );
    }
    eprintln!(
        "{tag}: every member gone {:?} after kill -9",
        killed.elapsed()
    );
    zklock.wait().expect("reap zklock");
    assert!(
        !dir.path().join("after").exists(),
        "the command went on after zklock died"
    );
    wait_until(LONG, "the killed holder's session expired", || {
        zk.tree(&path).is_empty()
    });
}

#[test]
fn kill_9_of_zklock_kills_every_stage_of_a_pipeline() {
    every_member_dies_with_zklock(
        "killed-pipeline",
        r#"echo $$ > "$1/command"
sh -c 'echo $$ > "$1/left"; exec sleep 300' sh "$1" | sh -c 'echo $$ > "$1/right"; exec cat' sh "$1"
touch "$1/after"
"#,
        &["left", "right", "command"],
    );
}

#[test]
fn kill_9_of_zklock_kills_the_current_step_of_a_shell_sequence() {
    // `sh -c 'a; b'`: `a` is the shell's child; `b` must never start.
    every_member_dies_with_zklock(
        "killed-sequence",
        r#"echo $$ > "$1/command"
sh -c 'echo $$ > "$1/a"; exec sleep 300' sh "$1"
touch "$1/after"
"#,
        &["a", "command"],
    );
}

#[test]
fn kill_9_of_zklock_kills_a_background_child() {
    every_member_dies_with_zklock(
        "killed-background",
        r#"sleep 300 &
echo $! > "$1/background"
echo $$ > "$1/command"
wait
touch "$1/after"
"#,
        &["background", "command"],
    );
}

/// `pid`'s parent and process group, from /proc.
fn parent_and_group(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(1);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

#[test]
fn the_keeper_holds_the_group_id_from_outside_and_goes_with_a_normal_exit() {
    let zk = Inspector::connect(&shared_server().connect_string());
    let path = unique_path("keeper");
    let dir = TempDir::new();
    let mut cmd = zklock_run(&shared_server().connect_string(), &path);
    cmd.args([
        "--",
        "sh",
        "-c",
        r#"echo $$ > "$1/command"; while [ ! -e "$1/go" ]; do sleep 0.02; done"#,
        "sh",
    ])
    .arg(dir.path())
    .stdout(Stdio::null());
    let mut zklock = KillOnDrop(cmd.spawn().expect("spawn zklock"));
    let command = read_pid_file(&dir.path().join("command"), LONG);
    let _group = KillGroupOnDrop::of(command);
    let (_, group) = parent_and_group(command).expect("command alive");
    assert_ne!(group, command, "the command must join the keeper's group");
    // The keeper, whose pid is the group's id: zklock's child, in zklock's group (out
    // of the command's), and running its own copy of the binary (it has a name).
    let zklock_group = parent_and_group(zklock.id() as i32)
        .expect("zklock alive")
        .1;
    wait_until(LONG, "the keeper left the group and exec'd", || {
        let comm = std::fs::read_to_string(format!("/proc/{group}/comm")).unwrap_or_default();
        parent_and_group(group) == Some((zklock.id() as i32, zklock_group))
            && comm.trim_end() == "zklock-keeper"
    });
    std::fs::write(dir.path().join("go"), "").unwrap();
    let status = crate::harness::wait_for_exit(&mut zklock, LONG).expect("zklock still runs");
    assert_eq!(status.code(), Some(0));
    assert!(
        wait_pid_gone(group, GONE_WITHIN),
        "the keeper outlived zklock"
    );
    assert!(zk.tree(&path).is_empty());
}
