//! Issue 9, item 6: messages that say what happened.

use std::fs::File;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{
    FaultProxy, Gated, Inspector, KillOnDrop, Mode, ServerOptions, TempDir, ZkServer,
    assert_no_nodes, contenders, ephemerals, run_bounded, shared_server, unique_path,
    wait_for_contenders, wait_for_exit, wait_for_file, wait_until, zklock, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// `sh -c` body that marks `$1/started`, then runs until `$1/go` exists.
const GATE: &str = ": > \"$1/started\"; while [ ! -e \"$1/go\" ]; do sleep 0.02; done";

#[test]
fn released_only_when_the_server_confirmed_it() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let path = unique_path("released");

    // Reachable: the delete is confirmed and -v says "released".
    let out = run_bounded(
        zklock_run(&server.connect_string(), &path).args(["-v", "--", "true"]),
        LONG,
    );
    out.assert_code(0);
    assert!(
        out.stderr.contains(&format!("released {path}")),
        "{}",
        out.stderr
    );

    // Cut off once the command runs: the command ends well before the lease
    // deadline, the delete never reaches the server.
    let proxy = FaultProxy::start(server.addr());
    let dir = TempDir::new();
    let stderr_path = dir.path().join("stderr");
    let mut run = KillOnDrop(
        zklock_run(&proxy.connect_string(), &path)
            .args(["-v", "--", "sh", "-c", GATE, "sh"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(File::create(&stderr_path).unwrap())
            .spawn()
            .expect("spawn zklock"),
    );
    assert!(wait_for_file(dir.path().join("started"), LONG), "never ran");
    let node = ephemerals(&zk, &path);
    assert_eq!(node.len(), 1, "{node:?}");
    proxy.set_mode(Mode::Blackhole);
    std::fs::write(dir.path().join("go"), "").unwrap();
    let status = wait_for_exit(&mut run, LONG).expect("zklock ends");
    assert_eq!(status.code(), Some(0), "{status}");
    assert!(zk.exists(&node[0]), "the node was deleted after all");
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(!stderr.contains("released /"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "could not reach ZooKeeper to confirm the release of {path}: it is released when the session expires, within 10s at the latest"
        )),
        "{stderr}"
    );
    // And so it is.
    wait_until(LONG, "the node expires with the session", || {
        !zk.exists(&node[0])
    });
}

#[test]
fn a_waiter_cut_off_says_so_and_ends_on_time() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("waiter-cut-off");
    let holder = Gated::start(zklock_run(&server.connect_string(), &path));

    let started = Instant::now();
    let mut waiter = zklock_run(&proxy.connect_string(), &path);
    // Not -v, whose read of the holder's data comes before the first look
    // is done: a cut that swallowed its answer would leave the waiter
    // waiting for that look until the connection is given up (2T/3).
    waiter.args(["-w", "5s", "--", "true"]);
    let waiting = std::thread::spawn(move || run_bounded(&mut waiter, LONG));
    wait_for_contenders(&zk, &path, "-lock-", 2);
    // Not before the waiter has its session (cut off before, it ends 69)
    // and has looked at the queue (its watch comes after).
    proxy.wait_watching(LONG);
    proxy.set_mode(Mode::Blackhole);
    let out = waiting.join().unwrap();
    out.assert_code(75);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!(
            "timed out waiting for {path}: ZooKeeper unreachable for the last"
        )),
        "{}",
        out.stderr
    );
    assert!(!last.contains("held by"), "{last}");
    // On time: the 5 s deadline and bounded cleanup; was ~4 s late.
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(6500),
        "took {took:?} with -w 5s"
    );
    assert!(holder.finish().success());
}

#[test]
fn no_session_names_the_real_cause() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for (hosts, cause) in [
        (
            closed.to_string(),
            format!("connection refused by {closed}"),
        ),
        (
            "zklock-no-such-host.invalid:2181".to_owned(),
            "cannot resolve zklock-no-such-host.invalid (DNS:".to_owned(),
        ),
    ] {
        let out = run_bounded(
            zklock().args([
                "run",
                "-z",
                &hosts,
                "--connect-timeout",
                "1s",
                "/it/cause",
                "--",
                "true",
            ]),
            LONG,
        );
        out.assert_code(69);
        let line = out.one_error_line();
        assert!(line.contains(&cause), "{line}");
        assert!(!line.contains("timeout"), "{line}");
        assert!(
            out.elapsed < Duration::from_secs(5),
            "took {:?}",
            out.elapsed
        );
    }
}

