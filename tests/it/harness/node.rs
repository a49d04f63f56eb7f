//! One ZooKeeper JVM process: config, spawn, signals, readiness, logs, 4-letter words.

use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::TempDir;
use super::server::ServerOptions;

const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
pub(crate) const JAVA: &str = "/usr/bin/java";
// The Debian classpath has slf4j-api but no binding, so without this the log is empty.
const SLF4J_BINDING: &str = "/usr/share/java/slf4j-simple.jar";
// NettyServerCnxnFactory (needed for TLS) uses Netty jars that zookeeper.jar's manifest
// classpath lacks; Debian's libnetty-java (a dependency of zookeeper) ships them.
const NETTY_EXTRA: [&str; 3] = [
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(5);
// ZooKeeper 3.8.0 answers a 4-letter word that arrives before its database exists, then
// fails to close the connection (NullPointerException in removeCnxn), so a probe that
// reads to EOF hangs; probes therefore give up early and try again.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) const STANDALONE_MAIN: &str = "org.apache.zookeeper.server.ZooKeeperServerMain";
pub(crate) const QUORUM_MAIN: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// Panics with install instructions unless java and the ZooKeeper jar are present.
pub(crate) fn require_zookeeper() {
    for (path, what) in [
        (JAVA, "java (Java 17)"),
        (ZOOKEEPER_JAR, "the ZooKeeper server jar"),
    ] {
        assert!(
            Path::new(path).exists(),
            "{what} not found at {path}: these tests need a real ZooKeeper server; \
             install it with `sudo apt-get install zookeeper` (Debian/Ubuntu)"
        );
    }
}

/// Picks `n` distinct free loopback ports, below the kernel's range of
/// ephemeral ports.
///
/// A member that is stopped and started again must get its ports back, and an
/// outgoing connection (a client's, a proxy's, the JVM's own) takes its local
/// port from the ephemeral range: a port chosen there can be taken while the
/// member is down. All listeners stay bound until every port is chosen, so the
/// ports differ; they are released just before the server binds them.
pub(crate) fn free_ports(n: usize) -> Vec<u16> {
    let below = ephemeral_range_start();
    let mut seed = std::hash::BuildHasher::hash_one(
        &std::collections::hash_map::RandomState::new(),
        std::process::id(),
    );
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(n);
    for _ in 0..100_000 {
        if listeners.len() == n {
            break;
        }
        // xorshift: any spread will do, distinct per process and call.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let port = 10_000 + (seed % u64::from(below - 10_000)) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(listener);
        }
    }
    assert_eq!(
        listeners.len(),
        n,
        "no {n} free loopback ports below {below}"
    );
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

/// The first port of `net.ipv4.ip_local_port_range` (Linux's default 32768).
fn ephemeral_range_start() -> u16 {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .filter(|start| *start > 11_000)
        .unwrap_or(32_768)
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` from a thread that lives as long as the test process.
///
/// Servers get PR_SET_PDEATHSIG so that they die with the test process even when it is
/// killed or never runs destructors (statics). The kernel fires PDEATHSIG when the
/// *thread* that forked the child exits, not the process. Tests run on short-lived
/// threads (one per test), and a helper thread may start a server that outlives it, so
/// forking from the calling thread would kill servers early. Every server is therefore
/// forked from this one long-lived thread, and dies exactly when the process does.
pub(crate) fn spawn_from_keeper_thread(cmd: Command) -> io::Result<Child> {
    static KEEPER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    let keeper = KEEPER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("zk-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("start the server spawner thread");
        tx
    });
    let (tx, rx) = mpsc::channel();
    keeper.send((cmd, tx)).expect("spawner thread is gone");
    rx.recv().expect("spawner thread dropped the request")
}

pub(crate) fn set_parent_death_signal(cmd: &mut Command) {
    // The child's parent is a thread of this process, and getppid reports its process id.
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // functions (prctl, getppid, raise), allocating nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// Connects to `addr`, sends a 4-letter word and returns the whole answer.
pub(crate) fn four_letter_at(addr: SocketAddr, cmd: &str, timeout: Duration) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(cmd.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// Sends a 4-letter word over TLS to a secure client port (with `openssl s_client`,
/// the test CA and the test client certificate) and returns the answer.
///
/// Over TLS, `cons` lists the TLS connections; over the plain port only plain ones.
pub(crate) fn four_letter_tls_at(
    addr: SocketAddr,
    cmd: &str,
    timeout: Duration,
) -> io::Result<String> {
    let pki = super::pki::pki();
    let mut child = Command::new("openssl")
        .args(["s_client", "-quiet", "-verify_return_error", "-connect"])
        .arg(addr.to_string())
        .arg("-CAfile")
        .arg(&pki.ca)
        .arg("-cert")
        .arg(&pki.client.cert)
        .arg("-key")
        .arg(&pki.client.key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(cmd.as_bytes())?;
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut answer = String::new();
        stdout.read_to_string(&mut answer).map(|_| answer)
    });
    let deadline = Instant::now() + timeout;
    while child.try_wait()?.is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "openssl s_client timed out",
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    reader.join().expect("reader thread")
}

/// The `Mode:` line of a `srvr` answer, if the server is serving.
pub(crate) fn parse_mode(srvr: &str) -> Option<String> {
    srvr.lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(|mode| mode.trim().to_string())
}

/// A server's JVM exited while starting because one of its ports was taken: another
/// process bound it between [`free_ports`] and the JVM's bind. New ports fix it.
#[derive(Debug)]
pub(crate) struct PortTaken;

/// How many times a server or ensemble is started afresh on new ports.
pub(crate) const START_ATTEMPTS: usize = 3;

pub(crate) struct Node {
    name: String,
    main_class: &'static str,
    jvm_args: Vec<String>,
    dir: TempDir,
    client_addr: SocketAddr,
    secure_addr: Option<SocketAddr>,
    start_timeout: Duration,
    child: Option<Child>,
    paused: bool,
    /// The network namespace the JVM runs in (see `netns.rs`), if not ours.
    netns: Option<String>,
}

impl Node {
    /// Writes the config (and `myid` for ensemble members); does not start the process.
    ///
    /// `secure_port` is the TLS client port, needed if and only if `opts.security` uses
    /// TLS; `client_port` stays plain (the harness's 4-letter-word probes use it).
    pub(crate) fn new(
        name: String,
        main_class: &'static str,
        client_port: u16,
        secure_port: Option<u16>,
        myid: Option<usize>,
        extra_config: &str,
        opts: &ServerOptions,
    ) -> Node {
        require_zookeeper();
        assert_eq!(
            secure_port.is_some(),
            opts.security.uses_tls(),
            "a secure port goes with TLS, and only with it"
        );
        let dir = TempDir::new();
        let (security_config, security_jvm_args) = opts.security.configure(dir.path(), secure_port);
        let data_dir = dir.path().join("data");
        fs::create_dir(&data_dir).expect("create data dir");
        if let Some(id) = myid {
            fs::write(data_dir.join("myid"), format!("{id}\n")).expect("write myid");
        }
        let config = format!(
            "tickTime={tick}\n\
             initLimit={init}\n\
             syncLimit={sync}\n\
             dataDir={data}\n\
             clientPort={client_port}\n\
             clientPortAddress=127.0.0.1\n\
             minSessionTimeout={min}\n\
             maxSessionTimeout={max}\n\
             maxClientCnxns=0\n\
             4lw.commands.whitelist=*\n\
             admin.enableServer=false\n\
             forceSync=no\n\
             {security_config}\
             {extra_config}",
            tick = opts.tick_time.as_millis(),
            init = opts.init_limit,
            sync = opts.sync_limit,
            data = data_dir.display(),
            min = opts.min_session_timeout.as_millis(),
            max = opts.max_session_timeout.as_millis(),
        );
        fs::write(dir.path().join("zoo.cfg"), config).expect("write zoo.cfg");

        let mut jvm_args: Vec<String> = [
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xshare:auto",
            "-XX:-UsePerfData",
            "-Dzookeeper.admin.enableServer=false",
            // A restarted member may find its election port briefly busy; the default
            // (3 tries) is tight on a loaded machine.
            "-Dzookeeper.electionPortBindRetry=10",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        ]
        .map(String::from)
        .to_vec();
        if let Some(interval) = opts.container_check_interval {
            jvm_args.push(format!(
                "-Dznode.container.checkIntervalMs={}",
                interval.as_millis()
            ));
            jvm_args.push("-Dznode.container.maxPerMinute=10000".to_string());
        }
        if let Some(bytes) = opts.jute_max_buffer {
            jvm_args.push(format!("-Djute.maxbuffer={bytes}"));
        }
        jvm_args.extend(security_jvm_args);
        Node {
            name,
            main_class,
            jvm_args,
            dir,
            client_addr: SocketAddr::from(([127, 0, 0, 1], client_port)),
            secure_addr: secure_port.map(|port| SocketAddr::from(([127, 0, 0, 1], port))),
            start_timeout: opts.start_timeout,
            child: None,
            paused: false,
            netns: None,
        }
    }

    /// Runs the server in the network namespace `netns`, listening for
    /// clients at `ip` (its probes must then be made from inside that
    /// network: `netns::Net::within`). Before the first spawn.
    pub(crate) fn place(&mut self, netns: &str, ip: std::net::Ipv4Addr) {
        let config = self.dir.path().join("zoo.cfg");
        let text = fs::read_to_string(&config).expect("read zoo.cfg");
        let text = text.replace(
            "clientPortAddress=127.0.0.1",
            &format!("clientPortAddress={ip}"),
        );
        fs::write(&config, text).expect("write zoo.cfg");
        self.client_addr.set_ip(ip.into());
        self.netns = Some(netns.to_owned());
    }

    /// The plain client port, which the harness's 4-letter-word probes use.
    pub(crate) fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    /// The TLS client port, if the server has one.
    pub(crate) fn secure_addr(&self) -> Option<SocketAddr> {
        self.secure_addr
    }

    /// Where clients connect: the TLS port if there is one, else the plain one.
    pub(crate) fn connect_addr(&self) -> SocketAddr {
        self.secure_addr.unwrap_or(self.client_addr)
    }

    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sets `key=value` in zoo.cfg, for the next start (a member of the
    /// same ensemble may be configured differently from the others).
    pub(crate) fn set_config(&mut self, key: &str, value: &str) {
        let path = self.dir.path().join("zoo.cfg");
        let config = fs::read_to_string(&path).expect("read zoo.cfg");
        let prefix = format!("{key}=");
        let mut lines: Vec<String> = (config.lines())
            .filter(|line| !line.starts_with(&prefix))
            .map(str::to_owned)
            .collect();
        lines.push(format!("{key}={value}"));
        fs::write(&path, lines.join("\n") + "\n").expect("write zoo.cfg");
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// Starts the JVM without waiting for it to serve.
    pub(crate) fn spawn(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.name);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open server log");
        let mut classpath = ZOOKEEPER_JAR.to_string();
        if Path::new(SLF4J_BINDING).exists() {
            classpath = format!("{classpath}:{SLF4J_BINDING}");
        }
        for jar in NETTY_EXTRA {
            if Path::new(jar).exists() {
                classpath = format!("{classpath}:{jar}");
            }
        }
        let mut cmd = match &self.netns {
            // `ip netns exec` execs the JVM: the pid stays the JVM's.
            Some(netns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", netns, JAVA]);
                cmd
            }
            None => Command::new(JAVA),
        };
        cmd.args(&self.jvm_args)
            .arg("-cp")
            .arg(classpath)
            .arg(self.main_class)
            .arg(self.dir.path().join("zoo.cfg"))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log fd"))
            .stderr(log)
            // Keeps servers out of reach of signals tests send to their own process group.
            .process_group(0);
        set_parent_death_signal(&mut cmd);
        let child = spawn_from_keeper_thread(cmd)
            .unwrap_or_else(|e| panic!("cannot start {} ({JAVA}): {e}", self.name));
        self.child = Some(child);
        self.paused = false;
    }

    /// Waits until `ruok` says `imok` and `srvr` reports a serving mode; panics if the
    /// JVM exits first (whatever the reason) or the start timeout passes.
    pub(crate) fn wait_serving(&mut self) {
        if self.try_wait_serving().is_err() {
            panic!(
                "{} could not bind its ports; log tail:\n{}",
                self.name,
                self.log_tail(40)
            );
        }
    }

    /// [`Node::wait_serving`], but a JVM that exits because one of its ports was
    /// taken is an error to recover from, not a panic.
    ///
    /// `ruok` alone is not enough: it answers `imok` before the server serves requests.
    pub(crate) fn try_wait_serving(&mut self) -> Result<(), PortTaken> {
        let deadline = Instant::now() + self.start_timeout;
        loop {
            self.check_running()?;
            if self.is_serving() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} not serving after {:?}; log tail:\n{}",
                    self.name,
                    self.start_timeout,
                    self.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Panics if the JVM has exited, unless it exited for want of one of its ports.
    pub(crate) fn check_running(&mut self) -> Result<(), PortTaken> {
        let Some(status) = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        else {
            return Ok(());
        };
        self.child = None;
        let log = fs::read_to_string(self.log_path()).unwrap_or_default();
        if log.contains("Address already in use") {
            eprintln!("{}: a port was taken before the JVM bound it", self.name);
            return Err(PortTaken);
        }
        panic!(
            "{} exited with {status} while starting; log tail:\n{}",
            self.name,
            self.log_tail(40)
        );
    }

    /// Whether the server answering at our client port is ours and serving: another
    /// test's server may have bound the port we picked.
    pub(crate) fn is_serving(&self) -> bool {
        self.is_running()
            && !self.paused
            && four_letter_at(self.client_addr, "ruok", PROBE_TIMEOUT).is_ok_and(|a| a == "imok")
            && self
                .mode()
                .is_some_and(|m| matches!(m.as_str(), "standalone" | "leader" | "follower"))
            && self.is_ours()
    }

    /// Whether the server at our client port has our data dir (`conf` names its
    /// `version-2` subdirectory).
    pub(crate) fn is_ours(&self) -> bool {
        let data_dir = format!("dataDir={}/", self.dir.path().join("data").display());
        four_letter_at(self.client_addr, "conf", PROBE_TIMEOUT)
            .is_ok_and(|conf| conf.lines().any(|line| line.starts_with(&data_dir)))
    }

    pub(crate) fn mode(&self) -> Option<String> {
        four_letter_at(self.client_addr, "srvr", PROBE_TIMEOUT)
            .ok()
            .as_deref()
            .and_then(parse_mode)
    }

    pub(crate) fn four_letter(&self, cmd: &str) -> io::Result<String> {
        four_letter_at(self.client_addr, cmd, FOUR_LETTER_TIMEOUT)
    }

    /// A 4-letter word over the TLS port (panics if there is none).
    pub(crate) fn four_letter_tls(&self, cmd: &str) -> io::Result<String> {
        let addr = self.secure_addr.expect("the server has no TLS port");
        four_letter_tls_at(addr, cmd, FOUR_LETTER_TIMEOUT)
    }

    fn send(&self, sig: libc::c_int) {
        let pid = self
            .pid()
            .unwrap_or_else(|| panic!("{} is not running", self.name));
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child,
        // so it cannot have been recycled for another process.
        if unsafe { libc::kill(pid as libc::pid_t, sig) } != 0 {
            panic!(
                "kill({pid}, {sig}) for {}: {}",
                self.name,
                io::Error::last_os_error()
            );
        }
    }

    /// SIGTERM, then waits for exit (SIGKILL if it takes longer than 30 s).
    pub(crate) fn stop(&mut self) {
        self.send(libc::SIGTERM);
        if self.paused {
            // A stopped process keeps SIGTERM pending until it runs again.
            self.send(libc::SIGCONT);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let child = self.child.as_mut().expect("running");
        while child.try_wait().expect("try_wait on server").is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = None;
        self.paused = false;
    }

    /// SIGKILL and reap.
    pub(crate) fn kill(&mut self) {
        let mut child = self
            .child
            .take()
            .unwrap_or_else(|| panic!("{} is not running", self.name));
        let _ = child.kill();
        let _ = child.wait();
        self.paused = false;
    }

    /// SIGSTOP, and waits until the kernel reports the process stopped.
    pub(crate) fn pause(&mut self) {
        self.send(libc::SIGSTOP);
        self.paused = true;
        let stat = format!("/proc/{}/stat", self.pid().expect("running"));
        let deadline = Instant::now() + Duration::from_secs(10);
        // The state is the field after the parenthesised command name.
        while !fs::read_to_string(&stat)
            .ok()
            .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('T')))
            .unwrap_or(false)
        {
            assert!(
                Instant::now() < deadline,
                "{} did not stop after SIGSTOP",
                self.name
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub(crate) fn resume(&mut self) {
        self.send(libc::SIGCONT);
        self.paused = false;
    }

    pub(crate) fn log_tail(&self, n: usize) -> String {
        let log = fs::read(self.log_path()).unwrap_or_default();
        let log = String::from_utf8_lossy(&log);
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A JVM that finds its client port taken exits, and the harness tells that apart
/// from other failures, so that it can start again on new ports.
#[test]
fn a_server_whose_port_is_taken_says_so() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = taken.local_addr().expect("local addr").port();
    let mut node = Node::new(
        format!("zk-port-taken:{port}"),
        STANDALONE_MAIN,
        port,
        None,
        None,
        "",
        &ServerOptions::default(),
    );
    node.spawn();
    assert!(node.try_wait_serving().is_err());
    assert!(!node.is_running());
}
