//! zklock at a terminal: an interactive command reads the terminal and gets Ctrl-C once.

use std::process::Command;
use std::time::Duration;

use crate::harness::{Pty, Scene, shared_server, wait_for_exit, wait_until, zklock_run};

const LONG: Duration = Duration::from_secs(30);

/// Reads a line, then counts SIGINTs until the first, and lingers briefly so that a
/// duplicate delivery (from the terminal and from zklock both) would be counted too.
const INTERACTIVE: &str = r#"printf 'name? '
read name
echo "got $name"
trap 'echo "interrupted"; caught=1' INT
echo armed
while [ -z "$caught" ]; do sleep 0.05; done
sleep 0.3
echo done
exit 3
"#;

#[test]
fn interactive_command_reads_the_terminal_and_gets_ctrl_c_once() {
    let s = Scene::new("terminal");
    let mut pty = Pty::open();
    let mut cmd: Command = s.run();
    cmd.args(["--", "sh", "-c", INTERACTIVE]);
    let mut zklock = pty.spawn(cmd);

    // A command that is not the terminal's foreground job would be stopped by SIGTTIN
    // here, and never print `got`.
    pty.read_until("name? ", LONG);
    pty.write(b"alice\n");
    pty.read_until("got alice", LONG);
    pty.read_until("armed", LONG);
    pty.write(&[0x03]);
    let shown = pty.read_until("done", LONG);

    let status = wait_for_exit(&mut zklock, LONG).expect("zklock still running");
    assert_eq!(
        status.code(),
        Some(3),
        "{status}; terminal showed:\n{shown}"
    );
    let shown = pty.read_to_end(LONG);
    assert_eq!(
        shown.matches("interrupted").count(),
        1,
        "Ctrl-C must interrupt the command exactly once; terminal showed:\n{shown}"
    );
    assert!(!shown.contains("zklock:"), "terminal showed:\n{shown}");
    s.assert_nothing_left();
}

/// An interactive bash in a pty, at its prompt, with `zklock` meaning the binary under
/// test, `-z` set to the shared server.
fn interactive_shell(pty: &mut Pty) -> crate::harness::KillOnDrop {
    let zklock = zklock_run(&shared_server().connect_string(), "/unused");
    let mut cmd = Command::new("bash");
    cmd.args(["--norc", "--noprofile", "--noediting", "-i"])
        .env("PS1", "PROMPT> ")
        .env("HISTFILE", "/dev/null")
        .env("ZKLOCK_ZOOKEEPER", shared_server().connect_string())
        .env(
            "PATH",
            format!(
                "{}:{}",
                std::path::Path::new(zklock.get_program())
                    .parent()
                    .expect("binary in a directory")
                    .display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        );
    let shell = pty.spawn(cmd);
    pty.read_until("PROMPT> ", LONG);
    shell
}

/// /proc/PID/stat's state letter.
fn proc_state(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().next().map(str::to_owned)
}

/// Types `line` and waits for what it makes the terminal show (`expect` must not be in
/// `line` itself, which the terminal echoes).
fn type_line(pty: &mut Pty, line: &str, expect: &str) -> String {
    let mark = pty.mark();
    pty.write(format!("{line}\n").as_bytes());
    pty.read_until_from(mark, expect, LONG)[mark..].to_owned()
}

/// The pid zklock's command printed as `zkpid=N` (its parent: zklock).
fn zklock_pid(shown: &str) -> i32 {
    let after = shown.rsplit("zkpid=").next().expect("zkpid printed");
    after
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {shown:?}"))
}

#[test]
fn ctrl_z_stops_zklock_with_its_command_and_fg_resumes_both() {
    let s = Scene::new("ctrl-z");
    let path = &s.path;
    let mut pty = Pty::open();
    let mut shell = interactive_shell(&mut pty);
    let shown = type_line(
        &mut pty,
        &format!(
            r#"zklock run {path} -- sh -c 'echo "zkpid=$PPID" re""ady; read x; echo "got $x"'"#
        ),
        "ready",
    );
    let zklock = zklock_pid(&shown);
    let mark = pty.mark();
    pty.write(&[0x1a]);
    pty.read_until_from(mark, "Stopped", LONG);
    wait_until(LONG, "zklock stopped", || {
        proc_state(zklock).as_deref() == Some("T")
    });
    type_line(&mut pty, "jobs", "Stopped");
    type_line(&mut pty, "fg", "zklock run");
    type_line(&mut pty, "hello", "got hello");
    type_line(&mut pty, "echo rc=$?", "rc=0");
    pty.write(b"exit\n");
    assert!(wait_for_exit(&mut shell, LONG).is_some(), "bash still runs");
    s.assert_nothing_left();
}

#[test]
fn a_background_run_whose_command_reads_the_terminal_stops_and_fg_resumes_it() {
    let s = Scene::new("bg-read");
    let path = &s.path;
    let mut pty = Pty::open();
    let mut shell = interactive_shell(&mut pty);
    let shown = type_line(
        &mut pty,
        &format!(
            r#"zklock run {path} -- sh -c 'echo "zkpid=$PPID" re""ady; read x; echo "got $x"' &"#
        ),
        "ready",
    );
    let zklock = zklock_pid(&shown);
    // The command reads the terminal in the background: SIGTTIN stops it, and zklock
    // with it, so that the shell's `jobs` tells the truth.
    wait_until(LONG, "zklock stopped", || {
        proc_state(zklock).as_deref() == Some("T")
    });
    type_line(&mut pty, "jobs", "Stopped");
    type_line(&mut pty, "fg", "zklock run");
    type_line(&mut pty, "hello", "got hello");
    type_line(&mut pty, "echo rc=$?", "rc=0");
    pty.write(b"exit\n");
    assert!(wait_for_exit(&mut shell, LONG).is_some(), "bash still runs");
    s.assert_nothing_left();
}

/// zklock as a stage of a pipeline at an interactive shell: the terminal's
/// foreground stays with the pipeline's job, so a later stage that reads the
/// terminal (a pager, a prompt) reads it, rather than being stopped.
#[test]
fn a_pipeline_stage_after_zklock_reads_the_terminal() {
    let s = Scene::new("pipeline");
    let path = &s.path;
    let mut pty = Pty::open();
    let mut shell = interactive_shell(&mut pty);
    type_line(
        &mut pty,
        &format!(
            r#"zklock run {path} -- sleep 1 | (sleep 0.3; echo re""ady; read x < /dev/tty; echo "got $x")"#
        ),
        "ready",
    );
    type_line(&mut pty, "hello", "got hello");
    type_line(&mut pty, "echo rc=$?", "rc=0");
    pty.write(b"exit\n");
    assert!(wait_for_exit(&mut shell, LONG).is_some(), "bash still runs");
    s.assert_nothing_left();
}
