//! Many `zklock run` on one path: one command at a time, increasing fencing tokens,
//! first come first served.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{
    Gated, Inspector, KillOnDrop, LockLog, TempDir, assert_no_nodes, run_bounded, shared_server,
    unique_path, wait_for_exit, wait_until, zklock_run,
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
