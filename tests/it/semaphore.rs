//! Semaphores (`--limit N`): at most N holders, a killed holder's permit comes back,
//! the limit and the lock kind of a path are checked, the token is the lease's czxid.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::faults_util::watchers_of;
use crate::harness::{
    Gated, Holder, Inspector, KillOnDrop, LockLog, Scene, TempDir, assert_no_lock_nodes,
    contenders, is_dead, shared_server, signal, unique_path, wait_for_contenders, wait_for_exit,
    wait_no_lock_nodes, wait_until, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// Short sessions so that a killed holder's permit comes back within seconds; the
/// kill-after leaves room in the lease rule (docs/design.md, "Session and lease rules").
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
    let s = Scene::new("sem-limit");
    let path = &s.path;
    let connect = &s.connect;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for contender in 0..10 {
            let (connect, path, log) = (connect, path, &s.log);
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
    assert_eq!(s.log.starts(), 50);
    assert_eq!(
        s.log.max_concurrency(),
        3,
        "3 holders at once, never 4:\n{}",
        s.log.contents()
    );
    let zk = Inspector::connect(connect);
    assert_pool_empty(&zk, path);
    assert_eq!(
        zk.get_data(path).map(|(data, _)| data),
        Some(b"3".to_vec()),
        "the limit is the path's data"
    );
}

#[test]
fn killed_holder_frees_its_permit() {
    let s = Scene::new("sem-kill");
    let path = &s.path;
    let holder = || Holder::start(s.run().args(["--limit", "2"]).args(FAST_SESSION), &s.log);
    let mut a = holder();
    let mut b = holder();
    let mut c = KillOnDrop(
        s.run()
            .args(["--limit", "2", "-w", "60s"])
            .args(FAST_SESSION)
            .args(["--", "sh", "-c"])
            .arg(s.log.shell_body("true"))
            .spawn()
            .expect("spawn waiter"),
    );
    // The waiter's lease exists: it holds the gate and watches the full pool.
    wait_for_contenders(s.zk(), &format!("{path}/leases"), "-lease-", 3);
    assert_eq!(s.log.starts(), 2);

    let killed = Instant::now();
    signal(a.pid() as i32, libc::SIGKILL);
    // The command dies with zklock (parent-death signal); its `end` must be in the
    // log before the waiter could possibly start (a session timeout from now).
    let shell = a.shell_pid();
    wait_until(LONG, "the killed holder's command dies", || is_dead(shell));
    s.log.record_end(shell);
    a.release();
    assert_eq!(a.wait(LONG).code(), None, "killed by a signal");

    assert!(
        s.log.wait_for_starts(3, LONG),
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
    s.log.assert_max_concurrency(2);
    wait_no_lock_nodes(s.zk(), path, LONG);
    assert_pool_empty(s.zk(), path);
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
    let s = Scene::new("sem-token");
    let path = &s.path;
    let mut holder = Holder::start(s.run().args(["--limit", "2"]), &s.log);
    let node = holder.node();
    assert!(
        node.starts_with(&format!("{path}/leases/_c_")) && node.contains("-lease-"),
        "ZKLOCK_NODE is our lease: {node}"
    );
    let stat = s
        .zk()
        .stat(&node)
        .expect("the lease exists while the command runs");
    assert_eq!(holder.tokens(), [stat.czxid]);
    assert_eq!(
        stat.ephemeral_owner,
        i64::from_str_radix(holder.env("ZKLOCK_SESSION_ID").trim_start_matches("0x"), 16).unwrap()
    );
    assert_eq!(holder.env("ZKLOCK_PATH"), *path);
    holder.finish();
    assert_pool_empty(s.zk(), path);
}

#[test]
fn no_wait_on_a_full_semaphore_gives_up_at_once() {
    let s = Scene::new("sem-no-wait");
    let path = &s.path;
    let mut holders: Vec<Holder> = (0..2)
        .map(|_| Holder::start(s.run().args(["--limit", "2"]), &s.log))
        .collect();
    let started = Instant::now();
    let output = run_no_wait(&s.connect, path, &["--limit", "2"]);
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
        s.zk().children(&format!("{path}/leases")).len(),
        2,
        "the refused run's lease is gone"
    );
    for holder in &mut holders {
        holder.finish();
    }
    assert_pool_empty(s.zk(), path);
}

/// `cmd` run by `flock -F -s BARRIER`: it starts only once the test lets go of
/// its exclusive lock on BARRIER, and keeps its pid (no fork).
fn behind_barrier(cmd: &Command, barrier: &Path) -> Command {
    let mut wrapped = Command::new("flock");
    wrapped
        .args(["-F", "-s"])
        .arg(barrier)
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .stdin(Stdio::null());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    wrapped
}

/// How many of `pids` wait for a file lock (`->` lines of /proc/locks).
fn blocked_on_flock(pids: &[u32]) -> usize {
    let locks = std::fs::read_to_string("/proc/locks").expect("read /proc/locks");
    locks
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            (words.get(1) == Some(&"->")).then(|| words.get(5)?.parse::<u32>().ok())?
        })
        .filter(|pid| pids.contains(pid))
        .count()
}

