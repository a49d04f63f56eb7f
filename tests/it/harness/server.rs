//! A standalone ZooKeeper server, owned by one test or shared by the whole process.

use std::io;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use super::node::{self, Node};
use super::security::Security;

/// Server settings. The defaults keep session tests short: with a 100 ms tick the
/// server checks expiry often, and sessions may be as short as 400 ms.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    pub tick_time: Duration,
    pub min_session_timeout: Duration,
    pub max_session_timeout: Duration,
    /// How often the server reaps empty container nodes (ZooKeeper's default is 60 s).
    pub container_check_interval: Option<Duration>,
    /// In ticks: how long a follower may take to connect and sync to a leader.
    pub init_limit: u32,
    /// In ticks: how long a follower may be silent before the leader drops it (and the
    /// other way round), which bounds how fast a paused member is noticed.
    pub sync_limit: u32,
    /// How long to wait for a (re)started server to serve.
    pub start_timeout: Duration,
    /// The server's `jute.maxbuffer` in bytes: it drops the connection of a client
    /// whose request is larger (ZooKeeper's default is 1 MiB - 1).
    pub jute_max_buffer: Option<usize>,
    /// TLS, SASL and auth enforcement; the default is a plain server.
    pub security: Security,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            tick_time: Duration::from_millis(100),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            container_check_interval: None,
            // Generous in ticks because the machine is shared and noisy: a follower
            // dropped for a GC pause or a busy CPU would make tests flaky.
            init_limit: 50,
            sync_limit: 20,
            start_timeout: Duration::from_secs(60),
            jute_max_buffer: None,
            security: Security::default(),
        }
    }
}

impl ServerOptions {
    /// ZooKeeper's defaults (tickTime 2000, syncLimit 5): what decides
    /// safety in production.
    pub fn production() -> ServerOptions {
        ServerOptions {
            tick_time: Duration::from_millis(2000),
            min_session_timeout: Duration::from_millis(4000),
            max_session_timeout: Duration::from_millis(40000),
            init_limit: 10,
            sync_limit: 5,
            start_timeout: Duration::from_secs(120),
            ..ServerOptions::default()
        }
    }
}

/// A standalone server on a free loopback port with its own temp data dir.
/// Dropping it kills the JVM (SIGKILL), reaps it and removes the dir.
pub struct ZkServer {
    node: Node,
}

impl ZkServer {
    pub fn start() -> ZkServer {
        ZkServer::start_with(ServerOptions::default())
    }

    pub fn start_with(opts: ServerOptions) -> ZkServer {
        for _ in 0..node::START_ATTEMPTS {
            let ports = node::free_ports(2);
            let (port, secure) = (ports[0], opts.security.uses_tls().then_some(ports[1]));
            let name = format!("zk-standalone:{port}");
            let mut node = Node::new(name, node::STANDALONE_MAIN, port, secure, None, "", &opts);
            node.spawn();
            if node.try_wait_serving().is_ok() {
                return ZkServer { node };
            }
        }
        panic!("no free port held for {} starts", node::START_ATTEMPTS);
    }

    /// `127.0.0.1:PORT`: the TLS port for a TLS server (connect with TLS, e.g.
    /// `Connector::secure_connect`), else the plain one.
    pub fn connect_string(&self) -> String {
        self.addr().to_string()
    }

    /// The address clients connect to (the TLS port for a TLS server).
    pub fn addr(&self) -> SocketAddr {
        self.node.connect_addr()
    }

    /// The plain client port. For a TLS server it exists only for the harness's
    /// 4-letter-word probes; nothing secure is enforced on it.
    pub fn plain_addr(&self) -> SocketAddr {
        self.node.client_addr()
    }

    /// The TLS client port, if the server has TLS.
    pub fn secure_addr(&self) -> Option<SocketAddr> {
        self.node.secure_addr()
    }

    /// Panics if the server is not running (stopped or killed).
    pub fn pid(&self) -> u32 {
        self.node.pid().expect("server is not running")
    }

    pub fn is_running(&self) -> bool {
        self.node.is_running()
    }

