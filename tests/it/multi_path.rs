//! Several lock paths in one run: taken in bytewise order under one deadline, all
//! released on failure, one `ZKLOCK_*` line per path, and losing any one is losing
//! the lock.

use std::time::{Duration, Instant};

use crate::harness::{
    Holder, Inspector, KillOnDrop, LockLog, assert_no_lock_nodes, contenders, shared_server,
    unique_path, wait_for_contenders, wait_for_exit, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

#[test]
fn crossed_paths_never_deadlock() {
    let server = shared_server();
    let connect = server.connect_string();
    let base = unique_path("multi-cross");
    let (a, b) = (format!("{base}/a"), format!("{base}/b"));
    let log = LockLog::new();
    // The log keeps one token per run: /a's, the first line when /a is given first
    // and the last when it is given last. /a's tokens must then increase.
    let first = format!(
        "ZKLOCK_FENCING_TOKEN=\"${{ZKLOCK_FENCING_TOKEN%%\n*}}\"\n{}",
        log.shell_body("true")
    );
    let last = format!(
        "ZKLOCK_FENCING_TOKEN=\"${{ZKLOCK_FENCING_TOKEN##*\n}}\"\n{}",
        log.shell_body("true")
    );
    let started = Instant::now();
    std::thread::scope(|scope| {
        for (paths, body) in [([&a, &b], &first), ([&b, &a], &last)] {
            let connect = &connect;
            scope.spawn(move || {
                for run in 0..100 {
                    // A deadlock shows up as a timeout (75), not a hung test.
                    let status = zklock_run(connect, paths[0])
                        .arg(paths[1])
                        .args(["-w", "60s", "--", "sh", "-c", body])
                        .status()
                        .expect("run zklock");
                    assert_eq!(status.code(), Some(0), "{paths:?} run {run}");
                }
            });
        }
    });
    eprintln!("200 two-path runs took {:?}", started.elapsed());
    assert_eq!(log.starts(), 200);
    log.assert_exclusive();
    log.assert_tokens_increase();
    let zk = Inspector::connect(&connect);
    assert_no_lock_nodes(&zk, &base);
}

#[test]
fn timeout_holding_one_path_leaves_no_node() {
    let server = shared_server();
    let connect = server.connect_string();
    let zk = Inspector::connect(&connect);
    let base = unique_path("multi-timeout");
    let (a, b) = (format!("{base}/a"), format!("{base}/b"));
    let log = LockLog::new();
    let mut holder = Holder::start(&mut zklock_run(&connect, &b), &log);

    let started = Instant::now();
    let mut waiter = KillOnDrop(
        zklock_run(&connect, &b)
            .arg(&a)
            .args(["-w", "4s", "--", "true"])
            .spawn()
            .expect("spawn zklock"),
    );
    // It takes /a first, then queues behind the holder of /b; the deadline leaves
    // time to see both.
    let queued = wait_for_contenders(&zk, &b, "-lock-", 2);
    let held_a = contenders(&zk, &a, "-lock-");
    assert_eq!(held_a.len(), 1, "holds /a while waiting for /b: {held_a:?}");
    let status = wait_for_exit(&mut waiter, LONG).expect("zklock gives up");
    let took = started.elapsed();
    assert_eq!(status.code(), Some(75));
    assert!(
        took >= Duration::from_secs(4) && took < Duration::from_secs(20),
        "one 4s deadline, took {took:?}"
    );
    assert_no_lock_nodes(&zk, &a);
    assert_eq!(
        zk.tree(&b),
        [holder.node()],
        "only the holder is left under /b (queued: {queued:?})"
    );
    assert_eq!(log.starts(), 1);
    holder.finish();
    assert_no_lock_nodes(&zk, &base);
}

#[test]
fn environment_has_one_line_per_path_in_the_given_order() {
    let server = shared_server();
    let connect = server.connect_string();
    let zk = Inspector::connect(&connect);
    let base = unique_path("multi-env");
    let given = [
        format!("{base}/c"),
        format!("{base}/a"),
        format!("{base}/b"),
    ];
    let log = LockLog::new();
    let mut holder = Holder::start(zklock_run(&connect, &given[0]).args(&given[1..]), &log);
    assert_eq!(holder.env("ZKLOCK_PATH"), given.join("\n"));
    let nodes = holder.nodes();
    let tokens = holder.tokens();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    for (i, path) in given.iter().enumerate() {
        assert!(
            nodes[i].starts_with(&format!("{path}/_c_")),
            "line {i} of ZKLOCK_NODE is under {path}: {nodes:?}"
        );
        assert_eq!(tokens[i], zk.stat(&nodes[i]).expect("held node").czxid);
    }
    // Taken in bytewise order: a, b, c.
    assert!(tokens[1] < tokens[2] && tokens[2] < tokens[0], "{tokens:?}");
    holder.finish();
    assert_no_lock_nodes(&zk, &base);
}

#[test]
fn losing_any_one_path_loses_the_lock() {
    let server = shared_server();
    let connect = server.connect_string();
    let zk = Inspector::connect(&connect);
    for lost in 0..2 {
        let base = unique_path("multi-lose");
        let (a, b) = (format!("{base}/a"), format!("{base}/b"));
        let log = LockLog::new();
        let mut holder = Holder::start(
            zklock_run(&connect, &a)
                .arg(&b)
                .args(["--kill-after", "1s"]),
            &log,
        );
        let nodes = holder.nodes();
        assert!(zk.delete(&nodes[lost]), "delete {}", nodes[lost]);
        holder.assert_exit(76, LONG);
        assert!(holder.stderr().contains("lock lost"), "{}", holder.stderr());
        assert!(
            log.open_ids().is_empty(),
            "the command was terminated:\n{}\n{}",
            log.contents(),
            holder.stderr()
        );
        assert_no_lock_nodes(&zk, &base);
    }
}
