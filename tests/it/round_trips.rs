//! Issue 22: a free lock in as few round trips as the protocol allows. How long
//! that takes is bench/'s to measure (`bench/run --only wan`); these tests check
//! what keeps the round trips few: which requests zklock sends, and that the
//! requests of a burst leave without waiting for one another.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};

use crate::harness::{
    FaultProxy, Gated, Inspector, run_bounded, shared_server, unique_path, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);
// ZooDefs.OpCode.
const CREATE2: i32 = 15;
const CREATE_CONTAINER: i32 = 19;
const DELETE: i32 = 2;
const CLOSE: i32 = -11;

/// The client library does not set TCP_NODELAY on its connection; without it
/// Nagle's algorithm holds each request of a burst until the answer to the one
/// before it arrives, a round trip per request.
#[test]
fn the_connection_to_zookeeper_has_tcp_nodelay() {
    let server = shared_server();
    let holder = Gated::start(zklock_run(
        &server.connect_string(),
        &unique_path("nodelay"),
    ));
    let sockets = sockets_to(holder.pid(), server.addr());
    assert!(
        !sockets.is_empty(),
        "zklock has no connection to the server"
    );
    for socket in &sockets {
        let nodelay = rustix::net::sockopt::tcp_nodelay(socket).expect("TCP_NODELAY");
        assert!(nodelay, "a connection to the server without TCP_NODELAY");
    }
    holder.release();
    assert!(holder.finish().success());
}

/// A lock directory the server reaped (the usual case for a lock taken once a
/// day) is created in the same burst as our node: the create of our node is sent
/// once, behind the creates of every level of the path.
#[test]
fn a_missing_directory_is_created_in_the_burst_that_creates_our_node() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr());
    let path = format!("{}/x", unique_path("burst"));
    let mut cmd = zklock_run(&proxy.connect_string(), &path);
    cmd.args(["--", "true"]);
    run_bounded(&mut cmd, LONG).assert_code(0);
    let requests = proxy.requests();
    let ours = requests.iter().filter(|&&op| op == CREATE2).count();
    assert_eq!(ours, 1, "our node was created more than once: {requests:?}");
    let levels = path.matches('/').count();
    let first = requests.iter().position(|&op| op == CREATE2).unwrap();
    let containers = requests[..first]
        .iter()
        .filter(|&&op| op == CREATE_CONTAINER)
        .count();
    assert_eq!(containers, levels, "{requests:?}");
}

/// Persistent directories (any ACL but open) are rarely missing, and each
/// existing level created again is an error transaction in the server's log: a
/// run that finds its directory creates nothing but its node.
#[test]
fn persistent_directories_that_exist_are_not_created_again() {
    let server = shared_server();
    let path = format!("{}/x", unique_path("persistent-burst"));
    let run = |connect: &str| {
        let mut cmd = zklock_run(connect, &path);
        cmd.args(["--digest-user", "alice", "--acl", "creator", "--", "true"]);
        cmd.env("ZKLOCK_PASSWORD", "alice-secret");
        run_bounded(&mut cmd, LONG).assert_code(0);
    };
    run(&server.connect_string());
    let zk = Inspector::connect(&server.connect_string());
    assert_eq!(zk.stat(&path).map(|s| s.ephemeral_owner), Some(0));
    let proxy = FaultProxy::start(server.addr());
    run(&proxy.connect_string());
    let requests = proxy.requests();
    let creates = requests
        .iter()
        .filter(|&&op| op == CREATE2 || op == CREATE_CONTAINER)
        .count();
    assert_eq!(creates, 1, "{requests:?}");
}

/// A run that never held the lock ends its session with closeSession
/// alone, which deletes its queue node in the same transaction (one write
/// at the server where a delete and a close were two: a fleet's skipped
/// hosts end in half the writes); a holder deletes its node first, so that
/// one found gone says the lock was lost.
#[test]
fn a_run_that_never_held_the_lock_ends_with_the_close_alone() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let path = unique_path("close-alone");
    let holder = Gated::start(zklock_run(&server.connect_string(), &path));
    let proxy = FaultProxy::start(server.addr());
    let mut waiter = zklock_run(&proxy.connect_string(), &path);
    waiter.args(["-w", "1s", "--", "true"]);
    run_bounded(&mut waiter, LONG).assert_code(75);
    let requests = proxy.requests();
    assert_eq!(
        requests.iter().filter(|&&op| op == DELETE).count(),
        0,
        "{requests:?}"
    );
    assert_eq!(requests.last(), Some(&CLOSE), "{requests:?}");
    assert_eq!(zk.children(&path).len(), 1, "the waiter's node is gone");
    holder.release();
    let proxy = FaultProxy::start(server.addr());
    let mut run = zklock_run(&proxy.connect_string(), &path);
    run.args(["--", "true"]);
    run_bounded(&mut run, LONG).assert_code(0);
    let requests = proxy.requests();
    assert_eq!(
        requests[requests.len() - 2..],
        [DELETE, CLOSE],
        "{requests:?}"
    );
}

/// closeSession's answer lost with the connection: it is sent again on a
/// new connection to the session, which learns the session is over, so the
/// node went with it (not a session timeout later).
#[test]
fn a_close_whose_answer_is_lost_is_confirmed_from_a_new_connection() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let path = unique_path("close-cut");
    let holder = Gated::start(zklock_run(&server.connect_string(), &path));
    let proxy = FaultProxy::start(server.addr());
    proxy.cut_after_next_close(crate::harness::Mode::Pass);
    let mut waiter = zklock_run(&proxy.connect_string(), &path);
    waiter.args(["-v", "-w", "1s", "--session-timeout", "30s", "--", "true"]);
    let out = run_bounded(&mut waiter, LONG);
    out.assert_code(75);
    assert_eq!(proxy.cuts(), 1, "the close was not cut: {}", out.stderr);
    assert!(
        proxy.connections() >= 2,
        "no second connection: {}",
        out.stderr
    );
    assert!(out.elapsed < Duration::from_secs(20), "{:?}", out.elapsed);
    assert_eq!(zk.children(&path).len(), 1, "the waiter's node is gone");
    holder.release();
}

/// The connections of process `pid` to `server`, duplicated into this process.
fn sockets_to(pid: u32, server: SocketAddr) -> Vec<OwnedFd> {
    let pid = Pid::from_raw(pid as i32).expect("a pid");
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).expect("pidfd_open");
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the process's fds");
    let fds = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok());
    fds.filter_map(|fd| pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty()).ok())
        .filter(|socket| {
            let peer = rustix::net::getpeername(socket).ok().flatten();
            peer.and_then(|addr| SocketAddr::try_from(addr).ok()) == Some(server)
        })
        .collect()
}