    /// SIGTERM and wait for exit.
    pub fn stop(&mut self) {
        self.node.stop();
    }

    /// SIGKILL and wait for exit.
    pub fn kill(&mut self) {
        self.node.kill();
    }

    /// Restarts on the same port and data dir (sessions and nodes survive), and waits
    /// until it serves.
    pub fn start_again(&mut self) {
        self.node.spawn();
        self.node.wait_serving();
    }

    /// Sets `key=value` in its zoo.cfg, for its next start.
    pub fn set_config(&mut self, key: &str, value: &str) {
        self.node.set_config(key, value);
    }

    /// SIGSTOP: the server keeps its sockets but answers nothing.
    pub fn pause(&mut self) {
        self.node.pause();
    }

    /// SIGCONT
    pub fn resume(&mut self) {
        self.node.resume();
    }

    /// Sends a 4-letter word ("ruok", "srvr", "cons", "dump", "wchp", "wchc", "mntr"...).
    /// Panics if the server does not answer.
    pub fn four_letter(&self, cmd: &str) -> String {
        self.try_four_letter(cmd)
            .unwrap_or_else(|e| panic!("4-letter word {cmd:?} to {}: {e}", self.plain_addr()))
    }

    pub fn try_four_letter(&self, cmd: &str) -> io::Result<String> {
        self.node.four_letter(cmd)
    }

    /// A 4-letter word over the TLS port, as the test client certificate (with
    /// `openssl s_client`). `cons` lists TLS sessions only this way. Panics on no answer.
    pub fn four_letter_tls(&self, cmd: &str) -> String {
        self.node
            .four_letter_tls(cmd)
            .unwrap_or_else(|e| panic!("4-letter word {cmd:?} over TLS to {}: {e}", self.addr()))
    }

    /// The sessions the server holds (`mntr`'s `zk_global_sessions`): a
    /// session a client abandoned counts until it expires.
    pub fn sessions(&self) -> u64 {
        let mntr = self.four_letter("mntr");
        let line = (mntr.lines())
            .find(|line| line.starts_with("zk_global_sessions"))
            .unwrap_or_else(|| panic!("no zk_global_sessions in mntr: {mntr}"));
        let count = line.split_whitespace().last().expect("a count");
        count.parse().expect("a number of sessions")
    }

    /// The last `n` lines of the server's stdout/stderr, for diagnosing failures.
    pub fn log_tail(&self, n: usize) -> String {
        self.node.log_tail(n)
    }
}

/// The one standalone server of this test process, started on first use.
///
/// For tests that do not stop, pause or kill servers; each must use its own lock path.
/// A static is never dropped, so an exit hook kills the server and removes its dir; and
/// should the process die without running it, the server still dies through its
/// parent-death signal (see `node::spawn_from_keeper_thread`).
pub fn shared_server() -> &'static ZkServer {
    static SHARED: OnceLock<ZkServer> = OnceLock::new();
    static CLEANUP: OnceLock<(u32, std::path::PathBuf)> = OnceLock::new();

    extern "C" fn cleanup_at_exit() {
        if let Some((pid, dir)) = CLEANUP.get() {
            // SAFETY: kill and waitpid have no memory-safety preconditions; the pid is our
            // child and is reaped only here, so it cannot name another process.
            unsafe {
                libc::kill(*pid as libc::pid_t, libc::SIGKILL);
                libc::waitpid(*pid as libc::pid_t, std::ptr::null_mut(), 0);
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    SHARED.get_or_init(|| {
        let server = ZkServer::start();
        let _ = CLEANUP.set((server.pid(), server.node.dir().to_path_buf()));
        // The parent of every `unique_path`, open to all: created by a test
        // with credentials, it would be persistent with that identity's ACL
        // and shut the other tests out.
        super::Inspector::connect(&server.connect_string()).create_all("/it");
        // SAFETY: registering a plain extern "C" function with atexit is sound; the hook
        // only reads a static that is fully initialised by the time it is registered.
        unsafe {
            libc::atexit(cleanup_at_exit);
        }
        server
    })
}
