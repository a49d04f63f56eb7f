//! `--ping URL`: health-check pings (healthchecks.io protocol) to a real
//! HTTP server on loopback that the test starts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::harness::{
    CertKey, Gated, Inspector, Outcome, TempDir, assert_no_lock_nodes, pki, run_bounded,
    shared_server, unique_path, wait_for_contenders, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// An HTTP server on 127.0.0.1 that answers every request with `status`
/// and records the request lines in order.
pub(crate) struct PingServer {
    pub(crate) url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl PingServer {
    pub(crate) fn start(status: u16) -> PingServer {
        PingServer::serve(status, None)
    }

    /// HTTPS with the server certificate `cert`.
    fn start_tls(status: u16, cert: &CertKey) -> PingServer {
        let chain = CertificateDer::pem_file_iter(&cert.cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&cert.key).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        PingServer::serve(status, Some(Arc::new(config)))
    }

    fn serve(status: u16, tls: Option<Arc<rustls::ServerConfig>>) -> PingServer {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let address = listen(move |stream| match &tls {
            Some(config) => {
                if let Ok(conn) = rustls::ServerConnection::new(Arc::clone(config)) {
                    answer(rustls::StreamOwned::new(conn, stream), status, &seen);
                }
            }
            None => answer(stream, status, &seen),
        });
        let url = format!("{scheme}://{address}/ping/secret-uuid");
        PingServer { url, requests }
    }

    pub(crate) fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Serves each connection to a new listener on 127.0.0.1 with `serve`, in
/// turn, on a thread; returns the listener's address.
fn listen(serve: impl Fn(TcpStream) + Send + 'static) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(LONG));
            let _ = stream.set_write_timeout(Some(LONG));
            serve(stream);
        }
    });
    address
}

/// Reads a request's head: its first line and its header lines, without
/// line endings. None when the client sent nothing (e.g. a TLS handshake it
/// refused).
fn read_head(reader: &mut impl BufRead) -> Option<(String, Vec<String>)> {
    let mut first = String::new();
    if reader.read_line(&mut first).unwrap_or(0) == 0 {
        return None;
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(n) if n > 0 && line != "\r\n" => headers.push(line.trim_end().to_owned()),
            _ => break,
        }
    }
    Some((first.trim_end().to_owned(), headers))
}

/// Reads one request, records its first line, answers `status`.
fn answer(stream: impl Read + Write, status: u16, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream);
    let Some((first, _)) = read_head(&mut reader) else {
        return;
    };
    seen.lock().unwrap().push(first);
    let stream = reader.get_mut();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let _ = stream.flush();
}

/// `zklock run --ping url` on a fresh path; no proxy between it and loopback.
fn ping_run(path: &str, url: &str, options: &[&str], command: &str) -> Outcome {
    let mut cmd = pinging(path, url);
    cmd.args(options).args(["--", "sh", "-c", command]);
    run_bounded(&mut cmd, LONG)
}

fn pinging(path: &str, url: &str) -> Command {
    let mut cmd = zklock_run(&shared_server().connect_string(), path);
    for proxy in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cmd.env_remove(proxy);
    }
    cmd.arg("--ping").arg(url);
    cmd
}

#[test]
fn the_host_that_runs_pings_start_then_its_exit_status() {
    let server = PingServer::start(200);
    let out = ping_run(&unique_path("ping-ok"), &server.url, &[], "exit 0");
    out.assert_code(0);
    assert_eq!(
        server.requests(),
        [
            "GET /ping/secret-uuid/start HTTP/1.1",
            "GET /ping/secret-uuid HTTP/1.1"
        ]
    );
    let server = PingServer::start(200);
    // From the environment too, and the command does not see it.
    let mut cmd = zklock_run(&shared_server().connect_string(), &unique_path("ping-3"));
    cmd.env("ZKLOCK_PING", &server.url).args([
        "--",
        "sh",
        "-c",
        "test -z \"$ZKLOCK_PING\" && exit 3",
    ]);
    run_bounded(&mut cmd, LONG).assert_code(3);
    assert_eq!(
        server.requests(),
        [
            "GET /ping/secret-uuid/start HTTP/1.1",
            "GET /ping/secret-uuid/3 HTTP/1.1"
        ]
    );
}