#[test]
fn several_paths_name_the_one_held() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let base = unique_path("name-held");
    let (cache, db) = (format!("{base}/cache"), format!("{base}/db"));
    let holder = Gated::start(zklock_run(&connect, &db));
    for wait in [&["-n"][..], &["-w", "0.5"]] {
        let out = run_bounded(
            zklock_run(&connect, &cache)
                .arg(&db)
                .args(wait)
                .args(["--", "true"]),
            LONG,
        );
        out.assert_code(75);
        let line = out.one_error_line();
        let why = if wait == ["-n"] {
            "not waiting for"
        } else {
            "timed out waiting for"
        };
        assert!(line.contains(&format!("{why} {db}")), "{line}");
        assert!(!line.contains(&cache), "{line}");
    }
    assert_eq!(contenders(&zk, &db, "-lock-").len(), 1);
    assert!(holder.finish().success());
}

#[test]
fn paths_and_hosts_zookeeper_refuses_are_usage_errors() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let base = unique_path("refused");
    let run = |args: &[String], env: &[(&str, &str)]| {
        let mut cmd = zklock();
        cmd.arg("run").args(args).envs(env.iter().copied());
        run_bounded(&mut cmd, LONG)
    };
    for name in [
        "lock-\u{1f600}",
        "a\u{10000}",
        "a\u{fff0}",
        "a\u{ffff}",
        "a\u{e000}",
        "a\u{f8ff}",
    ] {
        let lock = format!("{base}/{name}");
        let out = run(
            &[
                "-z".into(),
                connect.clone(),
                lock,
                "--".into(),
                "true".into(),
            ],
            &[],
        );
        out.assert_code(64);
        assert!(
            out.one_error_line().contains("forbidden character"),
            "{name:?}"
        );
    }
    // A missing chroot: 64, naming it, for a lock and a semaphore, at the
    // top of the chroot and below.
    let chroot = format!("{base}/missing-chroot");
    for (lock, kind) in [
        ("/l", &[][..]),
        ("/l", &["--limit", "2"]),
        ("/a/l", &["--limit", "2"]),
    ] {
        let mut args = vec!["-z".into(), format!("{connect}{chroot}"), lock.into()];
        args.extend(kind.iter().map(|arg| arg.to_string()));
        args.extend(["--".into(), "true".into()]);
        let out = run(&args, &[]);
        out.assert_code(64);
        assert!(
            out.one_error_line().contains(&chroot),
            "{kind:?} {lock}: {}",
            out.stderr
        );
    }
    // /zookeeper as a chroot, like /zookeeper as a path.
    for hosts in [
        format!("{connect}/zookeeper"),
        format!("{connect}/zookeeper/quota"),
    ] {
        let out = run(
            &["-z".into(), hosts, "/l".into(), "--".into(), "true".into()],
            &[],
        );
        out.assert_code(64);
        assert!(
            out.one_error_line().contains("/zookeeper"),
            "{}",
            out.stderr
        );
    }
    // A bad ZKLOCK_ZOOKEEPER is named as such; a bad -z as -z.
    let out = run(
        &[format!("{base}/l"), "--".into(), "true".into()],
        &[("ZKLOCK_ZOOKEEPER", "zk 1")],
    );
    out.assert_code(64);
    let line = out.one_error_line();
    assert!(line.contains("ZKLOCK_ZOOKEEPER"), "{line}");
    let out = run(
        &[
            "-z".into(),
            "zk 1".into(),
            format!("{base}/l"),
            "--".into(),
            "true".into(),
        ],
        &[("ZKLOCK_ZOOKEEPER", &connect)],
    );
    out.assert_code(64);
    let line = out.one_error_line();
    assert!(
        line.contains("--zookeeper") && !line.contains("ZKLOCK_ZOOKEEPER"),
        "{line}"
    );
    assert!(!zk.exists(&base), "{base} was created");
    let _ = (assert_no_nodes, ServerOptions::default, ZkServer::start);
}

#[test]
fn a_bad_hosts_variable_is_named_by_every_subcommand() {
    // Found when clap's model became lazily built: the check that tells a
    // bad variable from a bad -z looked at `run` only, so the operator
    // commands blamed --zookeeper for a bad ZKLOCK_ZOOKEEPER.
    for args in [
        &["run", "/l", "--", "true"][..],
        &["status", "/l"],
        &["list"],
        &["break", "--yes", "/l"],
    ] {
        let mut cmd = zklock();
        cmd.args(args).env("ZKLOCK_ZOOKEEPER", "zk 1");
        let out = run_bounded(&mut cmd, LONG);
        out.assert_code(64);
        let line = out.one_error_line();
        assert!(line.contains("in ZKLOCK_ZOOKEEPER"), "{args:?}: {line}");
        let mut cmd = zklock();
        cmd.arg(args[0])
            .args(["-z", "zk 2"])
            .args(&args[1..])
            .env("ZKLOCK_ZOOKEEPER", "zk 1");
        let out = run_bounded(&mut cmd, LONG);
        out.assert_code(64);
        let line = out.one_error_line();
        assert!(line.contains("'zk 2' for '--zookeeper"), "{args:?}: {line}");
    }
}
