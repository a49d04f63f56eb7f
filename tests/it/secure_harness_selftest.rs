//! Self-tests of the secure-ensemble harness: each kind of secure server starts, the
//! inspector gets in with the right credentials and not without. They also print
//! (with `--nocapture`) what each failure looks like from zklock's client and how
//! long it takes.

use std::time::{Duration, Instant};

use zklock::zk::client::ConnectError;

use crate::harness::{
    CLIENT_DN, ClientAuth, ClientSecurity, Ensemble, Inspector, SASL_OTHER_USER, SASL_PASSWORD,
    SASL_USER, Security, ServerCert, ServerOptions, ZkServer, pki, shared_server, unique_path,
    wait_until,
};

/// Session timeout of connects expected to fail: it bounds how long the client retries.
const FAILING_SESSION_TIMEOUT: Duration = Duration::from_secs(4);

fn secure_server(security: Security) -> ZkServer {
    ZkServer::start_with(ServerOptions {
        security,
        ..ServerOptions::default()
    })
}

/// Connects as `security` says, expecting failure; returns the error and how long
/// the client took to report it.
fn expect_failure(
    what: &str,
    connect: &str,
    security: &ClientSecurity,
) -> (ConnectError, Duration) {
    let started = Instant::now();
    let result = Inspector::try_connect_secure(connect, security, FAILING_SESSION_TIMEOUT);
    let elapsed = started.elapsed();
    match result {
        Ok(zk) => panic!(
            "{what}: connected (session {:#x}) but should not have",
            zk.session_id()
        ),
        Err(e) => {
            eprintln!(
                "OBSERVED {what} (fail_eagerly={}): Err({e:?}) \"{e}\" after {elapsed:?}",
                security.fail_eagerly
            );
            (e, elapsed)
        }
    }
}

/// Both with and without `fail_eagerly`.
fn expect_failure_both(what: &str, connect: &str, security: ClientSecurity) -> ConnectError {
    let (eager, _) = expect_failure(what, connect, &security.clone().with_fail_eagerly());
    let (patient, _) = expect_failure(what, connect, &security);
    eprintln!("OBSERVED {what}: eager {eager:?}, patient {patient:?}");
    patient
}

/// An op on a session that should be usable.
fn round_trip(zk: &Inspector, name: &str) {
    let path = unique_path(name);
    zk.create_all(&path);
    zk.create(&format!("{path}/child"), b"x", true);
    assert!(zk.exists(&path));
    assert!(zk.delete(&format!("{path}/child")));
    assert!(zk.delete(&path));
}

#[test]
fn secure_harness_tls_needs_a_client_certificate() {
    let server = secure_server(Security::tls());
    let connect = server.connect_string();

    let zk = Inspector::connect_secure(&connect, &ClientSecurity::tls());
    round_trip(&zk, "tls-mtls");
    let ids = zk.whoami();
    eprintln!("OBSERVED mTLS whoami: {ids:?}");
    assert!(
        ids.contains(&("x509".to_string(), CLIENT_DN.to_string())),
        "{ids:?}"
    );
    // Hostname `localhost` matches the DNS SAN as well.
    let port = server.addr().port();
    let by_name = Inspector::connect_secure(&format!("localhost:{port}"), &ClientSecurity::tls());
    round_trip(&by_name, "tls-by-name");
    drop((zk, by_name));

    expect_failure_both(
        "TLS, no client cert, clientAuth=need",
        &connect,
        ClientSecurity::tls_without_identity(),
    );
    let pki = pki();
    expect_failure_both(
        "TLS, client cert of an unknown CA, clientAuth=need",
        &connect,
        ClientSecurity::tls_custom(
            pki.ca_pem(),
            Some((
                pki.unknown_ca_client.cert_pem(),
                pki.unknown_ca_client.key_pem(),
            )),
        ),
    );
    expect_failure_both(
        "plaintext client to the TLS port",
        &connect,
        ClientSecurity::default(),
    );
    // The 4lw probe port stays plain and answers.
    assert_eq!(server.four_letter("ruok"), "imok");
}

#[test]
fn secure_harness_tls_want_and_none_admit_clients_without_certificate() {
    for client_auth in [ClientAuth::Want, ClientAuth::None] {
        let server = secure_server(Security::tls_with(client_auth, ServerCert::Good));
        let connect = server.connect_string();
        let anonymous =
            Inspector::connect_secure(&connect, &ClientSecurity::tls_without_identity());
        round_trip(&anonymous, "tls-want-anon");
        let x509 = |ids: &[(String, String)]| ids.iter().any(|(scheme, _)| scheme == "x509");
        let ids = anonymous.whoami();
        assert!(
            !x509(&ids),
            "clientAuth={client_auth:?}, no client cert: {ids:?}"
        );
        // Asked for (want), a certificate is an identity; not asked for
        // (none), it is never sent.
        let ids = Inspector::connect_secure(&connect, &ClientSecurity::tls()).whoami();
        let known = ids.contains(&("x509".to_string(), CLIENT_DN.to_string()));
        assert_eq!(
            known,
            client_auth == ClientAuth::Want,
            "clientAuth={client_auth:?}, client cert: {ids:?}"
        );
    }
}

