//! A ZooKeeper ensemble on loopback, one JVM (QuorumPeerMain) per member.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::node::{self, Node, PortTaken};
use super::server::ServerOptions;

/// Members are indexed from 0 (their `myid` is index + 1). Each has its own client,
/// quorum and election ports and data dir, kept across restarts. Dropping the ensemble
/// kills every member.
pub struct Ensemble {
    members: Vec<Node>,
    start_timeout: Duration,
}

impl Ensemble {
    pub fn start(n: usize) -> Ensemble {
        Ensemble::start_with(n, ServerOptions::default())
    }

    pub fn start_with(n: usize, opts: ServerOptions) -> Ensemble {
        assert!(
            n >= 2,
            "an ensemble needs at least 2 members (use ZkServer for one)"
        );
        for _ in 0..node::START_ATTEMPTS {
            let mut ensemble = Ensemble::spawn(n, &opts);
            if ensemble.try_wait_quorum().is_ok() {
                return ensemble;
            }
            // Dropping it kills the members that did start.
        }
        panic!("no free ports held for {} starts", node::START_ATTEMPTS);
    }

    /// Starts `n` members on new ports, all at once: no member can serve before a
    /// quorum is up anyway.
    fn spawn(n: usize, opts: &ServerOptions) -> Ensemble {
        let tls = opts.security.uses_tls();
        let per = if tls { 4 } else { 3 };
        let ports = node::free_ports(per * n);
        let servers: String = (0..n)
            .map(|i| {
                let (quorum, election) = (ports[per * i + 1], ports[per * i + 2]);
                format!("server.{}=127.0.0.1:{quorum}:{election}\n", i + 1)
            })
            .collect();
        let mut members: Vec<Node> = (0..n)
            .map(|i| {
                let client = ports[per * i];
                let secure = tls.then(|| ports[per * i + 3]);
                let name = format!("zk-member-{i}:{client}");
                let main = node::QUORUM_MAIN;
                Node::new(name, main, client, secure, Some(i + 1), &servers, opts)
            })
            .collect();
        for member in &mut members {
            member.spawn();
        }
        Ensemble {
            members,
            start_timeout: opts.start_timeout,
        }
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// All members: `127.0.0.1:P1,127.0.0.1:P2,...` (their TLS ports if they have TLS).
    pub fn connect_string(&self) -> String {
        let addrs: Vec<String> = self
            .members
            .iter()
            .map(|m| m.connect_addr().to_string())
            .collect();
        addrs.join(",")
    }

    pub fn member_connect_string(&self, i: usize) -> String {
        self.addr(i).to_string()
    }

    /// Where clients connect to member `i` (its TLS port if it has TLS).
    pub fn addr(&self, i: usize) -> SocketAddr {
        self.members[i].connect_addr()
    }

    /// Member `i`'s plain client port (for a TLS ensemble: the harness's 4lw probes only).
    pub fn plain_addr(&self, i: usize) -> SocketAddr {
        self.members[i].client_addr()
    }

    /// Panics if member `i` is not running.
    pub fn pid(&self, i: usize) -> u32 {
        self.members[i]
            .pid()
            .unwrap_or_else(|| panic!("member {i} is not running"))
    }

    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    pub fn stop(&mut self, i: usize) {
        self.members[i].stop();
    }

    /// Restarts member `i` on its ports and data dir and waits until it serves (which
    /// needs a quorum of running members).
    pub fn start_again(&mut self, i: usize) {
        self.members[i].spawn();
        self.members[i].wait_serving();
    }

    pub fn pause(&mut self, i: usize) {
        self.members[i].pause();
    }

    pub fn resume(&mut self, i: usize) {
        self.members[i].resume();
    }

    /// Member `i`'s `Mode:` from `srvr` ("leader", "follower"), None if not serving.
    pub fn mode(&self, i: usize) -> Option<String> {
        self.members[i].mode()
    }

    /// The current leader, by asking running, unpaused members; None if none says so.
    pub fn try_leader(&self) -> Option<usize> {
        self.live()
            .find(|&i| self.mode(i).as_deref() == Some("leader"))
    }

    /// Waits (up to the start timeout) until a member reports being the leader.
    pub fn leader(&self) -> usize {
        let deadline = Instant::now() + self.start_timeout;
        loop {
            if let Some(i) = self.try_leader() {
                return i;
            }
            if Instant::now() >= deadline {
                panic!(
                    "no leader after {:?}\n{}",
                    self.start_timeout,
                    self.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Waits until every running, unpaused member serves and exactly one is leader.
    pub fn wait_quorum(&mut self) {
        if self.try_wait_quorum().is_err() {
            panic!("a member could not bind its ports\n{}", self.diagnostics());
        }
    }

    /// [`Ensemble::wait_quorum`], but a member whose JVM exits because one of its
    /// ports was taken is an error to recover from, not a panic. A member counts
    /// only if the server at its client port is ours.
    fn try_wait_quorum(&mut self) -> Result<(), PortTaken> {
        let deadline = Instant::now() + self.start_timeout;
        loop {
            for member in &mut self.members {
                member.check_running()?;
            }
            let modes: Vec<Option<String>> = self.live().map(|i| self.mode(i)).collect();
            let serving = modes
                .iter()
                .all(|m| matches!(m.as_deref(), Some("leader") | Some("follower")));
            let leaders = modes
                .iter()
                .filter(|m| m.as_deref() == Some("leader"))
                .count();
            if serving && leaders == 1 && self.live().all(|i| self.members[i].is_ours()) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                panic!(
                    "no quorum after {:?}: modes {modes:?}\n{}",
                    self.start_timeout,
                    self.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Panics if member `i` does not answer.
    pub fn four_letter(&self, i: usize, cmd: &str) -> String {
        self.try_four_letter(i, cmd)
            .unwrap_or_else(|e| panic!("4-letter word {cmd:?} to member {i}: {e}"))
    }

    pub fn try_four_letter(&self, i: usize, cmd: &str) -> io::Result<String> {
        self.members[i].four_letter(cmd)
    }

    /// A 4-letter word to member `i`'s TLS port (see [`super::ZkServer::four_letter_tls`]).
    pub fn try_four_letter_tls(&self, i: usize, cmd: &str) -> io::Result<String> {
        self.members[i].four_letter_tls(cmd)
    }

    pub fn log_tail(&self, i: usize, n: usize) -> String {
        self.members[i].log_tail(n)
    }

    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.members.len())
            .filter(|&i| self.members[i].is_running() && !self.members[i].is_paused())
    }

    fn diagnostics(&self) -> String {
        (0..self.members.len())
            .map(|i| format!("--- member {i} log tail:\n{}\n", self.log_tail(i, 15)))
            .collect()
    }
}
