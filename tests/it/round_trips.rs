//! Issue 22: a free lock in as few round trips as the protocol allows. How long
//! that takes is bench/'s to measure (`bench/run --only wan`); these tests check
//! what keeps the round trips few: which requests zklock sends, and that the
//! requests of a burst leave without waiting for one another.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};

use crate::harness::{Gated, shared_server, unique_path, zklock_run};

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
