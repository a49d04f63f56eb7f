//! Secure ensembles: TLS, SASL DIGEST-MD5, digest auth, ACLs on our nodes, the
//! config file and secrets (issue 10), against the harness's secure servers.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use zklock::zk;

use crate::harness::{
    ClientSecurity, Ensemble, FaultProxy, Gated, Inspector, Mode, Outcome, SASL_PASSWORD,
    SASL_USER, Scene, Security, ServerOptions, TempDir, ZkServer, acl, assert_no_nodes, pki,
    run_bounded, shared_server, unique_path, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

fn secure_server(security: Security) -> ZkServer {
    ZkServer::start_with(ServerOptions {
        security,
        ..ServerOptions::default()
    })
}

/// One TLS server (clientAuth=need) shared by the TLS tests of this process.
fn tls_server() -> &'static ZkServer {
    static SERVER: OnceLock<ZkServer> = OnceLock::new();
    SERVER.get_or_init(|| secure_server(Security::tls()))
}

/// One SASL DIGEST-MD5 server enforcing `sasl`.
fn sasl_server() -> &'static ZkServer {
    static SERVER: OnceLock<ZkServer> = OnceLock::new();
    SERVER.get_or_init(|| secure_server(Security::sasl_digest()))
}

/// `zklock run` over mutual TLS with the test PKI.
fn tls_run(path: &str) -> Command {
    let mut cmd = zklock_run(&tls_server().connect_string(), path);
    let pki = pki();
    cmd.arg("--tls-ca").arg(&pki.ca);
    cmd.arg("--tls-cert").arg(&pki.client.cert);
    cmd.arg("--tls-key").arg(&pki.client.key);
    cmd
}

fn sasl_run(path: &str, password: &str) -> Command {
    let mut cmd = zklock_run(&sasl_server().connect_string(), path);
    cmd.args(["--sasl-user", SASL_USER, "--connect-timeout", "5s"]);
    cmd.env("ZKLOCK_PASSWORD", password);
    cmd
}

fn finish(cmd: &mut Command) -> Outcome {
    cmd.args(["--", "true"]);
    run_bounded(cmd, LONG)
}

#[test]
fn secure_tls_excludes_and_leaves_nothing() {
    let path = unique_path("tls-excl");
    let holder = Gated::start(tls_run(&path));
    let mut contender = tls_run(&path);
    contender.arg("--no-wait");
    finish(&mut contender).assert_code(75);
    assert!(holder.finish().success());
    let zk = Inspector::connect_secure(&tls_server().connect_string(), &ClientSecurity::tls());
    assert_no_nodes(&zk, &path);
}

#[test]
fn secure_tls_certificate_problems_exit_77_saying_which() {
    let pki = pki();
    let connect = tls_server().connect_string();
    let cases: Vec<(&str, Vec<&Path>, &str)> = vec![
        // No client certificate for a server with clientAuth=need.
        (
            "no client cert",
            vec![&pki.ca],
            "wants a client certificate",
        ),
        // The server's certificate is from a CA we do not trust.
        (
            "unknown server CA",
            vec![&pki.other_ca, &pki.client.cert, &pki.client.key],
            "not signed by the CA",
        ),
        // Our certificate is from a CA the server does not trust.
        (
            "unknown client CA",
            vec![
                &pki.ca,
                &pki.unknown_ca_client.cert,
                &pki.unknown_ca_client.key,
            ],
            "does not accept the client certificate",
        ),
    ];
    for (what, files, expected) in cases {
        let mut cmd = zklock_run(&connect, &unique_path("tls-bad"));
        for (flag, file) in ["--tls-ca", "--tls-cert", "--tls-key"].iter().zip(files) {
            cmd.arg(flag).arg(file);
        }
        let out = finish(&mut cmd);
        out.assert_code(77);
        let line = out.one_error_line();
        assert!(line.contains(expected), "{what}: {line}");
    }
}

#[test]
fn secure_tls_name_mismatch_and_expiry_exit_77() {
    use crate::harness::{ClientAuth, ServerCert};
    for (cert, expected) in [
        (ServerCert::WrongName, "not valid for the name 127.0.0.1"),
        (ServerCert::Expired, "expired"),
    ] {
        let server = secure_server(Security::tls_with(ClientAuth::Need, cert));
        let pki = pki();
        let mut cmd = zklock_run(&server.connect_string(), &unique_path("tls-name"));
        cmd.arg("--tls-ca").arg(&pki.ca);
        cmd.arg("--tls-cert").arg(&pki.client.cert);
        cmd.arg("--tls-key").arg(&pki.client.key);
        let out = finish(&mut cmd);
        out.assert_code(77);
        assert!(out.one_error_line().contains(expected), "{}", out.stderr);
    }
}

#[test]
fn secure_missing_credential_files_exit_64_naming_them() {
    let scratch = TempDir::new();
    let missing = scratch.path().join("nowhere.pem");
    for flags in [
        vec!["--tls-ca"],
        vec!["--sasl-user", "u", "--password-file"],
    ] {
        let mut cmd = zklock_run("127.0.0.1:1", "/it/x");
        cmd.args(&flags).arg(&missing);
        let out = finish(&mut cmd);
        out.assert_code(64);
        assert!(
            out.one_error_line().contains(&*missing.to_string_lossy()),
            "{}",
            out.stderr
        );
    }
}

