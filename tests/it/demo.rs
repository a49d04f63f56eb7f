//! The README's first command, `.ci/demo`: it succeeds with exit 0 (not the
//! status of the ZooKeeper it stops on the way out), and fails when a step
//! does not do what it shows.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::{KillOnDrop, wait_for_exit};

fn demo(binary: &str) -> (Option<i32>, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/demo");
    let mut child = KillOnDrop(
        Command::new("bash")
            .arg(script)
            .env("ZKLOCK_DEMO_BIN", binary)
            .env_remove("ZKLOCK_ZOOKEEPER")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start .ci/demo"),
    );
    // Every step of the demo is bounded; this bound only keeps a broken demo
    // from hanging the suite.
    let status = wait_for_exit(&mut child, Duration::from_secs(120)).expect("demo hangs");
    // The demo prints a few lines, far less than a pipe holds.
    let mut text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    (status.code(), text)
}

/// One test, not two: demos started together would pick the same port.
#[test]
fn demo_exits_zero_on_success_and_non_zero_on_a_failed_step() {
    let (code, output) = demo(env!("CARGO_BIN_EXE_zklock"));
    assert_eq!(code, Some(0), "{output}");
    for line in ["hello from under the lock", "job 3: done", "== done"] {
        assert!(output.contains(line), "missing {line:?}:\n{output}");
    }

    // A "zklock" that always fails: the first step must stop the demo.
    let (code, output) = demo("/bin/false");
    assert_ne!(code, Some(0), "{output}");
    assert!(output.contains("demo: zklock run -v"), "{output}");
}
