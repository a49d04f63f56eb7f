//! zklock must not die when its stderr goes away (a closed pipe, `2>&-`):
//! dying there would leave its node behind for a whole session timeout.

use std::process::Stdio;
use std::time::Duration;

use crate::harness::{Inspector, shared_server, unique_path, wait_for_exit, zklock_run};

#[test]
fn verbose_run_survives_a_closed_stderr_pipe() {
    let server = shared_server();
    let path = unique_path("closed-stderr");
    let mut child = zklock_run(&server.connect_string(), &path)
        .args(["-v", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zklock");
    // Closing the read end before zklock's first message makes every write
    // to stderr fail with EPIPE.
    drop(child.stderr.take());
    let status = wait_for_exit(&mut child, Duration::from_secs(20)).expect("zklock exits");
    assert_eq!(
        status.code(),
        Some(0),
        "zklock must run the command and exit 0: {status:?}"
    );
    let inspector = Inspector::connect(&server.connect_string());
    assert!(
        inspector.children(&path).is_empty(),
        "node left under {path}"
    );
}
