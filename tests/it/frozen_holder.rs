//! A holder's zklock stopped (SIGSTOP) while its command runs, or cut off
//! (docs/design.md, "Session and lease rules").

use crate::faults_util::{LONG, Locker};
use crate::harness::{FaultProxy, Inspector, LockLog, Mode, shared_server, unique_path};

/// T = 4s, K = 0.5s: C = 1s, m = 0.35s, the lease 3.15s after the last answer.
const T4: [&str; 4] = ["--session-timeout", "4s", "--kill-after", "0.5s"];

/// `released` needs the server's answer: a holder cut off until it has lost
/// the lock and given up its release does not say it.
#[test]
fn a_release_while_cut_off_is_not_said_to_be_released() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("frozen-release");
    let log = LockLog::new();
    let mut args = T4.to_vec();
    args.push("-v");
    let hold = crate::faults_util::HOLD;
    let mut holder = Locker::spawn("holder", &proxy.connect_string(), &path, &args, &log, hold);
    let held = holder.wait_info(LONG);
    proxy.set_mode(Mode::Blackhole);
    holder.expect_exit(76, LONG);
    let stderr = holder.stderr();
    assert!(!stderr.contains("zklock: released "), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "could not reach ZooKeeper to confirm the release of {path}"
        )),
        "{stderr}"
    );
    crate::harness::wait_until(LONG, "the node expires with the session", || {
        !zk.exists(&held.node)
    });
}