#[test]
fn hosts_that_do_not_run_send_nothing_or_a_plain_ping() {
    let path = unique_path("ping-held");
    let holder = Gated::start(zklock_run(&shared_server().connect_string(), &path));
    let server = PingServer::start(200);
    ping_run(&path, &server.url, &["--no-wait"], "exit 0").assert_code(75);
    assert_eq!(server.requests(), Vec::<String>::new());
    ping_run(
        &path,
        &server.url,
        &["--no-wait", "--ping-skipped"],
        "exit 0",
    )
    .assert_code(75);
    assert_eq!(server.requests(), ["GET /ping/secret-uuid HTTP/1.1"]);
    assert!(holder.finish().success());
}

#[test]
fn a_failing_ping_changes_nothing_but_one_line() {
    let server = PingServer::start(500);
    let dir = TempDir::new();
    let metrics = dir.path().join("job.prom");
    let metrics_arg = format!("--metrics-file={}", metrics.display());
    let out = ping_run(
        &unique_path("ping-500"),
        &server.url,
        &[&metrics_arg],
        "exit 4",
    );
    out.assert_code(4);
    let report = std::fs::read_to_string(&metrics).unwrap();
    assert!(report.contains("zklock_ping_failures{path=\""), "{report}");
    assert!(report.contains("\"} 2\n"), "{report}");
    assert_eq!(server.requests().len(), 2);
    let failed: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("ping to"))
        .collect();
    assert_eq!(failed.len(), 2, "{}", out.stderr);
    assert!(failed[0].contains("http://127.0.0.1:"), "{}", failed[0]);
    assert!(!out.stderr.contains("secret-uuid"), "{}", out.stderr);

    // A closed port: connection refused, retried, then one line per ping.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/ping/secret-uuid", closed.local_addr().unwrap());
    drop(closed);
    let out = ping_run(&unique_path("ping-refused"), &url, &[], "exit 0");
    out.assert_code(0);
    assert_eq!(
        out.stderr.lines().filter(|l| l.contains("ping to")).count(),
        2,
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("secret-uuid"), "{}", out.stderr);
    let out = ping_run(&unique_path("ping-quiet"), &url, &["-q"], "exit 0");
    out.assert_code(0);
    assert_eq!(out.stderr, "");
}

#[test]
fn a_url_that_is_not_http_is_a_usage_error() {
    let out = ping_run(
        &unique_path("ping-bad"),
        "ftp://hc/secret-uuid",
        &[],
        "exit 0",
    );
    out.assert_code(64);
    assert!(!out.stderr.contains("secret-uuid"), "{}", out.stderr);
}

