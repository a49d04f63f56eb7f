//! Semaphores (`--limit N`): at most N holders, a killed holder's permit comes back,
//! the limit and the lock kind of a path are checked, the token is the lease's czxid.

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{
    Holder, Inspector, KillOnDrop, LockLog, assert_no_lock_nodes, is_dead, shared_server, signal,
    unique_path, wait_for_contenders, wait_for_exit, wait_no_lock_nodes, wait_until, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// Short sessions so that a killed holder's permit comes back within seconds; the
/// kill-after leaves room in the lease rule (README, "What is and is not guaranteed").
const FAST_SESSION: [&str; 4] = ["--session-timeout", "3s", "--kill-after", "0.3s"];

fn run_no_wait(connect: &str, path: &str, args: &[&str]) -> Output {
    zklock_run(connect, path)
        .args(args)
        .args(["-n", "--", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("run zklock")
}

/// Asserts a usage refusal: exit 64 and exactly one line on stderr mentioning `what`.
fn assert_refused(output: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {stderr}");
    assert!(
        lines[0].starts_with("zklock: ") && lines[0].contains(what),
        "expected a line about {what:?}: {stderr}"
    );
}

/// Panics unless the semaphore's gate and lease directories are empty.
fn assert_pool_empty(zk: &Inspector, path: &str) {
    for dir in ["locks", "leases"] {
        let children = zk.children(&format!("{path}/{dir}"));
        assert!(children.is_empty(), "left in {path}/{dir}: {children:?}");
    }
    assert_no_lock_nodes(zk, path);
}

#[test]
fn semaphore_of_three_admits_three_never_four() {
    let server = shared_server();
    let connect = server.connect_string();
    let path = unique_path("sem-limit");
    let log = LockLog::new();
    let started = Instant::now();
    std::thread::scope(|scope| {
        for contender in 0..10 {
            let (connect, path, log) = (&connect, &path, &log);
            scope.spawn(move || {
                for run in 0..5 {
                    let status = zklock_run(connect, path)
                        .args(["--limit", "3", "-w", "60s", "--", "sh", "-c"])
                        .arg(log.shell_body("sleep 0.2"))
                        .status()
                        .expect("run zklock");
                    assert_eq!(status.code(), Some(0), "contender {contender} run {run}");
                }
            });
        }
    });
    eprintln!("50 semaphore runs took {:?}", started.elapsed());
    assert_eq!(log.starts(), 50);
    assert_eq!(
        log.max_concurrency(),
        3,
        "3 holders at once, never 4:\n{}",
        log.contents()
    );
    let zk = Inspector::connect(&connect);
    assert_pool_empty(&zk, &path);
    assert_eq!(
        zk.get_data(&path).map(|(data, _)| data),
        Some(b"3".to_vec()),
        "the limit is the path's data"
    );
}

#[test]
fn killed_holder_frees_its_permit() {
    let server = shared_server();
    let connect = server.connect_string();
    let path = unique_path("sem-kill");
    let zk = Inspector::connect(&connect);
    let log = LockLog::new();
    let holder = || {
        Holder::start(
            zklock_run(&connect, &path)
                .args(["--limit", "2"])
                .args(FAST_SESSION),
            &log,
        )
    };
    let mut a = holder();
    let mut b = holder();
    let mut c = KillOnDrop(
        zklock_run(&connect, &path)
            .args(["--limit", "2", "-w", "60s"])
            .args(FAST_SESSION)
            .args(["--", "sh", "-c"])
            .arg(log.shell_body("true"))
            .spawn()
            .expect("spawn waiter"),
    );
    // The waiter's lease exists: it holds the gate and watches the full pool.
    wait_for_contenders(&zk, &format!("{path}/leases"), "-lease-", 3);
    assert_eq!(log.starts(), 2);

    let killed = Instant::now();
    signal(a.pid() as i32, libc::SIGKILL);
    // The command dies with zklock (parent-death signal); its `end` must be in the
    // log before the waiter could possibly start (a session timeout from now).
    let shell = a.shell_pid();
    wait_until(LONG, "the killed holder's command dies", || is_dead(shell));
    log.record_end(shell);
    a.release();
    assert_eq!(a.wait(LONG).code(), None, "killed by a signal");

    assert!(
        log.wait_for_starts(3, LONG),
        "the waiter never got the permit"
    );
    let freed = killed.elapsed();
    eprintln!("permit of a kill -9'ed holder freed after {freed:?}");
    assert!(
        freed < Duration::from_secs(10),
        "a 3s session should free the permit within about that: {freed:?}"
    );
    let status = wait_for_exit(&mut c, LONG).expect("waiter exits");
    assert_eq!(status.code(), Some(0));
    b.finish();
    log.assert_max_concurrency(2);
    wait_no_lock_nodes(&zk, &path, LONG);
    assert_pool_empty(&zk, &path);
}

#[test]
fn mismatched_limits_and_kinds_are_refused() {
    let server = shared_server();
    let connect = server.connect_string();
    let zk = Inspector::connect(&connect);
    let log = LockLog::new();

    let semaphore = unique_path("sem-mismatch");
    let mut holder = Holder::start(
        zklock_run(&connect, &semaphore).args(["--limit", "3"]),
        &log,
    );
    assert_refused(
        &run_no_wait(&connect, &semaphore, &["--limit", "2"]),
        "semaphore of 3",
    );
    for plain in [&[][..], &["-s"], &["--write"]] {
        assert_refused(&run_no_wait(&connect, &semaphore, plain), "semaphore of 3");
    }
    let leases = zk.children(&format!("{semaphore}/leases"));
    assert_eq!(leases.len(), 1, "only the holder's lease: {leases:?}");
    assert!(
        zk.children(&semaphore)
            .iter()
            .all(|c| c == "locks" || c == "leases"),
        "a refused plain lock left its node: {:?}",
        zk.children(&semaphore)
    );
    holder.finish();
    assert_pool_empty(&zk, &semaphore);

    let plain = unique_path("sem-on-plain");
    let mut holder = Holder::start(&mut zklock_run(&connect, &plain), &log);
    assert_refused(
        &run_no_wait(&connect, &plain, &["--limit", "3"]),
        "in use as a plain lock",
    );
    assert_eq!(
        zk.tree(&plain),
        [holder.node()],
        "only the plain holder's node"
    );
    holder.finish();
    assert_no_lock_nodes(&zk, &plain);
}

#[test]
fn fencing_token_is_the_lease_czxid() {
    let server = shared_server();
    let connect = server.connect_string();
    let path = unique_path("sem-token");
    let zk = Inspector::connect(&connect);
    let log = LockLog::new();
    let mut holder = Holder::start(zklock_run(&connect, &path).args(["--limit", "2"]), &log);
    let node = holder.node();
    assert!(
        node.starts_with(&format!("{path}/leases/_c_")) && node.contains("-lease-"),
        "ZKLOCK_NODE is our lease: {node}"
    );
    let stat = zk
        .stat(&node)
        .expect("the lease exists while the command runs");
    assert_eq!(holder.tokens(), [stat.czxid]);
    assert_eq!(
        stat.ephemeral_owner,
        i64::from_str_radix(holder.env("ZKLOCK_SESSION_ID").trim_start_matches("0x"), 16).unwrap()
    );
    assert_eq!(holder.env("ZKLOCK_PATH"), path);
    holder.finish();
    assert_pool_empty(&zk, &path);
}

#[test]
fn no_wait_on_a_full_semaphore_gives_up_at_once() {
    let server = shared_server();
    let connect = server.connect_string();
    let path = unique_path("sem-no-wait");
    let zk = Inspector::connect(&connect);
    let log = LockLog::new();
    let mut holders: Vec<Holder> = (0..2)
        .map(|_| Holder::start(zklock_run(&connect, &path).args(["--limit", "2"]), &log))
        .collect();
    let started = Instant::now();
    let output = run_no_wait(&connect, &path, &["--limit", "2"]);
    let took = started.elapsed();
    assert_eq!(
        output.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // "At once": no waiting for a permit (generous for a loaded machine).
    assert!(took < Duration::from_secs(5), "--no-wait took {took:?}");
    assert_eq!(
        zk.children(&format!("{path}/leases")).len(),
        2,
        "the refused run's lease is gone"
    );
    for holder in &mut holders {
        holder.finish();
    }
    assert_pool_empty(&zk, &path);
}
