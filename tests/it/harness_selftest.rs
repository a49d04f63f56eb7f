//! Checks that the harness itself works: servers, ensemble failover, the fault proxy,
//! the inspector and the lock-log oracles.

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use zklock::zk::ops::CreateMode;

use crate::harness::{
    Ensemble, EntryKind, FaultProxy, Inspector, LockLog, Mode, ServerOptions, ZkServer, open_acl,
    shared_server, signal, unique_path, wait_for_exit, wait_until,
};

const LONG: Duration = Duration::from_secs(30);

#[test]
fn proxy_pass_blackhole_reset() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr());
    let mut zk = Inspector::connect_with(&proxy.connect_string(), Duration::from_secs(6));
    assert_eq!(proxy.connections(), 1);

    let dir = unique_path("selftest-proxy");
    zk.create_all(&dir);
    zk.create(&format!("{dir}/a"), b"x", true);
    let (node, _) = zk.create_ephemeral_sequential(&format!("{dir}/e-"), b"");
    assert_eq!(
        zk.children(&dir),
        vec![
            "a".to_string(),
            node.rsplit('/').next().unwrap().to_string()
        ]
    );
    assert_eq!(
        zk.get_data(&format!("{dir}/a")).map(|(d, _)| d),
        Some(b"x".to_vec())
    );
    assert!(zk.delete(&format!("{dir}/a")));
    assert!(!zk.delete(&format!("{dir}/a")));

    proxy.set_mode(Mode::Blackhole);
    zk.set_op_timeout(Duration::from_millis(800));
    assert!(zk.try_exists(&dir).is_err(), "a request passed a blackhole");

    // Healing resets the connection that lost data; the client reconnects in the
    // same session.
    proxy.set_mode(Mode::Pass);
    wait_until(LONG, "inspector works again after the blackhole", || {
        zk.try_exists(&dir).is_ok()
    });
    assert!(zk.exists(&node), "session survived a short partition");

    let before = proxy.connections();
    proxy.set_mode(Mode::Reset);
    wait_until(LONG, "client tries to reconnect through Reset", || {
        proxy.connections() > before
    });
    assert!(zk.try_exists(&dir).is_err());
    proxy.set_mode(Mode::Pass);
    wait_until(LONG, "inspector works again after resets", || {
        zk.try_exists(&dir).is_ok()
    });

    zk.set_op_timeout(LONG);
    assert_eq!(zk.tree(&dir), vec![node.clone()]);
    zk.delete(&node);
    zk.delete(&dir);
}

#[test]
fn proxy_cut_after_create_leaves_node_and_loses_reply() {
    let server = shared_server();
    let direct = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let mut zk = Inspector::connect_with(&proxy.connect_string(), Duration::from_secs(6));
    let dir = unique_path("selftest-cut");
    zk.create_all(&dir);
    zk.create(&format!("{dir}/plain"), b"", false);

    proxy.cut_after_next_create(Mode::Blackhole);
    zk.set_op_timeout(Duration::from_secs(5));
    let result = zk.try_create_ephemeral_sequential(&format!("{dir}/n-"), b"");
    assert!(
        result.is_err(),
        "the reply should have been cut: {result:?}"
    );
    assert_eq!(proxy.cuts(), 1);
    assert_eq!(proxy.mode(), Mode::Blackhole);

    let children = direct.children(&dir);
    let created: Vec<_> = children.iter().filter(|c| c.starts_with("n-")).collect();
    assert_eq!(
        created.len(),
        1,
        "the create reached the server: {children:?}"
    );
    let (_, stat) = direct
        .get_data(&format!("{dir}/{}", created[0]))
        .expect("node");
    assert_eq!(stat.ephemeral_owner, zk.session_id());

    proxy.set_mode(Mode::Pass);
    zk.set_op_timeout(LONG);
    wait_until(LONG, "inspector back after the cut", || {
        zk.try_exists(&dir).is_ok()
    });
    assert_eq!(proxy.cuts(), 1, "the cut is one-shot");
    zk.close();
    wait_until(LONG, "ephemerals gone with the session", || {
        direct.children(&dir).is_empty()
    });
    direct.delete(&dir);
}