#[test]
fn https_is_verified_against_the_ca_bundle_of_the_environment() {
    let server = PingServer::start_tls(200, &pki().server);
    let mut cmd = pinging(&unique_path("ping-tls"), &server.url);
    cmd.env("SSL_CERT_FILE", &pki().ca).args(["--", "true"]);
    run_bounded(&mut cmd, LONG).assert_code(0);
    assert_eq!(
        server.requests(),
        [
            "GET /ping/secret-uuid/start HTTP/1.1",
            "GET /ping/secret-uuid HTTP/1.1"
        ]
    );

    // A server whose CA is not trusted gets no request.
    let server = PingServer::start_tls(200, &pki().unknown_ca_server);
    let mut cmd = pinging(&unique_path("ping-tls-unknown"), &server.url);
    cmd.env("SSL_CERT_FILE", &pki().ca).args(["--", "true"]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(0);
    assert_eq!(server.requests(), Vec::<String>::new());
    assert_eq!(
        out.stderr
            .lines()
            .filter(|l| l.contains("ping to https://127.0.0.1:"))
            .count(),
        2,
        "{}",
        out.stderr
    );
}

/// A server that accepts and never answers: the command starts without
/// waiting for the start ping, each ping gives up at its bound (10 s), and the
/// exit status is the command's.
#[test]
fn a_hanging_server_delays_neither_the_command_nor_the_status() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/ping/secret-uuid", listener.local_addr().unwrap());
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&held);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            keep.lock().unwrap().push(stream); // open, silent
        }
    });
    let dir = TempDir::new();
    let started = dir.path().join("started");
    let begun = std::time::Instant::now();
    let mut cmd = pinging(&unique_path("ping-hang"), &url);
    cmd.args(["--", "sh", "-c", "touch \"$1\"; exit 5", "sh"])
        .arg(&started);
    let mut zklock = crate::harness::KillOnDrop(
        cmd.stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn zklock"),
    );
    crate::harness::wait_until(LONG, "the command started", || started.exists());
    // Well inside the ping's own bound: the command did not wait for it.
    assert!(
        begun.elapsed() < Duration::from_secs(8),
        "the command started {:?} after zklock",
        begun.elapsed()
    );
    let status = crate::harness::wait_for_exit(&mut zklock, LONG).expect("zklock ends");
    assert_eq!(status.code(), Some(5));
    let mut stderr = String::new();
    zklock
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let failed: Vec<&str> = stderr.lines().filter(|l| l.contains("ping to")).collect();
    assert_eq!(failed.len(), 2, "{stderr}");
    // What took too long, and after how long.
    for line in failed {
        assert!(line.ends_with("failed: no answer within 10s"), "{line}");
    }
    assert!(!stderr.contains("secret-uuid"), "{stderr}");
}

/// healthchecks.io's auto-provisioning form, `.../KEY/slug?create=1`: the
/// suffix goes on the path, before the query; a fragment is never sent.
#[test]
fn the_suffix_goes_on_the_path_before_the_query() {
    let server = PingServer::start(200);
    let url = format!("{}?create=1#note", server.url);
    ping_run(&unique_path("ping-query"), &url, &[], "exit 2").assert_code(2);
    assert_eq!(
        server.requests(),
        [
            "GET /ping/secret-uuid/start?create=1 HTTP/1.1",
            "GET /ping/secret-uuid/2?create=1 HTTP/1.1"
        ]
    );
}

