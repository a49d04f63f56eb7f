//! `zklock run` as a `Type=notify` systemd service: a Unix datagram socket
//! stands in for systemd's notification socket.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{
    Gated, Inspector, KillOnDrop, TempDir, shared_server, unique_path, wait_for_exit,
    wait_for_file, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// Dumps its whole environment, says it runs, and waits for the release file.
const SCRIPT: &str = r#"env > "$1/env"
touch "$1/started"
while [ ! -e "$1/release" ]; do sleep 0.02; done
"#;

/// The stand-in for systemd: a bound datagram socket and what it received.
struct Systemd {
    socket: UnixDatagram,
    messages: Vec<String>,
}

impl Systemd {
    fn bind(dir: &TempDir) -> Systemd {
        Systemd::listen(UnixDatagram::bind(dir.path().join("notify")))
    }

    /// A socket in the abstract namespace, `NOTIFY_SOCKET=@name`.
    fn bind_abstract(name: &str) -> Systemd {
        let address = SocketAddr::from_abstract_name(name).expect("an abstract name");
        Systemd::listen(UnixDatagram::bind_addr(&address))
    }

    fn listen(bound: std::io::Result<UnixDatagram>) -> Systemd {
        let socket = bound.expect("bind");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        Systemd {
            socket,
            messages: Vec::new(),
        }
    }

