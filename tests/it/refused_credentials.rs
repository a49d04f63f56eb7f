//! Refused credentials end the run (issue 38): one line naming the scheme
//! and the member, exit 77, and at most one session per member tried, against
//! real servers that refuse each scheme.

use std::process::Command;
use std::time::Duration;

use crate::harness::{
    SASL_PASSWORD, SASL_USER, Security, ServerOptions, ZkServer, pki, run_bounded, unique_path,
    zklock_run,
};

/// A refusing zklock ends at once; before issue 38 a refused `digest` never
/// ended, so the bound only keeps a regression from hanging the suite.
const BOUND: Duration = Duration::from_secs(20);

fn server(security: Security) -> ZkServer {
    ZkServer::start_with(ServerOptions {
        security,
        ..ServerOptions::default()
    })
}

/// Runs `cmd` (waiting up to a minute for the lock) and checks the refusal:
/// 77, one line naming `scheme` and the member, at most one session.
pub(crate) fn refused(server: &ZkServer, mut cmd: Command, scheme: &str) {
    cmd.args(["-w", "1m", "--", "true"]);
    let out = run_bounded(&mut cmd, BOUND);
    out.assert_code(77);
    let line = out.one_error_line();
    assert!(line.contains(scheme), "{scheme}: {line}");
    assert!(line.contains(&server.connect_string()), "{scheme}: {line}");
    let opened = server.sessions();
    assert!(opened <= 1, "{scheme}: {opened} sessions opened");
}

#[test]
fn refused_digest_credentials_end_the_run_after_one_session() {
    let server = server(Security::digest_refused());
    let mut cmd = zklock_run(&server.connect_string(), &unique_path("digest-refused"));
    cmd.args(["--digest-user", "alice"])
        .env("ZKLOCK_PASSWORD", "alice-secret");
    refused(&server, cmd, "digest");
}

#[test]
fn refused_sasl_password_ends_the_run_after_one_session() {
    let server = server(Security::sasl_digest());
    let mut cmd = zklock_run(&server.connect_string(), &unique_path("sasl-refused"));
    cmd.args(["--sasl-user", SASL_USER]);
    cmd.env("ZKLOCK_PASSWORD", format!("not-{SASL_PASSWORD}"));
    refused(&server, cmd, "SASL");
}

/// A client certificate the server does not trust opens no session at all.
#[test]
fn refused_client_certificate_ends_the_run_without_a_session() {
    let server = server(Security::tls());
    let pki = pki();
    let mut cmd = zklock_run(&server.connect_string(), &unique_path("cert-refused"));
    cmd.arg("--tls-ca").arg(&pki.ca);
    cmd.arg("--tls-cert").arg(&pki.unknown_ca_client.cert);
    cmd.arg("--tls-key").arg(&pki.unknown_ca_client.key);
    refused(&server, cmd, "client certificate");
    assert_eq!(server.sessions(), 0);
}