/// `--ping-skipped` after a failure: the hosts that skip within
/// `--retry-after` send nothing, so the check stays failed; a skip after a
/// success is a heartbeat, as before.
#[test]
fn hosts_that_skip_after_a_failure_send_nothing() {
    let options = ["--once-per", "1h", "--retry-after", "1h", "--ping-skipped"];
    let server = PingServer::start(200);
    let path = unique_path("ping-retry-after");
    ping_run(&path, &server.url, &options, "exit 2").assert_code(2);
    for _ in 0..2 {
        let out = ping_run(&path, &server.url, &options, "exit 0");
        out.assert_code(75);
        assert!(
            out.stderr.contains("and failed (exit status 2)"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(
        server.requests(),
        [
            "GET /ping/secret-uuid/start HTTP/1.1",
            "GET /ping/secret-uuid/2 HTTP/1.1"
        ]
    );

    let server = PingServer::start(200);
    let path = unique_path("ping-recent");
    ping_run(&path, &server.url, &options, "exit 0").assert_code(0);
    ping_run(&path, &server.url, &options, "exit 0").assert_code(75);
    assert_eq!(
        server.requests(),
        [
            "GET /ping/secret-uuid/start HTTP/1.1",
            "GET /ping/secret-uuid HTTP/1.1",
            "GET /ping/secret-uuid HTTP/1.1"
        ]
    );
}

/// A forward HTTP proxy on 127.0.0.1 that behaves as squid's default
/// configuration does: a request in absolute form (`GET http://host/path`)
/// is forwarded to its host, CONNECT is refused (403) to ports other than
/// 443. Records the request lines it gets, each followed by its
/// Proxy-Authorization header if it has one.
struct ForwardProxy {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl ForwardProxy {
    fn start() -> ForwardProxy {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let address = listen(move |stream| forward(stream, &seen));
        let url = format!("http://{address}");
        ForwardProxy { url, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Serves one client of [`ForwardProxy`].
fn forward(stream: TcpStream, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream);
    let Some((first, headers)) = read_head(&mut reader) else {
        return;
    };
    let credentials = (headers.into_iter()).find(|h| h.starts_with("Proxy-Authorization:"));
    seen.lock()
        .unwrap()
        .extend([first.clone()].into_iter().chain(credentials));
    let mut client = reader.into_inner();
    let target = first
        .strip_prefix("GET http://")
        .and_then(|rest| rest.strip_suffix(" HTTP/1.1"))
        .and_then(|rest| rest.split_once('/'));
    let Some((authority, path)) = target else {
        // CONNECT to a port other than 443, or anything else.
        let _ = write!(
            client,
            "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        return;
    };
    let mut upstream = TcpStream::connect(authority).unwrap();
    write!(
        upstream,
        "GET /{path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = upstream.read_to_end(&mut answer);
    let _ = client.write_all(&answer);
}

/// Through an HTTP proxy (`HTTP_PROXY`), an http:// ping is a plain request
/// in absolute form, as curl sends it, not a CONNECT tunnel.
#[test]
fn an_http_ping_goes_through_a_proxy_as_a_plain_request() {
    let server = PingServer::start(200);
    let proxy = ForwardProxy::start();
    let mut cmd = pinging(&unique_path("ping-proxy"), &server.url);
    cmd.env("HTTP_PROXY", &proxy.url)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .args(["--", "sh", "-c", "exit 3"]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(3);
    assert!(!out.stderr.contains("ping to"), "{}", out.stderr);
    assert_eq!(
        proxy.requests(),
        [
            format!("GET {}/start HTTP/1.1", server.url),
            format!("GET {}/3 HTTP/1.1", server.url)
        ]
    );
    assert_eq!(
        server.requests(),
        [
            "GET /ping/secret-uuid/start HTTP/1.1",
            "GET /ping/secret-uuid/3 HTTP/1.1"
        ]
    );

    // The proxy's credentials, from its URL.
    let proxy = ForwardProxy::start();
    let with_user = proxy.url.replace("http://", "http://ops:p%40ss@");
    let mut cmd = pinging(&unique_path("ping-proxy-auth"), &server.url);
    cmd.env("HTTP_PROXY", with_user)
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .args(["--", "true"]);
    run_bounded(&mut cmd, LONG).assert_code(0);
    // base64("ops:p@ss")
    let credentials = "Proxy-Authorization: Basic b3BzOnBAc3M=";
    assert_eq!(
        proxy.requests(),
        [
            format!("GET {}/start HTTP/1.1", server.url),
            credentials.to_owned(),
            format!("GET {} HTTP/1.1", server.url),
            credentials.to_owned(),
        ]
    );
}

/// A command gone by the time the lock is held (removed while zklock
/// waited) is the failure of the host that took the lock: its exit status
/// is pinged, as a command that ran and failed would be.
#[test]
fn a_command_that_cannot_start_under_the_lock_pings_its_failure() {
    use std::os::unix::fs::PermissionsExt;
    let path = unique_path("ping-gone");
    let connect = shared_server().connect_string();
    let holder = Gated::start(zklock_run(&connect, &path));
    let server = PingServer::start(200);
    let dir = TempDir::new();
    let job = dir.path().join("job");
    std::fs::write(&job, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&job, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut waiter = pinging(&path, &server.url);
    waiter.arg("--").arg(&job);
    let waiter = std::thread::spawn(move || run_bounded(&mut waiter, LONG));
    let zk = Inspector::connect(&connect);
    wait_for_contenders(&zk, &path, "-lock-", 2);
    std::fs::remove_file(&job).unwrap();
    assert!(holder.finish().success());
    let out = waiter.join().unwrap();
    out.assert_code(127);
    assert_eq!(server.requests(), ["GET /ping/secret-uuid/127 HTTP/1.1"]);
    assert_no_lock_nodes(&zk, &path);
}
