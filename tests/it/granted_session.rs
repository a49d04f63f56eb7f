//! A session timeout granted on a reconnection that is shorter than the
//! one granted first (a member with a lower `maxSessionTimeout`) shortens
//! the lease from then on (issue 37; docs/design.md, "Session and lease
//! rules"): the server may now expire the session that much sooner, so a
//! frozen zklock's keeper must stop the command that much sooner too.

use std::time::Duration;

use crate::faults_util::{LONG, Locker};
use crate::harness::{LockLog, ServerOptions, ZkServer, signal, unique_path, wait_until};

/// Whether the server has a client whose session it granted `ms`.
fn granted(server: &ZkServer, ms: u32) -> bool {
    let cons = server.try_four_letter("cons").unwrap_or_default();
    cons.lines()
        .any(|l| l.contains("sid=") && l.contains(&format!("to={ms}")))
}

#[test]
fn a_shorter_session_granted_on_reconnection_shortens_the_lease() {
    let mut server = ZkServer::start_with(ServerOptions {
        max_session_timeout: Duration::from_secs(20),
        ..ServerOptions::default()
    });
    let log = LockLog::new();
    let path = unique_path("granted-shorter");
    // A 12 s session: the lease is about 8 s past each proof.
    let args = ["--session-timeout", "12s", "--kill-after", "0.5s", "-v"];
    let body = "trap 'echo term > \"$LOCKER_DIR/term\"; exit 0' TERM\n\
                while :; do sleep 0.02; done";
    let mut holder = Locker::spawn("holder", &server.connect_string(), &path, &args, &log, body);
    holder.wait_info(LONG);
    assert!(granted(&server, 12000), "{}", server.four_letter("cons"));

    // The same session, now granted 4 s by the restarted server.
    server.stop();
    server.set_config("maxSessionTimeout", "4000");
    server.start_again();
    wait_until(LONG, "the holder's reconnection", || {
        holder.stderr().contains("connection to ZooKeeper restored")
    });
    assert!(granted(&server, 4000), "{}", server.four_letter("cons"));
    assert!(
        holder
            .stderr()
            .contains("still holding (session timeout now 4s)"),
        "{}",
        holder.stderr()
    );
    holder.assert_running("after its reconnection");

    // Frozen, zklock cannot stop its command: its keeper does, at the
    // lease deadline it was given, which must come before the server's
    // 4 s (the old 12 s lease would let the command run some 8 s).
    let term = holder.dir().join("term");
    signal(holder.pid() as i32, libc::SIGSTOP);
    let stopped_after = wait_until(LONG, "the keeper's TERM", || term.exists());
    signal(holder.pid() as i32, libc::SIGCONT);
    assert!(
        stopped_after < Duration::from_secs(4),
        "the command was stopped {stopped_after:?} after zklock froze, past the 4 s session; \
         stderr:\n{}",
        holder.stderr()
    );
    holder.expect_exit(76, LONG);
}