/// Starts `contenders` runs of `zklock run --limit LIMIT -n` on `path` at
/// once and returns how many ran. All wait on one file lock until every one is
/// blocked on it, so they reach ZooKeeper together; a run that gets a permit
/// holds it until every run has run or given up, so no permit comes free
/// during a trial.
fn simultaneous_no_wait(connect: &str, path: &str, limit: u32, contenders: usize) -> usize {
    let dir = TempDir::new();
    let barrier_path = dir.path().join("barrier");
    let barrier = std::fs::File::create(&barrier_path).expect("create the barrier");
    // SAFETY: flock on a descriptor this function owns; no memory is shared.
    let locked = unsafe { libc::flock(barrier.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "flock: {}", std::io::Error::last_os_error());
    let mut zklock = zklock_run(connect, path);
    zklock.args(["--limit", &limit.to_string(), "-n", "-q"]);
    let mut runs: Vec<Gated> = (0..contenders)
        .map(|_| Gated::spawn(behind_barrier(&zklock, &barrier_path)))
        .collect();
    let pids: Vec<u32> = runs.iter().map(Gated::pid).collect();
    wait_until(LONG, "every run waiting at the barrier", || {
        blocked_on_flock(&pids) == contenders
    });
    drop(barrier);
    wait_until(LONG, "every run ran or gave up", || {
        runs.iter_mut()
            .all(|run| run.started() || run.exited().is_some())
    });
    let ran = runs.iter().filter(|run| run.started()).count();
    for mut run in runs {
        if run.started() {
            assert!(run.finish().success(), "a run that got a permit");
        } else {
            assert_eq!(run.wait(LONG).code(), Some(75), "a run that gave up");
        }
    }
    ran
}

/// With N free permits and 5 simultaneous `--no-wait` runs, exactly min(N, 5)
/// run, every time; nothing is left behind.
fn no_wait_trials(limit: u32) {
    let server = shared_server();
    let connect = server.connect_string();
    let path = unique_path(&format!("sem-no-wait-{limit}"));
    let zk = Inspector::connect(&connect);
    let started = Instant::now();
    let ran: Vec<usize> = (0..20)
        .map(|_| {
            let ran = simultaneous_no_wait(&connect, &path, limit, 5);
            assert_pool_empty(&zk, &path);
            ran
        })
        .collect();
    eprintln!(
        "20 trials of 5 x --limit {limit} -n took {:?}",
        started.elapsed()
    );
    let expected = (limit as usize).min(5);
    assert!(
        ran.iter().all(|&n| n == expected),
        "runs that ran in each trial (expected {expected}): {ran:?}"
    );
}

#[test]
fn simultaneous_no_wait_runs_fill_a_semaphore_of_one() {
    no_wait_trials(1);
}

#[test]
fn simultaneous_no_wait_runs_fill_a_semaphore_of_two() {
    no_wait_trials(2);
}

#[test]
fn simultaneous_no_wait_runs_fill_a_semaphore_of_three() {
    no_wait_trials(3);
}

/// Waiting and `--no-wait` runs on one pool: never more than N hold, and each
/// no-wait run either ran or gave up (75), as the log says.
#[test]
fn waiting_and_no_wait_runs_share_a_semaphore() {
    let s = Scene::new("sem-mixed");
    let path = &s.path;
    let connect = &s.connect;
    let dir = TempDir::new();
    let no_wait_ran = dir.path().join("no-wait-ran");
    // Two waiting contenders keep the pool of two mostly full, with gaps
    // between their runs for the no-wait runs to take.
    let (waiters, waiting, no_wait) = (2, 2 * 5, 3 * 6);
    let gave_up = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let (connect, path, log) = (connect, path, &s.log);
        for waiter in 0..waiters {
            scope.spawn(move || {
                for run in 0..waiting / waiters {
                    let status = zklock_run(connect, path)
                        .args(["--limit", "2", "-w", "60s", "--", "sh", "-c"])
                        .arg(log.shell_body("sleep 0.1"))
                        .status()
                        .expect("run zklock");
                    assert_eq!(status.code(), Some(0), "waiter {waiter} run {run}");
                }
            });
        }
        let (no_wait_ran, gave_up) = (&no_wait_ran, &gave_up);
        for contender in 0..3 {
            scope.spawn(move || {
                let body = format!("echo >> '{}'; sleep 0.05", no_wait_ran.display());
                for run in 0..no_wait / 3 {
                    let status = zklock_run(connect, path)
                        .args(["--limit", "2", "-n", "-q", "--", "sh", "-c"])
                        .arg(log.shell_body(&body))
                        .status()
                        .expect("run zklock");
                    match status.code() {
                        Some(0) => {}
                        Some(75) => {
                            gave_up.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        _ => panic!("no-wait {contender} run {run}: {status}"),
                    }
                }
            });
        }
    });
    let ran = std::fs::read_to_string(&no_wait_ran)
        .unwrap_or_default()
        .lines()
        .count();
    let gave_up = gave_up.into_inner();
    eprintln!("no-wait runs: {ran} ran, {gave_up} gave up");
    assert_eq!(ran + gave_up, no_wait, "each no-wait run ran or gave up");
    assert_eq!(s.log.starts(), waiting + ran, "{}", s.log.contents());
    assert!(s.log.open_ids().is_empty(), "{}", s.log.contents());
    s.log.assert_max_concurrency(2);
    assert_pool_empty(&Inspector::connect(connect), path);
}

