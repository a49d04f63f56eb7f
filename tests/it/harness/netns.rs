//! Network namespaces for partition tests (needs root): one namespace per
//! ZooKeeper member and per client, each with one veth on a bridge that
//! lives in a hub namespace of its own (so the host's own network and
//! firewall take no part), cut apart by iptables rules inside the
//! namespaces. Dropping a [`Net`] deletes its namespaces, and with them
//! their veths and rules, also when the test panics; names carry the test
//! process's pid and a counter, so parallel tests and other runs never
//! share one, and namespaces left by a killed run are removed by the next.

use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{clean_environment, pid_alive};

const PREFIX: &str = "zkit";

/// One host of a [`Net`]: its namespace and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub netns: String,
    pub ip: Ipv4Addr,
}

/// A bridged network of namespaces, 10.37.0.0/24 (private to its hub).
pub struct Net {
    prefix: String,
    hub: String,
    hosts: Vec<Host>,
}

impl Net {
    pub fn new() -> Net {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(
            root,
            "partition tests make network namespaces: run them as root"
        );
        remove_stale();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("{PREFIX}-{}-{n}", std::process::id());
        let hub = format!("{prefix}-hub");
        let net = Net {
            prefix,
            hub: hub.clone(),
            hosts: Vec::new(),
        };
        ip(&["netns", "add", &hub]);
        let inside = |args: &[&str]| ip(&[&["-n", &hub][..], args].concat());
        inside(&["link", "set", "lo", "up"]);
        inside(&["link", "add", "br0", "type", "bridge"]);
        inside(&["addr", "add", "10.37.0.254/24", "dev", "br0"]);
        inside(&["link", "set", "br0", "up"]);
        net
    }

    /// A new namespace named after `role`, on the bridge.
    pub fn host(&mut self, role: &str) -> Host {
        let index = self.hosts.len() + 1;
        let netns = format!("{}-{role}", self.prefix);
        let host = Host {
            netns: netns.clone(),
            ip: Ipv4Addr::new(10, 37, 0, index as u8),
        };
        ip(&["netns", "add", &netns]);
        self.hosts.push(host.clone());
        let hub = |args: &[&str]| ip(&[&["-n", &self.hub][..], args].concat());
        let port = format!("v{index}");
        hub(&[
            "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &netns,
        ]);
        hub(&["link", "set", &port, "master", "br0", "up"]);
        let inside = |args: &[&str]| ip(&[&["-n", &netns][..], args].concat());
        inside(&["link", "set", "lo", "up"]);
        inside(&["addr", "add", &format!("{}/24", host.ip), "dev", "eth0"]);
        inside(&["link", "set", "eth0", "up"]);
        host
    }

    /// Runs `program` inside `host`'s namespace (`ip netns exec` execs it:
    /// the child's pid is the program's).
    pub fn command(&self, host: &Host, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &host.netns, program]);
        cmd
    }

    /// The built `zklock` inside `host`'s namespace, its environment as
    /// `harness::zklock` leaves it.
    pub fn zklock(&self, host: &Host) -> Command {
        let mut cmd = self.command(host, env!("CARGO_BIN_EXE_zklock"));
        clean_environment(&mut cmd);
        cmd
    }

    /// Runs `f` on a thread inside the hub's network, which reaches every
    /// host (the members' 4-letter-word probes).
    pub fn within<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let file =
            File::open(format!("/var/run/netns/{}", self.hub)).expect("open the hub's netns");
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // SAFETY: setns on a descriptor we hold open; it moves only
                    // this thread, which ends with the scope.
                    let set = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                    assert_eq!(set, 0, "setns: {}", std::io::Error::last_os_error());
                    f()
                })
                .join()
                .expect("the thread inside the hub's network panicked")
        })
    }

    /// Drops every packet between `a` and `b`, both ways, silently (as a
    /// cable cut or a firewall would: no reset, no ICMP).
    pub fn cut(&self, a: &Host, b: &Host) {
        self.rules(a, b, "-A");
    }

    pub fn heal(&self, a: &Host, b: &Host) {
        self.rules(a, b, "-D");
    }

    /// Cuts `a` from every other host of the net.
    pub fn isolate(&self, a: &Host) {
        for b in self.hosts.iter().filter(|b| *b != a) {
            self.cut(a, b);
        }
    }

    fn rules(&self, a: &Host, b: &Host, action: &str) {
        let peer = b.ip.to_string();
        for (chain, way) in [("INPUT", "-s"), ("OUTPUT", "-d")] {
            let status = Command::new("ip")
                .args([
                    "netns", "exec", &a.netns, "iptables", "-w", action, chain, way,
                ])
                .args([peer.as_str(), "-j", "DROP"])
                .status()
                .expect("run iptables");
            assert!(status.success(), "iptables {action} {chain} in {}", a.netns);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for host in self.hosts.iter().rev() {
            let _ = try_ip(&["netns", "del", &host.netns]);
        }
        let _ = try_ip(&["netns", "del", &self.hub]);
    }
}

/// Deletes the namespaces of test processes that are gone (killed before
/// their `Net` was dropped).
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let mut parts = name.split('-');
        if parts.next() != Some(PREFIX) {
            continue;
        }
        let pid = parts.next().and_then(|pid| pid.parse::<i32>().ok());
        if pid.is_some_and(|pid| !pid_alive(pid)) {
            let _ = try_ip(&["netns", "del", name]);
        }
    }
}

fn ip(args: &[&str]) {
    if let Err(why) = try_ip(args) {
        panic!("ip {}: {why}", args.join(" "));
    }
}

fn try_ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|err| err.to_string())?;
    match out.status.success() {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}
