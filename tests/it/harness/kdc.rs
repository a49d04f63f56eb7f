//! A throwaway MIT Kerberos KDC on loopback, one per test process, started on first use.
//!
//! Realm [`REALM`], database, config, keytabs and the client's ticket cache all live in
//! one directory, [`krb5_dir`] (`$TMPDIR/zklock-it-<pid>-krb5`). Its path is fixed per
//! process so that, with the `kerberos` feature, the test process's own environment
//! can name it before `main` runs (see [`export_env_before_main`]); GSSAPI in the
//! inspector reads `KRB5_CONFIG` and `KRB5CCNAME` from there. Child processes (zklock)
//! should get [`Kdc::env`] on their `Command` instead.

use std::fs;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::node::{set_parent_death_signal, spawn_from_keeper_thread};

pub const REALM: &str = "ZKLOCK.TEST";
/// The client principal's name (without realm) and password.
pub const KRB_CLIENT: &str = "zkclient";
pub const KRB_CLIENT_PASSWORD: &str = "zkclient-secret";
/// The principal of a second client, which has a keytab but no ticket in the cache.
pub const KRB_OTHER_CLIENT: &str = "zkother";

const KDC_BINARIES: [(&str, &str); 4] = [
    ("/usr/sbin/krb5kdc", "krb5-kdc"),
    ("/usr/sbin/kdb5_util", "krb5-kdc"),
    ("/usr/sbin/kadmin.local", "krb5-admin-server"),
    ("/usr/bin/kinit", "krb5-user"),
];

/// The directory of this process's KDC (it need not exist yet).
pub fn krb5_dir() -> PathBuf {
    std::env::temp_dir().join(format!("zklock-it-{}-krb5", std::process::id()))
}

/// Sets `KRB5_CONFIG` and `KRB5CCNAME` of the test process to the shared KDC's files.
///
/// GSSAPI (libkrb5) reads them with `getenv`, and changing the environment while other
/// threads may read it is undefined behaviour; so this runs from `.init_array`, before
/// `main`, while the process has one thread. The files appear when the KDC starts.
#[cfg(feature = "kerberos")]
#[used]
#[unsafe(link_section = ".init_array")]
static EXPORT_ENV_BEFORE_MAIN: extern "C" fn() = export_env_before_main;

#[cfg(feature = "kerberos")]
extern "C" fn export_env_before_main() {
    let dir = krb5_dir();
    // SAFETY: this runs from .init_array, before main and before any other thread
    // exists, so nothing can read or write the environment concurrently.
    unsafe {
        std::env::set_var("KRB5_CONFIG", dir.join("krb5.conf"));
        std::env::set_var(
            "KRB5CCNAME",
            format!("FILE:{}", dir.join("ccache").display()),
        );
    }
}

/// A running KDC with the principals the tests need:
/// - `zookeeper/localhost@ZKLOCK.TEST`, key in [`Kdc::server_keytab`];
/// - `zkclient@ZKLOCK.TEST` with password [`KRB_CLIENT_PASSWORD`] and a keytab
///   [`Kdc::client_keytab`], already `kinit`ed into [`Kdc::ccache`];
/// - `zkother@ZKLOCK.TEST` with a keytab [`Kdc::other_client_keytab`].
pub struct Kdc {
    dir: PathBuf,
    port: u16,
    pid: u32,
}

impl Kdc {
    pub fn realm(&self) -> &'static str {
        REALM
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The KDC's TCP (and UDP) port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The client-side `krb5.conf` (for `KRB5_CONFIG` and `-Djava.security.krb5.conf`).
    pub fn krb5_conf(&self) -> PathBuf {
        self.dir.join("krb5.conf")
    }

    /// `FILE:<dir>/ccache`, holding a TGT of `zkclient@ZKLOCK.TEST`.
    pub fn ccache(&self) -> String {
        format!("FILE:{}", self.dir.join("ccache").display())
    }

