//! Kerberos (SASL GSSAPI, the `kerberos` feature) against the harness's MIT KDC.

use std::process::Command;
use std::time::Duration;

use crate::harness::{
    ClientSecurity, Gated, Inspector, Security, ServerOptions, TempDir, ZkServer, assert_no_nodes,
    kdc, run_bounded, unique_path, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

fn kerberos_server() -> ZkServer {
    ZkServer::start_with(ServerOptions {
        security: Security::kerberos(),
        ..ServerOptions::default()
    })
}

/// `zklock run --kerberos` with the KDC's configuration and ticket cache; the
/// server's principal is `zookeeper/localhost`.
fn kerberos_run(server: &ZkServer, path: &str) -> Command {
    let mut cmd = zklock_run(&server.connect_string(), path);
    cmd.args([
        "--kerberos",
        "--kerberos-host",
        "localhost",
        "--connect-timeout",
        "5s",
    ]);
    cmd.envs(kdc().env());
    cmd
}

#[test]
fn secure_kerberos_excludes() {
    let server = kerberos_server();
    let path = unique_path("krb-excl");
    let holder = Gated::start(kerberos_run(&server, &path));
    let mut contender = kerberos_run(&server, &path);
    contender.args(["--no-wait", "--", "true"]);
    run_bounded(&mut contender, LONG).assert_code(75);
    assert!(holder.finish().success());
    let zk = Inspector::connect_secure(&server.connect_string(), &ClientSecurity::kerberos());
    assert_no_nodes(&zk, &path);
}

#[test]
fn secure_kerberos_without_a_ticket_exits_77() {
    let server = kerberos_server();
    let scratch = TempDir::new();
    let mut cmd = kerberos_run(&server, &unique_path("krb-noticket"));
    let empty_cache = format!("FILE:{}", scratch.path().join("no-such-cache").display());
    cmd.env("KRB5CCNAME", empty_cache).args(["--", "true"]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(77);
    let line = out.one_error_line();
    eprintln!("no ticket: {line}");
    assert!(
        line.contains("GSSAPI") && line.contains("zookeeper/localhost"),
        "{line}"
    );
}

/// Without `--kerberos-host`, each connection names the server principal
/// after the member it is to (`zookeeper/localhost` here), not after the
/// first member of `-z`, which refuses connections.
#[test]
fn secure_kerberos_principal_follows_the_member_connected_to() {
    let server = kerberos_server();
    let path = unique_path("krb-member");
    let refusing = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let hosts = format!("{refusing},localhost:{}", server.addr().port());
    let mut cmd = zklock_run(&hosts, &path);
    cmd.args(["--kerberos", "--connect-timeout", "5s", "--", "true"]);
    cmd.envs(kdc().env());
    run_bounded(&mut cmd, LONG).assert_code(0);
    let zk = Inspector::connect_secure(&server.connect_string(), &ClientSecurity::kerberos());
    assert_no_nodes(&zk, &path);
}

/// Issue 38: a ticket the KDC will not give (a service it does not know)
/// ends the run at the first member: 77, one line naming GSSAPI and the
/// member, at most one session.
#[test]
fn secure_kerberos_refused_ends_the_run_after_one_session() {
    let server = kerberos_server();
    let mut cmd = kerberos_run(&server, &unique_path("krb-refused"));
    cmd.args(["--kerberos-service", "nosuchservice"]);
    crate::refused_credentials::refused(&server, cmd, "GSSAPI");
}
