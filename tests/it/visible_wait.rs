//! A visible wait (issue 11): a status line at a terminal that updates, names
//! the holder and is erased; no escape code at all off a terminal; with `-v`
//! off a terminal, lines when the wait starts, when the holder changes and a
//! heartbeat.

use std::fs::File;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::harness::{
    Holder, KillOnDrop, Pty, Scene, TempDir, wait_for_contenders, wait_for_exit, wait_until,
};

const LONG: Duration = Duration::from_secs(30);

/// Erases the current line (console's `clear_line`, which indicatif uses).
const CLEAR_LINE: &str = "\r\x1b[2K";

/// A holder whose node says its command runs (so "for ..." is known).
fn start_holder(s: &Scene) -> Holder {
    let holder = s.hold();
    let node = holder.node();
    wait_until(LONG, "the holder's acquisition write", || {
        s.zk()
            .get_data(&node)
            .is_some_and(|(data, _)| String::from_utf8_lossy(&data).contains("\"acquired\":true"))
    });
    holder
}

/// Whether the last status line drawn before `end` (an index in `shown`)
/// was erased before it.
fn erased_before(shown: &str, end: usize) -> bool {
    let last = shown[..end]
        .rfind("waiting ")
        .expect("a status line was drawn");
    shown[last..end].contains(CLEAR_LINE)
}

#[test]
fn at_a_terminal_the_status_line_updates_names_the_holder_and_is_erased() {
    let s = Scene::new("visible-tty");
    let path = &s.path;
    let mut holder = start_holder(&s);
    let held_by = format!("1 ahead, held by pid {}", holder.shell_pid());

    let mut pty = Pty::open();
    pty.set_size(24, 300);
    let mut cmd = s.run();
    cmd.args(["--", "sh", "-c", "echo the-command-ran"]);
    let mut zklock = pty.spawn(cmd);

    pty.read_until(&held_by, LONG);
    // It updates: the elapsed time moves on.
    pty.read_until(&format!("waiting 1s for {path}: {held_by}"), LONG);
    pty.read_until(&format!("waiting 2s for {path}: {held_by}"), LONG);
    assert!(
        pty.output().contains(" for 1s") || pty.output().contains(" for 2s"),
        "how long the holder has held it: {}",
        pty.output()
    );

    holder.release();
    pty.read_until("the-command-ran", LONG);
    let status = wait_for_exit(&mut zklock, LONG).expect("zklock exits");
    let shown = pty.read_to_end(LONG);
    assert_eq!(
        status.code(),
        Some(0),
        "{status}; terminal showed:\n{shown:?}"
    );
    let ran = shown.find("the-command-ran").unwrap();
    assert!(
        erased_before(&shown, ran),
        "the status line was not erased before the command's output:\n{shown:?}"
    );
    assert!(!shown[ran..].contains("waiting "), "{shown:?}");
    assert_eq!(holder.wait(LONG).code(), Some(0));
    s.assert_nothing_left();
}

#[test]
fn at_a_terminal_giving_up_erases_the_line_before_its_message() {
    let s = Scene::new("visible-tty-timeout");
    let mut holder = start_holder(&s);

    let mut pty = Pty::open();
    pty.set_size(24, 300);
    let mut cmd = s.run();
    cmd.args(["-w", "1.5", "--", "true"]);
    let mut zklock = pty.spawn(cmd);
    let status = wait_for_exit(&mut zklock, LONG).expect("zklock gives up");
    let shown = pty.read_to_end(LONG);
    assert_eq!(
        status.code(),
        Some(75),
        "{status}; terminal showed:\n{shown:?}"
    );
    let message = shown
        .find("zklock: timed out waiting for")
        .unwrap_or_else(|| panic!("no message: {shown:?}"));
    assert!(erased_before(&shown, message), "{shown:?}");

    holder.release();
    assert_eq!(holder.wait(LONG).code(), Some(0));
}

/// Runs `cmd` (a `zklock run` with its command) with stderr to a file in
/// `dir`; spawned, not waited for.
fn spawn_to_file(cmd: &mut Command, dir: &Path) -> KillOnDrop {
    let stderr = File::create(dir.join("stderr")).expect("create stderr file");
    KillOnDrop(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn zklock"),
    )
}

fn stderr_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
}

fn exit_of(child: &mut KillOnDrop, dir: &Path) -> ExitStatus {
    wait_for_exit(child, LONG)
        .unwrap_or_else(|| panic!("zklock still running; stderr:\n{}", stderr_of(dir)))
}

#[test]
fn off_a_terminal_no_escape_code_and_no_line_while_waiting() {
    let s = Scene::new("visible-file");
    let mut holder = start_holder(&s);

    for verbose in [false, true] {
        let dir = TempDir::new();
        let mut cmd = s.run();
        if verbose {
            cmd.arg("-v");
        }
        cmd.args(["-w", "1.2", "--", "true"]);
        let mut zklock = spawn_to_file(&mut cmd, dir.path());
        let status = exit_of(&mut zklock, dir.path());
        let stderr = stderr_of(dir.path());
        assert_eq!(status.code(), Some(75), "-v {verbose}: {stderr}");
        assert!(!stderr.contains('\x1b'), "-v {verbose}: {stderr:?}");
        assert!(!stderr.contains('\r'), "-v {verbose}: {stderr:?}");
        if !verbose {
            let lines: Vec<&str> = stderr.lines().collect();
            assert_eq!(lines.len(), 1, "{stderr}");
            assert!(
                lines[0].starts_with("zklock: timed out waiting for"),
                "{stderr}"
            );
        }
    }

    holder.release();
    assert_eq!(holder.wait(LONG).code(), Some(0));
}

