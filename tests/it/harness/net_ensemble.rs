//! A ZooKeeper ensemble whose members each run in a network namespace of a
//! [`Net`], on the same ports at their own addresses, for partition tests;
//! clients get namespaces on the same net ([`NetEnsemble::client_host`]).

use std::time::{Duration, Instant};

use super::netns::{Host, Net};
use super::node::{self, Node};
use super::server::ServerOptions;

const CLIENT_PORT: u16 = 2181;

/// Members are indexed from 0 (`myid` is index + 1), at 10.37.0.(index + 1).
/// Dropping it kills the members, then deletes the namespaces.
pub struct NetEnsemble {
    members: Vec<Node>,
    hosts: Vec<Host>,
    start_timeout: Duration,
    pub net: Net,
}

impl NetEnsemble {
    pub fn start(n: usize, opts: &ServerOptions) -> NetEnsemble {
        let mut net = Net::new();
        let hosts: Vec<Host> = (0..n).map(|i| net.host(&format!("zk{i}"))).collect();
        let servers: String = (hosts.iter().enumerate())
            .map(|(i, host)| format!("server.{}={}:2888:3888\n", i + 1, host.ip))
            .collect();
        let members = (hosts.iter().enumerate())
            .map(|(i, host)| {
                let name = format!("zk-member-{i}@{}", host.netns);
                let main = node::QUORUM_MAIN;
                let mut member =
                    Node::new(name, main, CLIENT_PORT, None, Some(i + 1), &servers, opts);
                member.place(&host.netns, host.ip);
                member.spawn();
                member
            })
            .collect();
        let mut ensemble = NetEnsemble {
            members,
            hosts,
            start_timeout: opts.start_timeout,
            net,
        };
        ensemble.wait_quorum();
        ensemble
    }

    pub fn host(&self, i: usize) -> &Host {
        &self.hosts[i]
    }

    /// `IP:2181` of member `i`.
    pub fn connect_string_of(&self, i: usize) -> String {
        format!("{}:{CLIENT_PORT}", self.hosts[i].ip)
    }

    /// A namespace for a client on the members' net.
    pub fn client_host(&mut self, role: &str) -> Host {
        self.net.host(role)
    }

    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].pid()
    }

    /// Each member's mode (`leader`, `follower`), as `srvr` says.
    pub fn modes(&self) -> Vec<Option<String>> {
        let members = &self.members;
        self.net.within(|| members.iter().map(Node::mode).collect())
    }

    /// Waits until every member serves and one is leader; its index.
    pub fn wait_quorum(&mut self) -> usize {
        let deadline = Instant::now() + self.start_timeout;
        loop {
            let modes = self.modes();
            let leaders: Vec<usize> = (0..modes.len())
                .filter(|&i| modes[i].as_deref() == Some("leader"))
                .collect();
            let serving =
                (modes.iter()).all(|m| matches!(m.as_deref(), Some("leader" | "follower")));
            if serving && leaders.len() == 1 {
                return leaders[0];
            }
            if Instant::now() >= deadline {
                let logs: Vec<String> = (self.members.iter())
                    .map(|member| member.log_tail(30))
                    .collect();
                panic!(
                    "no quorum after {:?}: {modes:?}\n{}",
                    self.start_timeout,
                    logs.join("\n---\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn pause(&mut self, i: usize) {
        self.members[i].pause();
    }

    pub fn resume(&mut self, i: usize) {
        self.members[i].resume();
    }

    pub fn log_tail(&self, i: usize, n: usize) -> String {
        self.members[i].log_tail(n)
    }
}

impl Drop for NetEnsemble {
    fn drop(&mut self) {
        for member in &mut self.members {
            if member.is_running() {
                member.kill();
            }
        }
    }
}