/// Issue 20: TLS files that cannot work together are refused before any connection
/// (64, one line naming the file), not after the connect timeout.
#[test]
fn secure_tls_mismatched_or_swapped_files_exit_64_before_connecting() {
    let pki = pki();
    // Nothing listens: a connection attempt would take the whole connect timeout.
    let unreachable = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let cases: Vec<(&str, [&Path; 3], &Path, &str)> = vec![
        (
            "another certificate's key",
            [&pki.ca, &pki.client.cert, &pki.unknown_ca_client.key],
            &pki.unknown_ca_client.key,
            "not the key of",
        ),
        (
            "the key as --tls-cert",
            [&pki.ca, &pki.client.key, &pki.client.key],
            &pki.client.key,
            "holds a private key, not a certificate",
        ),
        (
            "the certificate as --tls-key",
            [&pki.ca, &pki.client.cert, &pki.client.cert],
            &pki.client.cert,
            "holds a certificate, not a private key",
        ),
        (
            "a key as --tls-ca",
            [&pki.client.key, &pki.client.cert, &pki.client.key],
            &pki.client.key,
            "holds a private key, not a certificate",
        ),
    ];
    for (what, files, named, expected) in cases {
        for connect in [&unreachable, &tls_server().connect_string()] {
            let mut cmd = zklock_run(connect, &unique_path("tls-files"));
            for (flag, file) in ["--tls-ca", "--tls-cert", "--tls-key"].iter().zip(files) {
                cmd.arg(flag).arg(file);
            }
            cmd.args(["--connect-timeout", "30s", "--", "true"]);
            let out = run_bounded(&mut cmd, 2 * LONG);
            out.assert_code(64);
            let line = out.one_error_line();
            assert!(
                line.contains(expected) && line.contains(&*named.to_string_lossy()),
                "{what}: {line}"
            );
            assert!(
                out.elapsed < Duration::from_secs(10),
                "{what}: took {:?}",
                out.elapsed
            );
        }
    }
}

/// Issue 20: a TLS client pointed at a plain client port learns so within one
/// handshake (69), not after the connect timeout.
#[test]
fn secure_tls_client_at_a_plain_port_exits_69_saying_so() {
    let pki = pki();
    let plain = [
        shared_server().connect_string(),
        tls_server().plain_addr().to_string(),
    ];
    for connect in plain {
        let mut cmd = zklock_run(&connect, &unique_path("tls-plain"));
        cmd.arg("--tls-ca").arg(&pki.ca);
        cmd.arg("--tls-cert").arg(&pki.client.cert);
        cmd.arg("--tls-key").arg(&pki.client.key);
        cmd.args(["--connect-timeout", "30s", "--", "true"]);
        let out = run_bounded(&mut cmd, 2 * LONG);
        out.assert_code(69);
        let line = out.one_error_line();
        assert!(line.contains("does not speak TLS"), "{connect}: {line}");
        assert!(
            out.elapsed < Duration::from_secs(10),
            "{connect}: took {:?} with --connect-timeout 30s",
            out.elapsed
        );
    }
}

#[test]
fn secure_sasl_right_password_runs_wrong_one_exits_77() {
    let path = unique_path("sasl");
    finish(&mut sasl_run(&path, SASL_PASSWORD)).assert_code(0);

    let out = finish(&mut sasl_run(&path, "wrong-password"));
    out.assert_code(77);
    let line = out.one_error_line();
    assert!(
        line.contains("DIGEST-MD5") && line.contains(SASL_USER),
        "{line}"
    );
    assert!(!line.contains("wrong-password"), "{line}");

    // enforce.auth: no credentials at all.
    let out = finish(&mut zklock_run(&sasl_server().connect_string(), &path));
    out.assert_code(77);
    out.one_error_line();
}

#[test]
fn secure_sasl_lock_nodes_get_the_default_acl() {
    let path = unique_path("sasl-acl");
    let holder = Gated::start(sasl_run(&path, SASL_PASSWORD));
    let zk = Inspector::connect_secure(
        &sasl_server().connect_string(),
        &ClientSecurity::sasl_digest(SASL_USER, SASL_PASSWORD),
    );
    let node = format!("{path}/{}", zk.children(&path)[0]);
    let (acl, _) = zk
        .run(zk.client().call(|b| b.get_acl(&node)))
        .expect("get_acl of our node");
    let acl: Vec<String> = acl
        .iter()
        .map(|a| format!("{}:{}:{}", a.scheme, a.id, a.perms))
        .collect();
    assert_eq!(acl.len(), 2, "{acl:?}");
    assert!(acl[0].starts_with(&format!("sasl:{SASL_USER}:")), "{acl:?}");
    assert!(acl[1].starts_with("world:anyone:"), "{acl:?}");
    assert!(holder.finish().success());
}