    /// Receives until `count` messages satisfy `want`; returns the index of the last.
    fn until(&mut self, description: &str, count: usize, want: impl Fn(&str) -> bool) -> usize {
        let begin = Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            let matching: Vec<usize> = (0..self.messages.len())
                .filter(|&i| want(&self.messages[i]))
                .collect();
            if matching.len() >= count {
                return matching[count - 1];
            }
            assert!(
                begin.elapsed() < LONG,
                "no message {description} in {:?}",
                self.messages
            );
            if let Ok(n) = self.socket.recv(&mut buf) {
                (self.messages).push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    }

    /// Whatever arrives within `quiet`.
    fn rest(&mut self, quiet: Duration) {
        let begin = Instant::now();
        let mut buf = [0u8; 4096];
        while begin.elapsed() < quiet {
            if let Ok(n) = self.socket.recv(&mut buf) {
                (self.messages).push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
    }
}

/// `zklock run PATH -- SCRIPT DIR` with none of systemd's variables but `vars`.
fn service(path: &str, dir: &TempDir, vars: &[(&str, String)]) -> KillOnDrop {
    let mut cmd: Command = zklock_run(&shared_server().connect_string(), path);
    for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
        cmd.env_remove(var);
    }
    cmd.envs(vars.iter().map(|(k, v)| (k, v)))
        .args(["--", "sh", "-c", SCRIPT, "sh"])
        .arg(dir.path())
        .stdout(Stdio::null());
    KillOnDrop(cmd.spawn().expect("spawn zklock"))
}

/// [`service`] as a `Type=notify` unit with a 200 ms watchdog sees it,
/// reporting to the socket [`Systemd::bind`] made in `dir`.
fn watched_service(path: &str, dir: &TempDir) -> KillOnDrop {
    let socket = dir.path().join("notify").to_str().unwrap().to_owned();
    let vars = [
        ("NOTIFY_SOCKET", socket),
        ("WATCHDOG_USEC", "200000".to_owned()),
    ];
    service(path, dir, &vars)
}

#[test]
fn reports_waiting_ready_watchdog_and_stopping_in_order() {
    let path = unique_path("systemd");
    let holder = Gated::start(zklock_run(&shared_server().connect_string(), &path));
    let dir = TempDir::new();
    let mut systemd = Systemd::bind(&dir);
    let mut zklock = watched_service(&path, &dir);

    let waiting = systemd.until("STATUS waiting", 1, |m| {
        m.starts_with(&format!("STATUS=waiting for {path}: 1 ahead, held by "))
    });
    assert!(!dir.path().join("started").exists());
    holder.finish();

    let ready = systemd.until("READY=1", 1, |m| m.starts_with("READY=1\n"));
    let status = systemd.messages[ready].clone();
    assert!(
        status.contains(&format!("\nSTATUS=holding {path} since "))
            && status.contains("(fencing token "),
        "{status}"
    );
    assert!(wait_for_file(dir.path().join("started"), LONG));
    let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
    for var in ["NOTIFY_SOCKET=", "WATCHDOG_USEC=", "ZKLOCK_PATH="] {
        let given = env.lines().any(|line| line.starts_with(var));
        assert_eq!(
            given,
            var == "ZKLOCK_PATH=",
            "{var} in the command's environment:\n{env}"
        );
    }

    systemd.until("WATCHDOG=1 twice", 2, |m| m == "WATCHDOG=1\n");
    std::fs::write(dir.path().join("release"), "").unwrap();
    let stopping = systemd.until("STOPPING=1", 1, |m| m == "STOPPING=1\n");
    let status = wait_for_exit(&mut zklock, LONG).expect("zklock exits");
    assert!(status.success(), "{status}");

    let m = &systemd.messages;
    assert!(
        m[0].starts_with(&format!("STATUS=connecting to ZooKeeper for {path}")),
        "{m:?}"
    );
    assert!(0 < waiting && waiting < ready && ready < stopping, "{m:?}");
    let watchdogs: Vec<usize> = (0..m.len()).filter(|&i| m[i] == "WATCHDOG=1\n").collect();
    assert!(watchdogs.len() >= 2, "{m:?}");
    assert!(
        watchdogs.iter().all(|&i| ready < i && i < stopping),
        "{m:?}"
    );
}

#[test]
fn nothing_is_sent_without_notify_socket() {
    let path = unique_path("systemd-none");
    let dir = TempDir::new();
    let mut systemd = Systemd::bind(&dir);
    // A watchdog asked for, but no socket named: zklock has no one to tell.
    let mut zklock = service(&path, &dir, &[("WATCHDOG_USEC", "200000".to_owned())]);
    assert!(wait_for_file(dir.path().join("started"), LONG));
    systemd.rest(Duration::from_millis(500));
    std::fs::write(dir.path().join("release"), "").unwrap();
    let status = wait_for_exit(&mut zklock, LONG).expect("zklock exits");
    assert!(status.success(), "{status}");
    systemd.rest(Duration::from_millis(100));
    assert!(systemd.messages.is_empty(), "{:?}", systemd.messages);
}

#[test]
fn the_watchdog_stops_when_the_lock_is_lost() {
    let path = unique_path("systemd-lost");
    let dir = TempDir::new();
    let mut systemd = Systemd::bind(&dir);
    let mut zklock = watched_service(&path, &dir);
    systemd.until("WATCHDOG=1", 1, |m| m == "WATCHDOG=1\n");
    let zk = Inspector::connect(&shared_server().connect_string());
    for node in zk.children(&path) {
        assert!(zk.delete(&format!("{path}/{node}")));
    }
    let stopping = systemd.until("STOPPING=1", 1, |m| m == "STOPPING=1\n");
    let status = wait_for_exit(&mut zklock, LONG).expect("zklock exits");
    assert_eq!(status.code(), Some(76), "{status}");
    systemd.rest(Duration::from_millis(300));
    let m = &systemd.messages;
    assert!(m[stopping..].iter().all(|m| m != "WATCHDOG=1\n"), "{m:?}");
    let stops = m.iter().filter(|m| *m == "STOPPING=1\n").count();
    assert_eq!(stops, 1, "{m:?}");
}

#[test]
fn a_standbys_status_says_how_long_the_holder_has_held() {
    let path = unique_path("systemd-standby");
    let holder = Gated::start(zklock_run(&shared_server().connect_string(), &path));
    let dir = TempDir::new();
    let mut systemd = Systemd::bind(&dir);
    let socket = dir.path().join("notify").to_str().unwrap().to_owned();
    let vars = [
        ("NOTIFY_SOCKET", socket),
        ("ZKLOCK_HEARTBEAT_INTERVAL", "200ms".to_owned()),
    ];
    let mut zklock = service(&path, &dir, &vars);
    // `... held by pid N on HOST for 1s`: said again as time goes on, not
    // only when the queue changes.
    let waiting = format!("STATUS=waiting for {path}: 1 ahead, held by ");
    let held_for = |m: &str| {
        let rest = m.strip_prefix(&waiting)?.trim_end();
        Some(rest.rsplit_once(" for ")?.1.to_owned())
    };
    let first = systemd.until("STATUS held for", 1, |m| held_for(m).is_some());
    let first = held_for(&systemd.messages[first]);
    systemd.until("STATUS held for longer", 1, |m| {
        held_for(m).is_some_and(|held| Some(&held) != first.as_ref())
    });
    assert!(!dir.path().join("started").exists());
    holder.finish();
    systemd.until("READY=1", 1, |m| m.starts_with("READY=1\n"));
    std::fs::write(dir.path().join("release"), "").unwrap();
    let status = wait_for_exit(&mut zklock, LONG).expect("zklock exits");
    assert!(status.success(), "{status}");
}

#[test]
fn an_abstract_notify_socket_is_told() {
    let path = unique_path("systemd-abstract");
    let dir = TempDir::new();
    let name = format!(
        "zklock-it-{}-{}",
        std::process::id(),
        path.replace('/', "-")
    );
    let mut systemd = Systemd::bind_abstract(&name);
    let mut zklock = service(&path, &dir, &[("NOTIFY_SOCKET", format!("@{name}"))]);
    let ready = systemd.until("READY=1", 1, |m| m.starts_with("READY=1\n"));
    assert!(
        systemd.messages[ready].contains(&format!("\nSTATUS=holding {path} since ")),
        "{:?}",
        systemd.messages
    );
    std::fs::write(dir.path().join("release"), "").unwrap();
    systemd.until("STOPPING=1", 1, |m| m == "STOPPING=1\n");
    let status = wait_for_exit(&mut zklock, LONG).expect("zklock exits");
    assert!(status.success(), "{status}");
}

/// `zklock hold` as a unit's step: its holder tells systemd it is ready once
/// it holds, and stopping once released (docs/design.md, "Holds").
#[test]
fn a_hold_is_ready_when_held_and_stopping_when_released() {
    let place = crate::hold::Place::new("systemd-hold");
    let mut systemd = Systemd::bind(&place.dir);
    let mut cmd = place.bash(
        r#"set -e
        eval "$("$ZKLOCK" hold -z "$ZK" "$P")"
        "$ZKLOCK" release"#,
    );
    cmd.env("NOTIFY_SOCKET", place.dir.path().join("notify"));
    crate::harness::run_bounded(&mut cmd, LONG).assert_code(0);
    let ready = systemd.until("READY=1", 1, |m| {
        m.contains("READY=1") && m.contains(&format!("STATUS=holding {} since", place.path))
    });
    let stopping = systemd.until("STOPPING=1", 1, |m| m.contains("STOPPING=1"));
    assert!(ready < stopping, "{:?}", systemd.messages);
    place.assert_clean(place.zk());
}