#[test]
fn owned_server_restart_pause_and_containers() {
    let started = Instant::now();
    let mut server = ZkServer::start_with(ServerOptions {
        container_check_interval: Some(Duration::from_millis(200)),
        ..ServerOptions::default()
    });
    eprintln!("standalone server serving after {:?}", started.elapsed());
    assert!(server.four_letter("srvr").contains("Mode: standalone"));
    assert_eq!(server.four_letter("ruok"), "imok");

    let zk = Inspector::connect(&server.connect_string());
    let container = zk
        .client()
        .call(|b| b.create("/box", b"", &open_acl(), CreateMode::Container));
    zk.run(container).expect("create container");
    zk.create("/box/item", b"", true);
    zk.create("/kept", b"data", true);
    zk.delete("/box/item");
    wait_until(LONG, "empty container reaped", || !zk.exists("/box"));
    drop(zk);

    server.pause();
    server.resume();
    assert_eq!(server.four_letter("ruok"), "imok");

    let pid = server.pid();
    server.kill();
    assert!(
        server.try_four_letter("ruok").is_err(),
        "killed server still answers"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "killed server not reaped"
    );
    server.start_again();
    let zk = Inspector::connect(&server.connect_string());
    assert_eq!(zk.get_data("/kept").map(|(d, _)| d), Some(b"data".to_vec()));
    drop(zk);
    server.stop();
    assert!(!server.is_running());
}

#[test]
fn ensemble_elects_new_leader_after_kill() {
    let started = Instant::now();
    let mut ensemble = Ensemble::start(3);
    eprintln!(
        "3-member ensemble has a quorum after {:?}",
        started.elapsed()
    );
    let zk = Inspector::connect(&ensemble.connect_string());
    let path = unique_path("selftest-ensemble");
    zk.create_all(&path);
    drop(zk);

    let old = ensemble.leader();
    let killed = Instant::now();
    ensemble.kill(old);
    let new = ensemble.leader();
    eprintln!("new leader {new} (was {old}) after {:?}", killed.elapsed());
    assert_ne!(new, old);

    ensemble.start_again(old);
    ensemble.wait_quorum();
    assert_eq!(ensemble.mode(old).as_deref(), Some("follower"));
    let zk = Inspector::connect(&ensemble.member_connect_string(old));
    assert!(zk.exists(&path), "restarted member caught up");
}

#[test]
fn lock_log_oracles() {
    let log = LockLog::new();
    let run = |token: &str, body: &str| {
        let status = Command::new("sh")
            .arg("-c")
            .arg(log.shell_body(body))
            .env("ZKLOCK_FENCING_TOKEN", token)
            .status()
            .expect("run sh");
        status.code()
    };
    assert_eq!(run("10", "true"), Some(0));
    assert_eq!(run("12", "exit_code() { return 3; }; exit_code"), Some(3));

    let mut held = Command::new("sh")
        .arg("-c")
        // A foreground `sleep` would defer the TERM trap until it ends when
        // the signal lands before sh starts it; `wait` is interruptible.
        .arg(log.shell_body("sleep 30 & wait $!"))
        .env("ZKLOCK_FENCING_TOKEN", "20")
        .process_group(0)
        .spawn()
        .expect("spawn sh");
    assert!(log.wait_for_starts(3, LONG));
    signal(-(held.id() as i32), libc::SIGTERM);
    let status = wait_for_exit(&mut held, LONG).expect("sh exits on TERM");
    assert_eq!(status.code(), Some(143));

    let entries = log.entries();
    assert_eq!(entries.len(), 6, "{}", log.contents());
    assert_eq!(entries[4].kind, EntryKind::Start);
    assert_eq!(entries[5].kind, EntryKind::End);
    assert_eq!(entries[5].token, Some(20));
    log.assert_exclusive();
    log.assert_tokens_increase();

    let pid = std::process::id();
    std::fs::write(
        log.path(),
        format!("start 1 1\nstart 2 2\nend 1 1\nend 2 2\nstart - {pid}\n"),
    )
    .unwrap();
    assert_eq!(log.max_concurrency(), 2);
    assert_eq!(log.open_ids(), vec![pid]);
    log.record_end(pid);
    assert!(log.open_ids().is_empty());
    log.assert_max_concurrency(2);
    assert_eq!(log.entries()[4].token, None);
}