#[test]
fn secure_digest_creator_acl_keeps_others_out_but_lets_us_queue() {
    let s = Scene::new("digest-acl");
    let path = &s.path;
    let digest_run = || {
        let mut cmd = s.run();
        cmd.args(["--digest-user", "alice", "--acl", "creator"]);
        cmd.env("ZKLOCK_PASSWORD", "alice-secret");
        cmd
    };
    let holder = Gated::start(digest_run());
    let bob = Inspector::connect_secure(&s.connect, &ClientSecurity::digest("bob", "bob-secret"));
    let nodes = bob.try_children(path);
    assert!(
        matches!(nodes, Err(zk::records::Error::NoAuth)),
        "another identity could list: {nodes:?}"
    );
    let alice =
        Inspector::connect_secure(&s.connect, &ClientSecurity::digest("alice", "alice-secret"));
    let node = format!("{path}/{}", alice.children(path)[0]);
    let deleted = bob.run(bob.client().call(|b| b.delete(&node, -1)));
    assert!(
        matches!(deleted, Err(zk::records::Error::NoAuth)),
        "{deleted:?}"
    );
    // The same identity queues behind the holder and takes the lock after it.
    let mut second = Gated::spawn(digest_run());
    crate::harness::wait_until(LONG, "the second contender queues", || {
        alice.children(path).len() == 2
    });
    assert!(holder.finish().success());
    second.wait_started(LONG);
    assert!(second.finish().success());
    assert_no_nodes(&alice, path);
}

/// docs/security.md ("Several identities"): one ACL naming every digest
/// user, given to each. Two users alternate 20 times on one lock, each
/// queueing behind the other's holder: none is refused (64), each takes the
/// lock after the other. The hashes are openssl's
/// (`echo -n alice:alice-secret | openssl dgst -binary -sha1 | base64`).
#[test]
fn secure_two_digest_users_alternate_under_one_acl() {
    const ALICE: &str = "digest:alice:JYdjG/dL2+v79QyuS8/0gpT+rQQ=:cdrwa";
    const BOB: &str = "digest:bob:j7ZGIvWbIQ1LANfL4BJ8Ibdfqsk=:cdrwa";
    let s = Scene::new("digest-two-users");
    let run_as = |i: usize| {
        let (user, password) = [("alice", "alice-secret"), ("bob", "bob-secret")][i % 2];
        let mut cmd = s.run();
        cmd.args(["--digest-user", user, "--acl", ALICE, "--acl", BOB])
            .args(["--acl", "world:anyone:r"])
            .env("ZKLOCK_PASSWORD", password);
        cmd
    };
    let zk = Inspector::connect(&s.connect);
    let mut holder = Gated::start(run_as(0));
    for i in 1..20 {
        let mut next = Gated::spawn(run_as(i));
        crate::harness::wait_until(LONG, "the other user queues", || {
            next.exited().is_some() || zk.children(&s.path).len() == 2
        });
        assert_eq!(next.exited(), None, "run {i} ended instead of queueing");
        assert!(holder.finish().success(), "run {}", i - 1);
        next.wait_started(LONG);
        holder = next;
    }
    assert!(holder.finish().success());
    assert!(zk.children(&s.path).is_empty());
}

#[test]
fn secure_acl_that_would_shut_us_out_exits_64() {
    let mut cmd = zklock_run(&shared_server().connect_string(), &unique_path("acl-bad"));
    cmd.args(["--digest-user", "alice", "--acl", "digest:bob:AAAA:cdrwa"]);
    cmd.env("ZKLOCK_PASSWORD", "alice-secret");
    let out = finish(&mut cmd);
    out.assert_code(64);
    assert!(
        out.one_error_line().contains("could not queue"),
        "{}",
        out.stderr
    );
}

/// A config file naming the shared server as `@it`.
fn write_config(dir: &Path, extra: &str, mode: u32) -> std::path::PathBuf {
    let file = dir.join("config.toml");
    let text = format!(
        "[ensembles.it]\nhosts = \"{}\"\n{extra}",
        shared_server().connect_string()
    );
    std::fs::write(&file, text).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
    file
}

#[test]
fn secure_config_file_lookup_and_named_ensembles() {
    let scratch = TempDir::new();
    let path = unique_path("config");
    // --config FILE, -z @name.
    let file = write_config(scratch.path(), "", 0o644);
    let mut cmd = zklock_run("@it", &path);
    cmd.arg("--config").arg(&file);
    finish(&mut cmd).assert_code(0);
    // $ZKLOCK_CONFIG and the file's default ensemble.
    std::fs::write(
        &file,
        format!(
            "default = \"it\"\n[ensembles.it]\nhosts = \"{}\"\n",
            shared_server().connect_string()
        ),
    )
    .unwrap();
    let mut cmd = crate::harness::zklock();
    cmd.args(["run", &path]).env("ZKLOCK_CONFIG", &file);
    finish(&mut cmd).assert_code(0);
    // $XDG_CONFIG_HOME/zklock/config.toml, then ~/.config/zklock/config.toml.
    let xdg = scratch.path().join("xdg");
    std::fs::create_dir_all(xdg.join("zklock")).unwrap();
    std::fs::copy(&file, xdg.join("zklock/config.toml")).unwrap();
    let mut cmd = crate::harness::zklock();
    cmd.args(["run", &path]).env("XDG_CONFIG_HOME", &xdg);
    finish(&mut cmd).assert_code(0);
    let home = scratch.path().join("home");
    std::fs::create_dir_all(home.join(".config/zklock")).unwrap();
    std::fs::copy(&file, home.join(".config/zklock/config.toml")).unwrap();
    let mut cmd = crate::harness::zklock();
    cmd.args(["run", &path])
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", &home);
    finish(&mut cmd).assert_code(0);
    // A flag beats the file: -z with an unreachable host fails (69) although the
    // file's default ensemble is fine.
    let mut cmd = zklock_run("127.0.0.1:1", &path);
    cmd.arg("--config")
        .arg(&file)
        .args(["--connect-timeout", "1"]);
    finish(&mut cmd).assert_code(69);
}