#[test]
fn secure_harness_tls_server_certificate_unknown_ca() {
    let server = secure_server(Security::tls_with(ClientAuth::Need, ServerCert::UnknownCa));
    expect_failure_both(
        "TLS, server cert signed by an unknown CA",
        &server.connect_string(),
        ClientSecurity::tls(),
    );
    // The client trusting that CA instead gets in (the server still trusts our client).
    let pki = pki();
    let trusting = ClientSecurity::tls_custom(
        pki.other_ca_pem(),
        Some((pki.client.cert_pem(), pki.client.key_pem())),
    );
    let zk = Inspector::connect_secure(&server.connect_string(), &trusting);
    round_trip(&zk, "tls-other-ca");
}

#[test]
fn secure_harness_tls_server_certificate_wrong_name() {
    let server = secure_server(Security::tls_with(ClientAuth::Need, ServerCert::WrongName));
    let connect = server.connect_string();
    expect_failure_both(
        "TLS, server cert SAN DNS:wrong.example only",
        &connect,
        ClientSecurity::tls(),
    );
    let mut lax = ClientSecurity::tls();
    lax.tls.as_mut().expect("tls").hostname_verification = false;
    let zk = Inspector::connect_secure(&connect, &lax);
    round_trip(&zk, "tls-no-hostname-check");
}

#[test]
fn secure_harness_tls_server_certificate_expired() {
    let server = secure_server(Security::tls_with(ClientAuth::Need, ServerCert::Expired));
    expect_failure_both(
        "TLS, expired server cert",
        &server.connect_string(),
        ClientSecurity::tls(),
    );
}

#[test]
fn secure_harness_tls_ensemble_fails_over() {
    let mut ensemble = Ensemble::start_with(
        3,
        ServerOptions {
            security: Security::tls(),
            ..ServerOptions::default()
        },
    );
    // Only member 0 at first, so that we know which one to kill.
    let zk = Inspector::connect_secure(&ensemble.member_connect_string(0), &ClientSecurity::tls());
    round_trip(&zk, "tls-ensemble");
    drop(zk);
    let zk = Inspector::connect_secure(&ensemble.connect_string(), &ClientSecurity::tls());
    let path = unique_path("tls-ensemble-failover");
    zk.create_all(&path);
    for i in 0..3 {
        let cons = ensemble.try_four_letter_tls(i, "cons").unwrap_or_default();
        if cons.contains(&format!("sid=0x{:x}", zk.session_id())) {
            eprintln!("inspector is on member {i}; killing it");
            let started = Instant::now();
            ensemble.kill(i);
            // A request sent before the client notices the dead connection
            // fails with it (ZooKeeper's connection loss); a client retries.
            let mut errors = Vec::new();
            wait_until(
                Duration::from_secs(30),
                "an op on another member",
                || match zk.try_exists(&path) {
                    Ok(found) => found,
                    Err(err) => {
                        errors.push(err.to_string());
                        false
                    }
                },
            );
            eprintln!("errors before failing over: {errors:?}");
            eprintln!(
                "OBSERVED TLS ensemble: op after killing our member took {:?}",
                started.elapsed()
            );
            return;
        }
    }
    panic!(
        "no member lists session {:#x} in cons:\n{}",
        zk.session_id(),
        ensemble.try_four_letter_tls(0, "cons").unwrap_or_default()
    );
}

#[test]
fn secure_harness_sasl_digest_md5() {
    let server = secure_server(Security::sasl_digest());
    let connect = server.connect_string();

    let zk = Inspector::connect_secure(
        &connect,
        &ClientSecurity::sasl_digest(SASL_USER, SASL_PASSWORD),
    );
    round_trip(&zk, "sasl-digest");
    let ids = zk.whoami();
    eprintln!("OBSERVED SASL DIGEST-MD5 whoami: {ids:?}");
    assert!(
        ids.contains(&("sasl".to_string(), SASL_USER.to_string())),
        "{ids:?}"
    );
    drop(zk);

    expect_failure_both(
        "SASL DIGEST-MD5, wrong password",
        &connect,
        ClientSecurity::sasl_digest(SASL_USER, "wrong-password"),
    );
    // A SASL user's password belongs to that user only.
    expect_failure(
        "SASL DIGEST-MD5, other user's name with our password",
        &connect,
        &ClientSecurity::sasl_digest(SASL_OTHER_USER, SASL_PASSWORD).with_fail_eagerly(),
    );
    enforced_without_auth("enforce.auth=sasl", &connect);
}

