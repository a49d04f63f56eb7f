//! `--ping URL`: health-check pings (healthchecks.io protocol) to a real
//! HTTP server on loopback that the test starts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::harness::{
    CertKey, Gated, Outcome, TempDir, pki, run_bounded, shared_server, unique_path, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// An HTTP server on 127.0.0.1 that answers every request with `status`
/// and records the request lines in order.
struct PingServer {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl PingServer {
    fn start(status: u16) -> PingServer {
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
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!(
            "{scheme}://{}/ping/secret-uuid",
            listener.local_addr().unwrap()
        );
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(LONG));
                let _ = stream.set_write_timeout(Some(LONG));
                match &tls {
                    Some(config) => {
                        let Ok(conn) = rustls::ServerConnection::new(Arc::clone(config)) else {
                            continue;
                        };
                        answer(rustls::StreamOwned::new(conn, stream), status, &seen);
                    }
                    None => answer(stream, status, &seen),
                }
            }
        });
        PingServer { url, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads one request, records its first line, answers `status`.
fn answer(stream: impl Read + Write, status: u16, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream);
    let mut first = String::new();
    if reader.read_line(&mut first).unwrap_or(0) == 0 {
        return; // e.g. a TLS handshake the client refused
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(n) if n > 0 && line != "\r\n" => continue,
            _ => break,
        }
    }
    seen.lock().unwrap().push(first.trim_end().to_owned());
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
    assert_eq!(
        stderr.lines().filter(|l| l.contains("ping to")).count(),
        2,
        "{stderr}"
    );
    assert!(!stderr.contains("secret-uuid"), "{stderr}");
}