#[test]
fn secure_config_errors_exit_64() {
    let scratch = TempDir::new();
    let file = write_config(scratch.path(), "tls-cafile = \"x\"\n", 0o600);
    let mut cmd = zklock_run("@it", "/it/x");
    cmd.arg("--config").arg(&file);
    let out = finish(&mut cmd);
    out.assert_code(64);
    let line = out.one_error_line();
    assert!(
        line.contains(&format!("{}:3:", file.display())) && line.contains("tls-cafile"),
        "{line}"
    );

    let file = write_config(
        scratch.path(),
        "digest-user = \"alice\"\npassword = \"alice-secret\"\n",
        0o644,
    );
    let mut cmd = zklock_run("@it", "/it/x");
    cmd.arg("--config").arg(&file);
    let out = finish(&mut cmd);
    out.assert_code(64);
    let line = out.one_error_line();
    assert!(line.contains("chmod 600"), "{line}");
    assert!(!line.contains("alice-secret"), "{line}");

    let mut cmd = zklock_run("@nope", "/it/x");
    cmd.arg("--config").arg(&file);
    finish(&mut cmd).assert_code(64);
}

/// "flag > env > config" holds for `kerberos` too: the file's `true` is
/// turned off by `--kerberos=false` or `ZKLOCK_KERBEROS=0`, and the flag
/// beats the variable.
#[test]
fn secure_config_kerberos_is_turned_off_by_a_flag_or_the_environment() {
    let scratch = TempDir::new();
    let path = unique_path("no-kerberos");
    let file = write_config(scratch.path(), "kerberos = true\n", 0o644);
    let run = |flags: &[&str], env: &[(&str, &str)]| {
        let mut cmd = zklock_run("@it", &path);
        cmd.arg("--config").arg(&file).args(flags);
        cmd.envs(env.iter().copied());
        finish(&mut cmd)
    };
    // Kerberos on: this server speaks no SASL, and a build without the
    // feature refuses it.
    for (flags, env) in [
        (&[][..], &[][..]),
        (&["--kerberos"], &[("ZKLOCK_KERBEROS", "0")]),
        (&["--kerberos=true"], &[]),
    ] {
        let out = run(flags, env);
        assert_ne!(out.code(), 0, "{flags:?} {env:?}: {}", out.stderr);
        #[cfg(not(feature = "kerberos"))]
        {
            out.assert_code(64);
            assert!(
                out.one_error_line().contains("built without Kerberos"),
                "{flags:?} {env:?}: {}",
                out.stderr
            );
        }
    }
    for (flags, env) in [
        (&["--kerberos=false"][..], &[][..]),
        (&[], &[("ZKLOCK_KERBEROS", "0")]),
        (&[], &[("ZKLOCK_KERBEROS", "false")]),
        (&["--kerberos=no"], &[("ZKLOCK_KERBEROS", "1")]),
    ] {
        let out = run(flags, env);
        assert_eq!(out.code(), 0, "{flags:?} {env:?}: {}", out.stderr);
    }
}

#[test]
fn secure_password_never_in_cmdline_or_verbose_output() {
    let scratch = TempDir::new();
    let secret = "pw-in-a-private-config";
    let file = write_config(
        scratch.path(),
        &format!("digest-user = \"carol\"\npassword = \"{secret}\"\n"),
        0o600,
    );
    let path = unique_path("secret");
    let mut cmd = zklock_run("@it", &path);
    cmd.arg("--config").arg(&file).arg("-v");
    let holder = Gated::start(cmd);
    let zklock_pid = parent_of_command(&holder);
    let cmdline = std::fs::read(format!("/proc/{zklock_pid}/cmdline")).unwrap();
    assert!(
        !String::from_utf8_lossy(&cmdline).contains(secret),
        "the password is in zklock's command line"
    );
    assert!(holder.finish().success());

    let mut cmd = zklock_run("@it", &path);
    cmd.arg("--config").arg(&file).arg("-v");
    let out = finish(&mut cmd);
    out.assert_code(0);
    assert!(!out.stderr.contains(secret) && !out.stdout.contains(secret));
}