#[test]
fn verbose_off_a_terminal_says_start_holder_changes_and_heartbeats() {
    let s = Scene::new("visible-heartbeat");
    let mut first = start_holder(&s);
    let first_node = first.node();
    let mut second = Holder::spawn(&mut s.run(), &s.log);
    wait_for_contenders(s.zk(), &s.path, "-lock-", 2);

    let dir = TempDir::new();
    let mut cmd = s.run();
    cmd.env("ZKLOCK_HEARTBEAT_INTERVAL", "200ms")
        .args(["-v", "--", "true"]);
    let mut zklock = spawn_to_file(&mut cmd, dir.path());

    let before = "still waiting";
    let held_by_first = format!(": 2 ahead, held by pid {} on ", first.shell_pid());
    wait_until(LONG, "a heartbeat naming the first holder", || {
        stderr_of(dir.path())
            .lines()
            .any(|l| l.contains(before) && l.contains(&held_by_first))
    });

    // The next holder takes over while two were ahead of us: the node we
    // watch (the second) writes its acquisition, and we learn of it.
    first.release();
    second.wait_started(LONG);
    let second_node = second.node();
    let held_by_second = format!(": 1 ahead, held by pid {} on ", second.shell_pid());
    wait_until(LONG, "a heartbeat naming the new holder", || {
        stderr_of(dir.path())
            .lines()
            .any(|l| l.contains(before) && l.contains(&held_by_second))
    });

    second.release();
    let status = exit_of(&mut zklock, dir.path());
    let stderr = stderr_of(dir.path());
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    for (what, node) in [("start", &first_node), ("holder change", &second_node)] {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains("in the queue; first is") && l.contains(node.as_str())),
            "no {what} line for {node}:\n{stderr}"
        );
    }
    assert_eq!(first.wait(LONG).code(), Some(0));
    assert_eq!(second.wait(LONG).code(), Some(0));
    s.assert_nothing_left();
}

#[test]
fn at_a_terminal_verbose_lines_go_above_the_status_line() {
    let s = Scene::new("visible-tty-verbose");
    let path = &s.path;
    let mut holder = start_holder(&s);
    let mut next = Holder::spawn(&mut s.run(), &s.log);
    wait_for_contenders(s.zk(), path, "-lock-", 2);

    let mut pty = Pty::open();
    pty.set_size(24, 300);
    let mut cmd = s.run();
    cmd.args(["-v", "--", "true"]);
    let mut zklock = pty.spawn(cmd);
    pty.read_until(&format!("waiting 1s for {path}: 2 ahead"), LONG);
    // The holder changes while the status line is shown: a -v line.
    holder.release();
    next.wait_started(LONG);
    let changed = format!("first is {}", next.node());
    pty.read_until(&changed, LONG);
    next.release();
    let status = wait_for_exit(&mut zklock, LONG).expect("zklock exits");
    let shown = pty.read_to_end(LONG);
    assert_eq!(
        status.code(),
        Some(0),
        "{status}; terminal showed:\n{shown:?}"
    );
    for line in [changed.as_str(), "acquired ", "released "] {
        assert!(shown.contains(line), "no {line:?} line: {shown:?}");
    }
    // Each of our lines starts a line of its own: at the start, after a
    // newline, or after the status line was erased.
    for (at, _) in shown.match_indices("zklock: ") {
        let before = &shown[..at];
        assert!(
            before.is_empty() || before.ends_with('\n') || before.ends_with(CLEAR_LINE),
            "a -v line garbled with the status line at {at}: {shown:?}"
        );
    }
    assert_eq!(holder.wait(LONG).code(), Some(0));
    assert_eq!(next.wait(LONG).code(), Some(0));
}

/// Ctrl-C at a narrow terminal: the status line never fills the width (the
/// echoed `^C` stays on its line, where the erase finds it), and the line
/// is erased after the echo.
#[test]
fn at_a_terminal_ctrl_c_is_echoed_on_the_status_line_and_erased_with_it() {
    const COLS: usize = 40;
    let s = Scene::new("visible-tty-ctrl-c");
    let mut holder = start_holder(&s);

    let mut pty = Pty::open();
    pty.set_size(24, COLS as u16);
    let mut cmd = s.run();
    cmd.args(["--", "true"]);
    let mut zklock = pty.spawn(cmd);
    pty.read_until("waiting 1s for ", LONG);
    pty.write(b"\x03");
    let status = wait_for_exit(&mut zklock, LONG).expect("zklock exits on Ctrl-C");
    let shown = pty.read_to_end(LONG);
    assert_eq!(
        status.code(),
        Some(130),
        "{status}; terminal showed:\n{shown:?}"
    );

    // Every status line drawn, with the ^C echoed after it, stays on its
    // terminal line: short of the last column, where the cursor would wrap.
    for drawn in shown.split(CLEAR_LINE) {
        let line: String = drawn
            .chars()
            .take_while(|&c| c != '\r' && c != '\n' && c != '\x1b')
            .collect();
        if line.contains("waiting ") {
            assert!(
                line.chars().count() < COLS,
                "{} columns of {COLS}: {line:?}",
                line.chars().count()
            );
        }
    }
    let echo = shown
        .rfind("^C")
        .unwrap_or_else(|| panic!("no ^C echoed: {shown:?}"));
    assert!(
        shown[echo..].contains(CLEAR_LINE),
        "the line with ^C was not erased: {shown:?}"
    );
    holder.release();
    assert_eq!(holder.wait(LONG).code(), Some(0));
    s.assert_nothing_left();
}
