//! Many `zklock run` on one path: one command at a time, increasing fencing tokens,
//! first come first served.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::faults_util::{HOLD, Locker, wait_children, watchers_of};
use crate::harness::{
    Gated, Inspector, KillOnDrop, LockLog, Scene, TempDir, assert_no_nodes, run_bounded,
    shared_server, unique_path, wait_for_exit, wait_until, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

#[test]
fn eight_processes_ten_runs_each_never_overlap() {
    const PROCESSES: usize = 8;
    const RUNS: usize = 10;
    let zk = Inspector::connect(&shared_server().connect_string());
    let path = unique_path("mutex");
    let log = LockLog::new();
    // A short sleep widens each hold, so that a broken lock shows up as overlap.
    let script = log.shell_body("sleep 0.01");
    let started = Instant::now();
    let workers: Vec<_> = (0..PROCESSES)
        .map(|_| {
            let (connect, path, script) = (
                shared_server().connect_string(),
                path.clone(),
                script.clone(),
            );
            std::thread::spawn(move || {
                for _ in 0..RUNS {
                    let mut cmd = zklock_run(&connect, &path);
                    cmd.args(["--", "sh", "-c", &script]);
                    // Everyone queues behind up to seven others; allow for a slow machine.
                    run_bounded(&mut cmd, Duration::from_secs(120)).assert_code(0);
                }
            })
        })
        .collect();
    for worker in workers {
        if let Err(panic) = worker.join() {
            std::panic::resume_unwind(panic);
        }
    }
    eprintln!(
        "{} locked runs took {:?}",
        PROCESSES * RUNS,
        started.elapsed()
    );

    assert_eq!(log.starts(), PROCESSES * RUNS, "{}", log.contents());
    assert!(log.open_ids().is_empty(), "{}", log.contents());
    log.assert_exclusive();
    log.assert_tokens_increase();
    assert_no_nodes(&zk, &path);
}

#[test]
fn queued_waiters_start_in_arrival_order() {
    const WAITERS: usize = 5;
    let zk = Inspector::connect(&shared_server().connect_string());
    let path = unique_path("fifo");
    let connect = shared_server().connect_string();
    let log = LockLog::new();
    let scratch = TempDir::new();
    let order = scratch.path().join("order");

    let holder = Gated::start(zklock_run(&connect, &path));
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let body = format!("echo {i} >> '{}'", order.display());
        let mut cmd = zklock_run(&connect, &path);
        cmd.args(["--", "sh", "-c", &log.shell_body(&body)])
            .stdout(Stdio::null());
        waiters.push(KillOnDrop(cmd.spawn().expect("spawn waiter")));
        // Arrival is the moment the waiter's node exists; only then may the next come.
        wait_until(LONG, &format!("waiter {i} queued"), || {
            zk.children(&path).len() == i + 2
        });
    }

    assert!(holder.finish().success());
    for (i, waiter) in waiters.iter_mut().enumerate() {
        let status =
            wait_for_exit(waiter, LONG).unwrap_or_else(|| panic!("waiter {i} still running"));
        assert!(status.success(), "waiter {i}: {status}");
    }
    let expected: String = (0..WAITERS).map(|i| format!("{i}\n")).collect();
    assert_eq!(std::fs::read_to_string(&order).unwrap(), expected);
    log.assert_exclusive();
    log.assert_tokens_increase();
    assert_no_nodes(&zk, &path);
}

/// A waiter that gives up wakes the one queued behind it. That one was not
/// next in line when it looked, so it must look again and wait for the
/// holder, not take the wake-up for its turn.
#[test]
fn a_waiter_giving_up_does_not_let_the_next_one_in() {
    let s = Scene::new("quitter");
    let path = &s.path;
    let scratch = TempDir::new();
    let ran = scratch.path().join("ran");

    let holder = Gated::start(s.run());
    let holder_node = format!("{path}/{}", s.zk().children(path)[0]);
    let mut quitter = s.run();
    // Long enough for the next waiter to queue behind it on a loaded machine.
    quitter.args(["--timeout", "5s", "--", "true"]);
    let mut quitter = KillOnDrop(quitter.spawn().expect("spawn the quitter"));
    wait_until(LONG, "the quitter queued", || {
        s.zk().children(path).len() == 2
    });
    let mut next = s.run();
    next.arg("--").arg("touch").arg(&ran);
    let mut next = KillOnDrop(next.spawn().expect("spawn the next waiter"));
    wait_until(LONG, "the next waiter queued", || {
        s.zk().children(path).len() == 3
    });
    let next_node = s
        .zk()
        .children(path)
        .into_iter()
        .max_by_key(|name| name[name.len() - 10..].to_string())
        .map(|name| format!("{path}/{name}"))
        .unwrap();
    let next_session = s
        .zk()
        .stat(&next_node)
        .expect("the next waiter's node")
        .ephemeral_owner;

    let status = wait_for_exit(&mut quitter, LONG).expect("the quitter gave up");
    assert_eq!(status.code(), Some(75), "the quitter: {status}");
    // Woken by the quitter's deletion, the next waiter looks again and then
    // watches the holder; its command must not run meanwhile.
    wait_until(LONG, "the next waiter watching the holder", || {
        assert!(
            !ran.exists(),
            "the next waiter ran while the holder held the lock"
        );
        watchers_of(&shared_server().four_letter("wchp"), &holder_node).contains(&next_session)
    });
    assert!(
        !ran.exists(),
        "the next waiter ran while the holder held the lock"
    );

    assert!(holder.finish().success());
    let status = wait_for_exit(&mut next, LONG).expect("the next waiter ran");
    assert!(status.success(), "the next waiter: {status}");
    assert!(ran.exists());
    s.assert_nothing_left();
}

/// An operator deleting a waiter's node: the waiter watches its own node, so
/// it notices at once and queues again in a new session, without waiting for
/// the holder to go.
#[test]
fn a_waiter_whose_node_is_deleted_queues_again_at_once() {
    let s = Scene::new("requeue");
    let path = &s.path;
    let mut holder = Locker::spawn("holder", &s.connect, path, &[], &s.log, HOLD);
    let held = holder.wait_info(LONG);
    let mut waiter = Locker::spawn("waiter", &s.connect, path, &["-v"], &s.log, HOLD);
    let first = wait_children(s.zk(), path, 2, LONG)
        .into_iter()
        .find(|c| c != held.node_name())
        .expect("the waiter's node");
    let first_owner = s
        .zk()
        .stat(&format!("{path}/{first}"))
        .expect("node")
        .ephemeral_owner;

    assert!(s.zk().delete(&format!("{path}/{first}")));
    wait_until(LONG, "the waiter queued again", || {
        s.zk()
            .children(path)
            .iter()
            .any(|c| c != held.node_name() && *c != first)
    });
    waiter.assert_running("while the holder holds");

    holder.release();
    holder.expect_exit(0, LONG);
    let got = waiter.wait_info(LONG);
    assert_ne!(got.session, first_owner, "not a new session");
    waiter.release();
    waiter.expect_exit(0, LONG);
    assert!(
        waiter.stderr().contains("queueing again"),
        "{}",
        waiter.stderr()
    );
    s.log.assert_exclusive();
    s.log.assert_tokens_increase();
    s.assert_nothing_left();
}
