//! Naming why no session could be established: a certificate, the TLS
//! port, a Kerberos ticket, a host name that does not resolve, a server
//! that does not answer. Only on the way to a failure: never a request on
//! the path of a session that works.

use std::time::Duration;

use crate::exit::{Exit, Failure};
use crate::session::Settings;
use crate::session::tls;

/// Resolves with what is wrong with the certificates, the TLS port or the
/// Kerberos ticket if connecting has not succeeded within `after`; never
/// resolves otherwise (the client retries these failures as unreachable
/// members until the connect timeout).
pub(super) async fn credential_problem(settings: &Settings, after: Duration) -> Failure {
    if settings.tls.is_none() && !settings.uses_kerberos() {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(after).await;
    let settings = settings.clone();
    let check = tokio::task::spawn_blocking(move || {
        let hosts = settings.hosts.connect_string();
        if let Some(tls) = &settings.tls {
            if let Some(problem) = tls::diagnose(tls, hosts, after) {
                return Some(problem);
            }
        }
        settings
            .kerberos_problem()
            .map(|problem| Failure::new(Exit::NoPermission, problem))
    })
    .await;
    if let Ok(Some(problem)) = check {
        return problem;
    }
    std::future::pending().await
}

/// The servers ("name:port") of a connect string, without its chroot.
pub fn servers(connect_string: &str) -> impl Iterator<Item = &str> {
    connect_string
        .split('/')
        .next()
        .unwrap_or_default()
        .split(',')
}

/// A server's host name: without its port, nor an IPv6 address's brackets.
pub fn host_name(server: &str) -> &str {
    let name = server.rsplit_once(':').map_or(server, |(name, _)| name);
    name.trim_start_matches('[').trim_end_matches(']')
}

/// The addresses of `host` ("name:port"), or why there are none.
async fn resolve(host: &str) -> Result<Vec<std::net::SocketAddr>, String> {
    (tokio::net::lookup_host(host).await)
        .map(Iterator::collect)
        .map_err(|err| format!("cannot resolve {} (DNS: {err})", host_name(host)))
}

/// Resolves with a failure if no host of `connect_string` resolves; never
/// resolves otherwise. It runs beside the first connect attempt, so a good
/// name costs no time. A name that does not resolve is a mistake to fix,
/// not an outage to wait out: the system's resolver has already retried.
pub(super) async fn unresolvable(connect_string: &str) -> Failure {
    let mut causes = Vec::new();
    for host in servers(connect_string) {
        match resolve(host).await {
            Ok(_) => std::future::pending::<()>().await,
            Err(cause) => causes.push(cause),
        }
    }
    let message = format!(
        "no ZooKeeper session with {connect_string}: {}",
        causes.join("; ")
    );
    Failure::new(Exit::Unavailable, message)
}

/// Why `hosts` gave no session, found by resolving each host and opening a
/// TCP connection to each address, as the client does but with the errors
/// kept; within a second. None if nothing stands out.
pub(super) async fn diagnose(connect_string: &str) -> Option<String> {
    const BOUND: Duration = Duration::from_secs(1);
    let mut causes = Vec::new();
    let probing = async {
        for host in servers(connect_string) {
            let addrs = match resolve(host).await {
                Ok(addrs) => addrs,
                Err(cause) => {
                    causes.push(cause);
                    continue;
                }
            };
            for addr in addrs {
                let connecting = tokio::net::TcpStream::connect(addr);
                causes.push(match tokio::time::timeout(BOUND / 2, connecting).await {
                    Ok(Ok(_)) => {
                        format!("{addr} accepts connections but established no ZooKeeper session")
                    }
                    Ok(Err(err)) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
                        format!("connection refused by {addr}")
                    }
                    Ok(Err(err)) => format!("cannot connect to {addr}: {err}"),
                    Err(_) => format!("no answer from {addr}"),
                });
            }
        }
    };
    let _ = tokio::time::timeout(BOUND, probing).await;
    (!causes.is_empty()).then(|| causes.join("; "))
}