/// An unauthenticated client on a server that enforces auth: does connect fail, or the
/// first op? Records both, and fails if the op succeeds.
fn enforced_without_auth(what: &str, connect: &str) {
    let what = format!("{what}, no auth");
    let ids = observe(
        &what,
        connect,
        &ClientSecurity::default().with_fail_eagerly(),
    );
    assert!(ids.is_none(), "{what}: an op succeeded as {ids:?}");
}

/// Connects; if that works, tries an op. Returns `whoami` if the op succeeded.
fn observe(what: &str, connect: &str, security: &ClientSecurity) -> Option<Vec<(String, String)>> {
    let started = Instant::now();
    match Inspector::try_connect_secure(connect, security, FAILING_SESSION_TIMEOUT) {
        Err(e) => {
            eprintln!(
                "OBSERVED {what}: connect Err({e:?}) after {:?}",
                started.elapsed()
            );
            None
        }
        Ok(mut zk) => {
            eprintln!(
                "OBSERVED {what}: connected after {:?}, state {:?}",
                started.elapsed(),
                zk.state()
            );
            zk.set_op_timeout(Duration::from_secs(10));
            let started = Instant::now();
            let result = zk.try_exists("/");
            eprintln!(
                "OBSERVED {what}: exists(/) = {result:?} after {:?}, state then {:?}",
                started.elapsed(),
                zk.state()
            );
            result.ok().map(|_| {
                let ids = zk.whoami();
                eprintln!("OBSERVED {what}: whoami {ids:?}");
                ids
            })
        }
    }
}

#[test]
fn secure_harness_digest_auth() {
    // On a plain server, addauth digest (at connect or later) always succeeds: the
    // digest scheme checks nothing until an ACL names the identity.
    let plain = shared_server();
    let zk = Inspector::connect_secure(
        &plain.connect_string(),
        &ClientSecurity::digest("alice", "alice-secret"),
    );
    zk.try_auth("digest", b"bob:bob-secret")
        .expect("addauth digest later");
    let ids = zk.whoami();
    eprintln!("OBSERVED digest whoami: {ids:?}");
    assert!(ids.contains(&("digest".to_string(), "alice".to_string())));
    assert!(ids.contains(&("digest".to_string(), "bob".to_string())));
    drop(zk);

    let server = secure_server(Security::digest_enforced());
    let connect = server.connect_string();
    let zk = Inspector::connect_secure(&connect, &ClientSecurity::digest("alice", "secret"));
    round_trip(&zk, "digest-enforced");
    drop(zk);
    enforced_without_auth("enforce.auth=digest", &connect);
}

/// The KDC and a GSSAPI server start, and the server turns away a client without
/// Kerberos; needs no client-side Kerberos, so it runs without the feature.
#[test]
fn secure_harness_kerberos_server_enforces_sasl() {
    let kdc = crate::harness::kdc();
    eprintln!(
        "KDC pid {} on 127.0.0.1:{}, realm {}, dir {}",
        kdc.pid(),
        kdc.port(),
        kdc.realm(),
        kdc.dir().display()
    );
    let server = secure_server(Security::kerberos());
    enforced_without_auth("Kerberos, enforce.auth=sasl", &server.connect_string());
}

#[cfg(feature = "kerberos")]
#[test]
fn secure_harness_kerberos_gssapi_connects() {
    let server = secure_server(Security::kerberos());
    let zk = Inspector::connect_secure(&server.connect_string(), &ClientSecurity::kerberos());
    round_trip(&zk, "kerberos");
    let ids = zk.whoami();
    eprintln!("OBSERVED GSSAPI whoami: {ids:?}");
    assert!(
        ids.contains(&("sasl".to_string(), crate::harness::KRB_CLIENT.to_string())),
        "{ids:?}"
    );
    drop(zk);
    // Without the `localhost` instance the client asks for zookeeper/127.0.0.1.
    let mut by_ip = ClientSecurity::kerberos();
    by_ip.sasl = Some(crate::harness::ClientSasl::Gssapi { hostname: None });
    expect_failure(
        "GSSAPI, service principal zookeeper/127.0.0.1 (not in the KDC)",
        &server.connect_string(),
        &by_ip.with_fail_eagerly(),
    );
}
