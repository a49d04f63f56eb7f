//! zklock at a terminal: an interactive command reads the terminal and gets Ctrl-C once.

use std::process::Command;
use std::time::Duration;

use crate::harness::{
    Inspector, Pty, assert_no_nodes, shared_server, unique_path, wait_for_exit, zklock_run,
};

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
    let zk = Inspector::connect(&shared_server().connect_string());
    let path = unique_path("terminal");
    let mut pty = Pty::open();
    let mut cmd: Command = zklock_run(&shared_server().connect_string(), &path);
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
    assert_no_nodes(&zk, &path);
}