/// A no-wait run queued behind a gate holder waits only while a permit may
/// still come its way. The gate holder is played by the test's own client:
/// it passes through (its gate goes, no lease: the run takes the permit), or
/// its lease fills the pool while it keeps the gate (the run gives up at
/// once, without waiting for that gate to go).
#[test]
fn no_wait_behind_the_gate_holder() {
    let server = shared_server();
    let s = Scene::on(server.connect_string(), "sem-no-wait-gate");
    let path = &s.path;
    let mut holder = Holder::start(s.run().args(["--limit", "2"]), &s.log);
    let gate_dir = format!("{path}/locks");
    let leases = format!("{path}/leases");
    const UUID: &str = "00000000-0000-4000-8000-000000000000";
    // Queues a no-wait run behind a gate node of the test's and waits until
    // it watches that node, that is, until it has looked at the leases (one
    // lease of two: it may still get a permit) and set its watch on them.
    let queue_behind_gate = || {
        let (gate, _) = s
            .zk()
            .create_ephemeral_sequential(&format!("{gate_dir}/_c_{UUID}-lock-"), b"");
        let mut zklock = s.run();
        zklock.args(["--limit", "2", "-n", "-q"]);
        let run = Gated::spawn(zklock);
        let ours = wait_for_contenders(s.zk(), &gate_dir, "-lock-", 2)
            .into_iter()
            .find(|node| *node != gate)
            .expect("the run's gate node");
        let session = s
            .zk()
            .stat(&ours)
            .expect("the run's gate node")
            .ephemeral_owner;
        wait_until(LONG, "the run watching the gate node ahead", || {
            watchers_of(&server.four_letter("wchp"), &gate).contains(&session)
        });
        (gate, run)
    };

    let (gate, run) = queue_behind_gate();
    assert!(!run.started());
    assert!(s.zk().delete(&gate));
    let mut run = run;
    run.wait_started(LONG);
    assert_eq!(
        s.zk().children(&leases).len(),
        2,
        "the holder's and the run's"
    );
    assert!(run.finish().success());

    let (gate, mut run) = queue_behind_gate();
    let (lease, _) = s
        .zk()
        .create_ephemeral_sequential(&format!("{leases}/_c_{UUID}-lease-"), b"");
    assert_eq!(run.wait(LONG).code(), Some(75), "gave up on a full pool");
    assert!(!run.started());
    assert!(s.zk().exists(&gate), "without waiting for the gate to go");
    assert_eq!(
        contenders(s.zk(), &gate_dir, "-lock-"),
        std::slice::from_ref(&gate),
        "the run's gate node is gone"
    );
    assert!(s.zk().delete(&lease) && s.zk().delete(&gate));
    holder.finish();
    assert_pool_empty(s.zk(), path);
}