/// The pid of zklock, the parent of the gated command's shell.
fn parent_of_command(holder: &Gated) -> u32 {
    let pid = holder.command_pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Waits until `until`, checking all along that `node` stays ours (`owner`).
fn node_kept_until(zk: &Inspector, node: &str, owner: i64, until: Instant) {
    while Instant::now() < until {
        let (_, stat) = zk
            .get_data(node)
            .unwrap_or_else(|| panic!("{node} vanished"));
        assert_eq!(stat.ephemeral_owner, owner, "{node} changed owner");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A holder authenticated with `auth` (its arguments and password) on a
/// server enforcing authentication is cut off by a proxy for longer than a
/// connection timeout (1 s): it keeps its node, and its exit is 0, not 76.
/// The server takes the connection back only if the identity is sent again,
/// and the lease's check after the reconnect would end the session if not.
fn outage_keeps_the_lock_and_the_identity(
    server: &ZkServer,
    tag: &str,
    auth: &[&str],
    password: &str,
    identity: &ClientSecurity,
) {
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path(tag);
    let mut cmd = zklock_run(&proxy.connect_string(), &path);
    cmd.args(auth);
    cmd.args(["--session-timeout", "4s", "--kill-after", "0.5s"]);
    cmd.env("ZKLOCK_PASSWORD", password);
    let holder = Gated::start(cmd);
    let zk = Inspector::connect_secure(&server.connect_string(), identity);
    let node = format!("{path}/{}", zk.children(&path)[0]);
    let (_, stat) = zk.get_data(&node).expect("the holder's node");
    let connections = proxy.connections();
    proxy.set_mode(Mode::Blackhole);
    let cut = Instant::now();
    node_kept_until(
        &zk,
        &node,
        stat.ephemeral_owner,
        cut + Duration::from_millis(1500),
    );
    proxy.set_mode(Mode::Pass);
    node_kept_until(
        &zk,
        &node,
        stat.ephemeral_owner,
        cut + Duration::from_secs(5),
    );
    assert!(
        proxy.connections() > connections,
        "the holder never reconnected"
    );
    // Exit 0, not 76: the lock was never given up.
    assert!(holder.finish().success());
    assert_no_nodes(&zk, &path);
}

#[test]
fn secure_sasl_outage_keeps_the_lock_and_the_identity() {
    outage_keeps_the_lock_and_the_identity(
        sasl_server(),
        "sasl-outage",
        &["--sasl-user", SASL_USER],
        SASL_PASSWORD,
        &ClientSecurity::sasl_digest(SASL_USER, SASL_PASSWORD),
    );
}

/// `addauth digest` is the client library's to send again after a
/// reconnect; with a creator ACL only alice may delete the node at the end.
#[test]
fn secure_digest_outage_keeps_the_lock_and_the_identity() {
    outage_keeps_the_lock_and_the_identity(
        &secure_server(Security::digest_enforced()),
        "digest-outage",
        &["--digest-user", "alice", "--acl", "creator"],
        "alice-secret",
        &ClientSecurity::digest("alice", "alice-secret"),
    );
}

#[test]
fn secure_tls_ensemble_failover_keeps_the_lock() {
    let mut ensemble = Ensemble::start_with(
        3,
        ServerOptions {
            security: Security::tls(),
            ..ServerOptions::default()
        },
    );
    let s = Scene::on(ensemble.connect_string(), "tls-failover");
    let path = &s.path;
    let pki = pki();
    let mut cmd = s.run();
    cmd.arg("--tls-ca").arg(&pki.ca);
    cmd.arg("--tls-cert").arg(&pki.client.cert);
    cmd.arg("--tls-key").arg(&pki.client.key);
    cmd.args(["--session-timeout", "10s", "--kill-after", "1s"]);
    let holder = Gated::start(cmd);
    let leader = ensemble.leader();
    ensemble.kill(leader);
    let killed = Instant::now();
    let survivors: Vec<String> = (0..3)
        .filter(|&i| i != leader)
        .map(|i| ensemble.member_connect_string(i))
        .collect();
    let zk = Inspector::connect_secure(&survivors.join(","), &ClientSecurity::tls());
    let node = format!("{path}/{}", zk.children(path)[0]);
    let (_, stat) = zk.get_data(&node).expect("the holder's node");
    // Past the session timeout: a holder that had not come back would have lost it.
    node_kept_until(
        &zk,
        &node,
        stat.ephemeral_owner,
        killed + Duration::from_millis(10_500),
    );
    assert!(holder.finish().success());
    assert_no_nodes(&zk, path);
}

#[test]
fn secure_sasl_outage_while_waiting_still_gets_the_lock() {
    let server = sasl_server();
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("sasl-wait-outage");
    let holder = Gated::start(sasl_run(&path, SASL_PASSWORD));
    let mut cmd = zklock_run(&proxy.connect_string(), &path);
    cmd.args([
        "--sasl-user",
        SASL_USER,
        "--session-timeout",
        "4s",
        "--kill-after",
        "0.5s",
    ]);
    cmd.env("ZKLOCK_PASSWORD", SASL_PASSWORD);
    let mut waiter = Gated::spawn(cmd);
    let zk = Inspector::connect_secure(
        &server.connect_string(),
        &ClientSecurity::sasl_digest(SASL_USER, SASL_PASSWORD),
    );
    crate::harness::wait_until(LONG, "the waiter queues", || zk.children(&path).len() == 2);
    let connections = proxy.connections();
    proxy.set_mode(Mode::Blackhole);
    let cut = Instant::now();
    crate::harness::wait_until(
        LONG,
        "the blackhole outlasts the connection timeout",
        || cut.elapsed() > Duration::from_millis(1500),
    );
    proxy.set_mode(Mode::Pass);
    crate::harness::wait_until(LONG, "the waiter reconnects", || {
        proxy.connections() > connections
    });
    assert!(holder.finish().success());
    waiter.wait_started(LONG);
    assert!(waiter.finish().success());
    assert_no_nodes(&zk, &path);
}

#[test]
fn secure_acl_denials_exit_77_naming_path_and_permission() {
    use zk::records::perms;
    let connect = shared_server().connect_string();
    // A lock directory that anyone may create and delete in but only its
    // creator may list.
    let admin = Inspector::connect_secure(&connect, &ClientSecurity::digest("admin", "admin-pw"));
    let dir = unique_path("acl-deny");
    admin.create_all(&dir);
    admin.delete(&dir);
    let acls = [
        acl(perms::ALL, "auth", ""),
        acl(perms::CREATE | perms::DELETE, "world", "anyone"),
    ];
    let mode = zk::ops::CreateMode::Persistent;
    admin
        .run(admin.client().call(|b| b.create(&dir, b"", &acls, mode)))
        .expect("create the lock directory");
    let out = finish(&mut zklock_run(&connect, &dir));
    out.assert_code(77);
    let line = out.one_error_line();
    assert!(
        line.contains(&format!("the ACL of {dir} denies READ")),
        "{line}"
    );
    // Our node was created before the listing was denied: it is gone.
    assert!(
        admin.children(&dir).is_empty(),
        "{:?}",
        admin.children(&dir)
    );

    // A directory held under another identity's `creator` ACL: no CREATE.
    let path = unique_path("acl-deny-create");
    let mut cmd = zklock_run(&connect, &path);
    cmd.args(["--digest-user", "alice", "--acl", "creator"]);
    cmd.env("ZKLOCK_PASSWORD", "alice-secret");
    let holder = Gated::start(cmd);
    let mut cmd = zklock_run(&connect, &path);
    cmd.args(["--digest-user", "bob"])
        .env("ZKLOCK_PASSWORD", "bob-secret");
    let out = finish(&mut cmd);
    out.assert_code(77);
    let line = out.one_error_line();
    assert!(
        line.contains(&format!("the ACL of {path} denies CREATE")),
        "{line}"
    );
    assert!(holder.finish().success());
}

#[test]
fn secure_tls_x509_acl_is_checked_against_our_subject() {
    let dn = crate::harness::CLIENT_DN;
    let mut ours = tls_run(&unique_path("tls-x509-acl"));
    ours.args([
        "--acl",
        &format!("x509:{dn}:cdrwa"),
        "--acl",
        "world:anyone:r",
    ]);
    finish(&mut ours).assert_code(0);
    let mut other = tls_run(&unique_path("tls-x509-acl"));
    other.args(["--acl", "x509:CN=someone-else:cdrwa"]);
    let out = finish(&mut other);
    out.assert_code(64);
    assert!(
        out.one_error_line().contains(&format!("x509:{dn}")),
        "{}",
        out.stderr
    );
}

/// A script under `zklock run` that calls `zklock run` (re-entering) and
/// `zklock status` on the same SASL-enforcing server: the nested zklocks
/// find the password as the outer one did (`ZKLOCK_PASSWORD` inherited;
/// `--password-file` passed on as `ZKLOCK_PASSWORD_FILE`), and nothing in
/// their command lines carries it.
#[test]
fn secure_sasl_nested_runs_find_the_password() {
    let scratch = TempDir::new();
    let pw = scratch.path().join("pw");
    std::fs::write(&pw, format!("{SASL_PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    let connect = sasl_server().connect_string();
    // The nested calls name the server and the user (or nothing, with the
    // config file), never the password.
    let script = r#"set -e
"$ZK" run $FLAGS "$LOCK" -- sh -c 'echo nested-ran'
"$ZK" status $FLAGS "$LOCK" >/dev/null || test $? -eq 1
echo status-ok"#;
    let config = scratch.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "default = \"s\"\n[ensembles.s]\nhosts = \"{connect}\"\n\
             sasl-user = \"{SASL_USER}\"\npassword = \"{SASL_PASSWORD}\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    for how in ["environment", "password file", "config file"] {
        let path = unique_path("sasl-nested");
        let mut cmd = crate::harness::zklock();
        match how {
            "environment" => {
                cmd.env("ZKLOCK_ZOOKEEPER", &connect)
                    .env("ZKLOCK_SASL_USER", SASL_USER)
                    .env("ZKLOCK_PASSWORD", SASL_PASSWORD)
                    .args(["run", &path]);
            }
            "password file" => {
                cmd.current_dir(scratch.path()).args([
                    "run",
                    "-z",
                    &connect,
                    "--sasl-user",
                    SASL_USER,
                    "--password-file",
                    "pw",
                    &path,
                ]);
            }
            _ => {
                cmd.current_dir(scratch.path())
                    .args(["run", "--config", "config.toml", &path]);
            }
        }
        // The config file's default ensemble, or the server and the user.
        let flags = match how {
            "config file" => String::new(),
            _ => format!("-z {connect} --sasl-user {SASL_USER}"),
        };
        cmd.env("ZK", env!("CARGO_BIN_EXE_zklock"))
            .env("FLAGS", flags)
            .env("LOCK", &path)
            // The script runs elsewhere: a relative --password-file still works.
            .args(["--", "sh", "-c", &format!("cd / && {script}")]);
        let out = run_bounded(&mut cmd, LONG);
        assert_eq!(out.code(), 0, "{how}: {}", out.stderr);
        assert!(
            out.stdout.contains("nested-ran") && out.stdout.contains("status-ok"),
            "{how}: {}{}",
            out.stdout,
            out.stderr
        );
    }
}

/// A `ZKLOCK_PASSWORD` that is set but empty is named as such, not as a
/// variable to set.
#[test]
fn secure_empty_password_variable_is_named() {
    let mut cmd = zklock_run("127.0.0.1:1", "/it/x");
    cmd.args(["--sasl-user", "u"]).env("ZKLOCK_PASSWORD", "");
    let out = finish(&mut cmd);
    out.assert_code(64);
    let line = out.one_error_line();
    assert!(line.contains("ZKLOCK_PASSWORD is set but empty"), "{line}");
    assert!(!line.contains("use --password-file"), "{line}");
}

/// `ZKLOCK_SASL_USER=` (empty, as a script clearing it writes) is unset:
/// the run goes ahead without credentials.
#[test]
fn secure_empty_user_variables_are_unset() {
    for variable in ["ZKLOCK_SASL_USER", "ZKLOCK_DIGEST_USER"] {
        let mut cmd = zklock_run(
            &shared_server().connect_string(),
            &unique_path("empty-user"),
        );
        cmd.env(variable, "");
        finish(&mut cmd).assert_code(0);
    }
}

/// A config file that others can read and that holds a `password` in any
/// ensemble is refused, whichever ensemble is used.
#[test]
fn secure_open_config_with_a_password_is_refused_for_every_ensemble() {
    let scratch = TempDir::new();
    let file = write_config(
        scratch.path(),
        "[ensembles.other]\nhosts = \"127.0.0.1:1\"\ndigest-user = \"alice\"\n\
         password = \"alice-secret\"\n",
        0o644,
    );
    for target in ["@it".to_owned(), shared_server().connect_string()] {
        let mut cmd = zklock_run(&target, &unique_path("open-config"));
        cmd.arg("--config").arg(&file);
        let out = finish(&mut cmd);
        out.assert_code(64);
        let line = out.one_error_line();
        assert!(
            line.contains("chmod 600") && line.contains(&*file.to_string_lossy()),
            "{target}: {line}"
        );
        assert!(!line.contains("alice-secret"), "{line}");
    }
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = zklock_run("@it", &unique_path("open-config"));
    cmd.arg("--config").arg(&file);
    finish(&mut cmd).assert_code(0);
}

/// A `--password-file` that group or others may read is refused as ssh
/// refuses such a key: 64, one line naming the file and the fix.
#[test]
fn secure_open_password_file_is_refused() {
    let scratch = TempDir::new();
    let pw = scratch.path().join("pw");
    std::fs::write(&pw, format!("{SASL_PASSWORD}\n")).unwrap();
    for mode in [0o644, 0o640, 0o604] {
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(mode)).unwrap();
        let mut cmd = zklock_run(&sasl_server().connect_string(), &unique_path("open-pw"));
        cmd.args(["--sasl-user", SASL_USER])
            .arg("--password-file")
            .arg(&pw);
        let out = finish(&mut cmd);
        out.assert_code(64);
        let line = out.one_error_line();
        assert!(
            line.contains(&*pw.to_string_lossy()) && line.contains("chmod 600"),
            "{mode:o}: {line}"
        );
    }
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = zklock_run(&sasl_server().connect_string(), &unique_path("open-pw"));
    cmd.args(["--sasl-user", SASL_USER])
        .arg("--password-file")
        .arg(&pw);
    finish(&mut cmd).assert_code(0);
}

/// An `--acl` that denies our own identity WRITE is refused before anything
/// is created: the acquisition's write and the `--once-per` record need it.
#[test]
fn secure_acl_without_write_for_us_exits_64() {
    let path = unique_path("acl-no-write");
    for once in [false, true] {
        let mut cmd = sasl_run(&path, SASL_PASSWORD);
        cmd.args([
            "--acl",
            &format!("sasl:{SASL_USER}:cdr"),
            "--acl",
            "world:anyone:r",
        ]);
        if once {
            cmd.args(["--once-per", "1h"]);
        }
        let out = finish(&mut cmd);
        out.assert_code(64);
        let line = out.one_error_line();
        assert!(line.contains("denies WRITE"), "{line}");
    }
    let zk = Inspector::connect_secure(
        &sasl_server().connect_string(),
        &ClientSecurity::sasl_digest(SASL_USER, SASL_PASSWORD),
    );
    assert!(zk.get_data(&path).is_none(), "{path} was created");
}

/// ZooKeeper checks DELETE on the parent: a lock directory pre-created with
/// an open ACL lets anyone delete a credentialed holder's node. A run with
/// credentials refuses such a path (64, one line saying how to fix it)
/// and leaves nothing behind, unless given `--acl open`; `status` warns.
#[test]
fn secure_open_lock_directory_is_refused_with_credentials() {
    use zk::records::perms;
    let connect = shared_server().connect_string();
    let dir = unique_path("open-dir");
    let anyone = Inspector::connect(&connect);
    anyone.create_all(&dir);
    let alice = |cmd: &mut Command| {
        cmd.args(["--digest-user", "alice"])
            .env("ZKLOCK_PASSWORD", "alice-secret");
    };
    let mut cmd = zklock_run(&connect, &dir);
    alice(&mut cmd);
    let out = finish(&mut cmd);
    out.assert_code(64);
    let line = out.one_error_line();
    assert!(
        line.contains(&format!("anyone may delete the lock nodes in {dir}"))
            && line.contains("setAcl")
            && line.contains("--acl open"),
        "{line}"
    );
    assert!(
        anyone.children(&dir).is_empty(),
        "{:?}",
        anyone.children(&dir)
    );

    let status = |json: bool| {
        let mut cmd = crate::harness::zklock();
        cmd.args(["status", "-z", &connect, &dir]);
        if json {
            cmd.arg("--json");
        }
        alice(&mut cmd);
        run_bounded(&mut cmd, LONG)
    };
    let out = status(false);
    out.assert_code(0);
    assert!(
        out.stdout
            .contains("warning: anyone may delete the lock nodes"),
        "{}",
        out.stdout
    );
    let out = status(true);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(
        doc["locks"][0]["unprotected"]
            .as_str()
            .is_some_and(|s| s.contains("anyone may delete")),
        "{}",
        out.stdout
    );

    // Asked for: the path is used as it is.
    let mut cmd = zklock_run(&connect, &dir);
    alice(&mut cmd);
    cmd.args(["--acl", "open"]);
    finish(&mut cmd).assert_code(0);

    // Fixed as the message says: alice alone may delete, anyone may read.
    let owner =
        Inspector::connect_secure(&connect, &ClientSecurity::digest("alice", "alice-secret"));
    let acls = [
        acl(perms::ALL, "auth", ""),
        acl(perms::READ, "world", "anyone"),
    ];
    owner
        .run(owner.client().call(|b| b.set_acl(&dir, &acls, -1)))
        .expect("setAcl");
    let mut cmd = zklock_run(&connect, &dir);
    alice(&mut cmd);
    finish(&mut cmd).assert_code(0);
    let out = status(false);
    assert!(!out.stdout.contains("warning"), "{}", out.stdout);
}

/// Two TLS identities taking turns on one lock, set up as docs/security.md
/// says (each lists both in `--acl`), on a server that reaps empty containers
/// within 100 ms: every run works, and the parents zklock created stay, as
/// persistent nodes with the ACL given (containers created again by whoever
/// came next would take that one's ACL).
#[test]
fn secure_two_tls_identities_alternate_on_one_lock() {
    use crate::harness::OTHER_CLIENT_DN;
    let server = ZkServer::start_with(ServerOptions {
        security: Security::tls(),
        container_check_interval: Some(Duration::from_millis(100)),
        ..ServerOptions::default()
    });
    let pki = pki();
    let connect = server.connect_string();
    let zk = Inspector::connect_secure(&connect, &ClientSecurity::tls());
    let path = "/locks/team/ci";
    for turn in 0..20 {
        let identity = if turn % 2 == 0 {
            &pki.client
        } else {
            &pki.other_client
        };
        let mut cmd = zklock_run(&connect, path);
        cmd.arg("--tls-ca").arg(&pki.ca);
        cmd.arg("--tls-cert").arg(&identity.cert);
        cmd.arg("--tls-key").arg(&identity.key);
        for dn in [crate::harness::CLIENT_DN, OTHER_CLIENT_DN] {
            cmd.arg("--acl").arg(format!("x509:{dn}:cdrwa"));
        }
        cmd.args(["--acl", "world:anyone:r"]);
        let out = finish(&mut cmd);
        assert_eq!(out.code(), 0, "turn {turn}: {}", out.stderr);
        for dir in ["/locks", "/locks/team", path] {
            let stat = zk
                .stat(dir)
                .unwrap_or_else(|| panic!("turn {turn}: {dir} is gone"));
            assert_eq!(
                stat.ephemeral_owner, 0,
                "turn {turn}: {dir} is not persistent"
            );
        }
    }
    assert_no_nodes(&zk, path);
}