    /// `KRB5_CONFIG` and `KRB5CCNAME` for a child process that acts as the client.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("KRB5_CONFIG", self.krb5_conf().display().to_string()),
            ("KRB5CCNAME", self.ccache()),
        ]
    }

    pub fn server_principal(&self) -> String {
        format!("zookeeper/localhost@{REALM}")
    }

    pub fn server_keytab(&self) -> PathBuf {
        self.dir.join("zookeeper.keytab")
    }

    pub fn client_principal(&self) -> String {
        format!("{KRB_CLIENT}@{REALM}")
    }

    pub fn client_keytab(&self) -> PathBuf {
        self.dir.join("zkclient.keytab")
    }

    pub fn other_client_principal(&self) -> String {
        format!("{KRB_OTHER_CLIENT}@{REALM}")
    }

    pub fn other_client_keytab(&self) -> PathBuf {
        self.dir.join("zkother.keytab")
    }

    /// `kinit`s `principal` from `keytab` into the ticket cache `ccache` (`FILE:...`).
    pub fn kinit(&self, principal: &str, keytab: &Path, ccache: &str) {
        run(Command::new("/usr/bin/kinit")
            .args(["-k", "-t"])
            .arg(keytab)
            .arg(principal)
            .env("KRB5_CONFIG", self.krb5_conf())
            .env("KRB5CCNAME", ccache));
    }

    /// `kdestroy` of a ticket cache.
    pub fn kdestroy(&self, ccache: &str) {
        let _ = Command::new("/usr/bin/kdestroy")
            .env("KRB5_CONFIG", self.krb5_conf())
            .env("KRB5CCNAME", ccache)
            .output();
    }

    pub fn log_tail(&self, n: usize) -> String {
        let log = fs::read_to_string(self.dir.join("kdc.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A port free on 127.0.0.1 for both TCP and UDP (the KDC listens on both).
fn free_tcp_udp_port() -> u16 {
    for _ in 0..50 {
        let tcp = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = tcp.local_addr().expect("local addr").port();
        if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no loopback port free for both TCP and UDP");
}

/// The KDC of this test process, started on first use (a second or two).
pub fn kdc() -> &'static Kdc {
    static KDC: OnceLock<Kdc> = OnceLock::new();
    static CLEANUP: OnceLock<(u32, PathBuf)> = OnceLock::new();

    extern "C" fn cleanup_at_exit() {
        if let Some((pid, dir)) = CLEANUP.get() {
            // SAFETY: kill and waitpid have no memory-safety preconditions; the pid is our
            // child and is reaped only here, so it cannot name another process.
            unsafe {
                libc::kill(*pid as libc::pid_t, libc::SIGKILL);
                libc::waitpid(*pid as libc::pid_t, std::ptr::null_mut(), 0);
            }
            let _ = fs::remove_dir_all(dir);
        }
    }

    KDC.get_or_init(|| {
        let (kdc, child) = start();
        // The child is reaped by the exit hook; forgetting the handle keeps it unreaped
        // (and its pid ours) until then.
        std::mem::forget(child);
        let _ = CLEANUP.set((kdc.pid, kdc.dir.clone()));
        // SAFETY: registering a plain extern "C" function with atexit is sound; the hook
        // only reads a static that is fully initialised by the time it is registered.
        unsafe {
            libc::atexit(cleanup_at_exit);
        }
        kdc
    })
}

fn start() -> (Kdc, Child) {
    for (path, package) in KDC_BINARIES {
        assert!(
            Path::new(path).exists(),
            "{path} not found: Kerberos tests need an MIT KDC; install the Debian \
             package {package} (`sudo apt-get install krb5-kdc krb5-admin-server krb5-user`)"
        );
    }
    let dir = krb5_dir();
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create the KDC dir");
    let port = free_tcp_udp_port();
    let d = dir.display();
    // Loopback only, no DNS, TCP first (Java and MIT alike), and no host name
    // canonicalisation: the server principal is zookeeper/localhost.
    let krb5_conf = format!(
        "[libdefaults]\n\
         default_realm = {REALM}\n\
         dns_lookup_kdc = false\n\
         dns_lookup_realm = false\n\
         dns_canonicalize_hostname = false\n\
         rdns = false\n\
         udp_preference_limit = 1\n\
         forwardable = false\n\
         ticket_lifetime = 24h\n\
         [realms]\n\
         {REALM} = {{\n  kdc = 127.0.0.1:{port}\n  admin_server = 127.0.0.1:{port}\n}}\n\
         [domain_realm]\n\
         localhost = {REALM}\n\
         127.0.0.1 = {REALM}\n"
    );
    let kdc_conf = format!(
        "[kdcdefaults]\n\
         kdc_ports = {port}\n\
         kdc_tcp_ports = {port}\n\
         [realms]\n\
         {REALM} = {{\n  \
           database_name = {d}/principal\n  \
           key_stash_file = {d}/stash\n  \
           acl_file = {d}/kadm5.acl\n  \
           kdc_ports = {port}\n  \
           kdc_tcp_ports = {port}\n  \
           max_life = 24h\n}}\n\
         [logging]\n\
         kdc = FILE:{d}/kdc.log\n\
         admin_server = FILE:{d}/kadmin.log\n\
         default = FILE:{d}/krb5lib.log\n"
    );
    fs::write(dir.join("krb5.conf"), krb5_conf).expect("write krb5.conf");
    fs::write(dir.join("kdc.conf"), kdc_conf).expect("write kdc.conf");
    fs::write(dir.join("kadm5.acl"), "").expect("write kadm5.acl");
    let env = |cmd: &mut Command| {
        cmd.env("KRB5_CONFIG", dir.join("krb5.conf"))
            .env("KRB5_KDC_PROFILE", dir.join("kdc.conf"))
            .env("KRB5CCNAME", format!("FILE:{d}/ccache"))
            .stdin(Stdio::null());
    };
    let mut create = Command::new("/usr/sbin/kdb5_util");
    create.args(["create", "-s", "-r", REALM, "-P", "zklock-master-key"]);
    env(&mut create);
    run(&mut create);
    let server_principal = format!("zookeeper/localhost@{REALM}");
    let queries = [
        format!("addprinc -randkey {server_principal}"),
        format!("ktadd -k {d}/zookeeper.keytab {server_principal}"),
        format!("addprinc -pw {KRB_CLIENT_PASSWORD} {KRB_CLIENT}@{REALM}"),
        // -norandkey keeps the password valid next to the keytab.
        format!("ktadd -norandkey -k {d}/zkclient.keytab {KRB_CLIENT}@{REALM}"),
        format!("addprinc -randkey {KRB_OTHER_CLIENT}@{REALM}"),
        format!("ktadd -k {d}/zkother.keytab {KRB_OTHER_CLIENT}@{REALM}"),
    ];
    for query in queries {
        let mut kadmin = Command::new("/usr/sbin/kadmin.local");
        kadmin.args(["-r", REALM, "-q", &query]);
        env(&mut kadmin);
        run(&mut kadmin);
    }
    let mut cmd = Command::new("/usr/sbin/krb5kdc");
    cmd.args(["-n", "-r", REALM])
        .stdout(fs::File::create(dir.join("krb5kdc.out")).expect("create kdc output"))
        .stderr(fs::File::create(dir.join("krb5kdc.err")).expect("create kdc output"));
    env(&mut cmd);
    set_parent_death_signal(&mut cmd);
    let mut child = spawn_from_keeper_thread(cmd).expect("start krb5kdc");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "krb5kdc exited with {status}: {}\n{}",
                fs::read_to_string(dir.join("krb5kdc.err")).unwrap_or_default(),
                fs::read_to_string(dir.join("kdc.log")).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "krb5kdc not listening after 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let kdc = Kdc {
        dir: dir.clone(),
        port,
        pid: child.id(),
    };
    kdc.kinit(&kdc.client_principal(), &kdc.client_keytab(), &kdc.ccache());
    (kdc, child)
}
