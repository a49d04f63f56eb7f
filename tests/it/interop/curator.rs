//! Apache Curator's recipes (Debian's jars, driven through
//! `tests/it/curator/CuratorLock.java`) and zklock on the same paths.

use std::time::Duration;

use super::{LONG, assert_code, assert_exits_ok, run_no_wait, start_order, waiting_zklock};
use crate::harness::{
    Curator, CuratorKind, Holder, Inspector, LockLog, assert_no_lock_nodes, shared_server,
    unique_path, wait_for_contenders, wait_until, zklock_run,
};

/// A Curator client for one test, logging its holds to `log`.
fn curator(log: &LockLog) -> Curator {
    Curator::start(&shared_server().connect_string(), Some(log))
}

/// The ids of the holders in the order they started.
fn assert_start_order(log: &LockLog, order: &[u32]) {
    assert_eq!(start_order(log), order, "{}", log.contents());
}

#[test]
fn curator_mutex_excludes_zklock() {
    let path = unique_path("curator-mutex-held");
    let zk = Inspector::connect(&shared_server().connect_string());
    let log = LockLog::new();
    let mut c = curator(&log);
    let held = c.hold("a", CuratorKind::Mutex, &path);
    assert_code(
        &run_no_wait(&path, &[], &log),
        75,
        "zklock -n while Curator's mutex is held",
    );

    let mut z = waiting_zklock(&path, &[], &log);
    wait_for_contenders(&zk, &path, "-lock-", 2);
    assert_eq!(
        log.starts(),
        1,
        "zklock waits for Curator:\n{}",
        log.contents()
    );
    c.release("a");
    assert_exits_ok(&mut z);
    assert!(!zk.exists(&held.node));
    log.assert_exclusive();
    log.assert_tokens_increase();
    assert_eq!(log.starts(), 2);
    c.close();
    assert_no_lock_nodes(&zk, &path);
}

#[test]
fn zklock_excludes_curator_mutex() {
    let path = unique_path("curator-mutex-waits");
    let zk = Inspector::connect(&shared_server().connect_string());
    let log = LockLog::new();
    let mut c = curator(&log);
    let mut z = Holder::start(
        &mut zklock_run(&shared_server().connect_string(), &path),
        &log,
    );

    c.acquire(
        "impatient",
        CuratorKind::Mutex,
        &path,
        Some(Duration::from_secs(1)),
    );
    c.expect("impatient", "timeout", LONG);

    c.acquire("a", CuratorKind::Mutex, &path, None);
    wait_for_contenders(&zk, &path, "-lock-", 2);
    assert_eq!(
        c.next("a", Duration::ZERO),
        None,
        "Curator waits for zklock"
    );
    z.finish();
    c.acquired("a", LONG);
    log.assert_exclusive();
    log.assert_tokens_increase();
    assert_start_order(&log, &[z.shell_pid(), c.id("a")]);
    c.release("a");
    c.close();
    assert_no_lock_nodes(&zk, &path);
}

#[test]
fn curator_read_lock_shares_with_zklock_shared() {
    let path = unique_path("curator-read-share");
    let zk = Inspector::connect(&shared_server().connect_string());
    let log = LockLog::new();
    let mut c = curator(&log);
    c.hold("r", CuratorKind::Read, &path);
    assert_code(
        &run_no_wait(&path, &["-s"], &log),
        0,
        "zklock -s beside a Curator reader",
    );
    for args in [&["-x"][..], &["--write"]] {
        assert_code(
            &run_no_wait(&path, args, &log),
            75,
            &format!("zklock {args:?} beside a Curator reader"),
        );
    }
    assert_eq!(log.max_concurrency(), 2, "{}", log.contents());
    c.release("r");

    // And the other way: Curator's reader shares zklock's.
    let mut z = Holder::start(
        zklock_run(&shared_server().connect_string(), &path).arg("-s"),
        &log,
    );
    c.acquire("r", CuratorKind::Read, &path, Some(Duration::from_secs(20)));
    c.acquired("r", LONG);
    assert_eq!(log.open_ids().len(), 2, "{}", log.contents());
    c.release("r");
    z.finish();
    c.close();
    assert_no_lock_nodes(&zk, &path);
}

#[test]
fn curator_write_lock_excludes_zklock_shared() {
    let path = unique_path("curator-write");
    let zk = Inspector::connect(&shared_server().connect_string());
    let log = LockLog::new();
    let mut c = curator(&log);
    c.hold("w", CuratorKind::Write, &path);
    assert_code(
        &run_no_wait(&path, &["-s"], &log),
        75,
        "zklock -s beside a Curator writer",
    );

    let mut z = waiting_zklock(&path, &["-s"], &log);
    wait_for_contenders(&zk, &path, "__READ__", 1);
    assert_eq!(
        log.starts(),
        1,
        "zklock -s waits for Curator:\n{}",
        log.contents()
    );
    c.release("w");
    assert_exits_ok(&mut z);
    log.assert_exclusive();

    // And the other way: Curator's writer sees zklock's reader, Curator's
    // reader zklock's writer.
    for (args, kind) in [("-s", CuratorKind::Write), ("--write", CuratorKind::Read)] {
        let mut z = Holder::start(
            zklock_run(&shared_server().connect_string(), &path).arg(args),
            &log,
        );
        c.acquire("late", kind, &path, Some(Duration::from_secs(1)));
        c.expect("late", "timeout", LONG);
        z.finish();
    }
    log.assert_exclusive();
    c.close();
    assert_no_lock_nodes(&zk, &path);
}

/// A semaphore of 2 taken by Curator's `InterProcessSemaphoreV2` and
/// `zklock --limit 2` at once: at most 2 hold, and each waits its turn.
#[test]
fn semaphore_shared_with_curator() {
    let path = unique_path("curator-semaphore");
    let leases = format!("{path}/leases");
    let zk = Inspector::connect(&shared_server().connect_string());
    let log = LockLog::new();
    let mut c = curator(&log);
    let limit = ["--limit", "2"];
    c.hold("a", CuratorKind::Semaphore(2), &path);
    let mut z1 = Holder::start(
        zklock_run(&shared_server().connect_string(), &path).args(limit),
        &log,
    );

    // The pool is full: Curator's third lease waits (or gives up in time),
    // and so does zklock.
    c.acquire(
        "late",
        CuratorKind::Semaphore(2),
        &path,
        Some(Duration::from_secs(1)),
    );
    c.expect("late", "timeout", LONG);
    c.acquire("b", CuratorKind::Semaphore(2), &path, None);
    wait_for_contenders(&zk, &leases, "-lease-", 3);
    assert_eq!(
        c.next("b", Duration::ZERO),
        None,
        "Curator waits for a permit"
    );
    assert_code(
        &run_no_wait(&path, &limit, &log),
        75,
        "zklock --limit 2 -n with both permits taken",
    );
    let mut z2 = Holder::spawn(
        zklock_run(&shared_server().connect_string(), &path).args(limit),
        &log,
    );
    // Curator's waiter holds the gate; zklock queues on it.
    wait_for_contenders(&zk, &format!("{path}/locks"), "-lock-", 2);

    c.release("a");
    c.acquired("b", LONG);
    assert!(
        !z2.started(),
        "zklock waits behind Curator:\n{}",
        log.contents()
    );
    z1.finish();
    z2.wait_started(LONG);
    c.release("b");
    z2.finish();

    log.assert_max_concurrency(2);
    assert_eq!(log.max_concurrency(), 2, "{}", log.contents());
    assert_start_order(
        &log,
        &[c.id("a"), z1.shell_pid(), c.id("b"), z2.shell_pid()],
    );
    c.close();
    assert_no_lock_nodes(&zk, &path);
}

/// Curator's and zklock's waiters get the lock in the order they came.
#[test]
fn queue_order_across_curator_and_zklock() {
    let connect = shared_server().connect_string();
    let path = unique_path("curator-queue");
    let zk = Inspector::connect(&connect);
    let log = LockLog::new();
    let mut c = curator(&log);
    let mut first = Holder::start(&mut zklock_run(&connect, &path), &log);
    c.acquire("a", CuratorKind::Mutex, &path, None);
    wait_for_contenders(&zk, &path, "-lock-", 2);
    let mut second = Holder::spawn(&mut zklock_run(&connect, &path), &log);
    wait_for_contenders(&zk, &path, "-lock-", 3);
    c.acquire("b", CuratorKind::Mutex, &path, None);
    wait_for_contenders(&zk, &path, "-lock-", 4);

    first.finish();
    c.acquired("a", LONG);
    assert!(!second.started(), "{}", log.contents());
    c.release("a");
    second.wait_started(LONG);
    assert_eq!(c.next("b", Duration::ZERO), None, "{}", log.contents());
    second.finish();
    c.acquired("b", LONG);
    c.release("b");

    log.assert_exclusive();
    log.assert_tokens_increase();
    assert_start_order(
        &log,
        &[first.shell_pid(), c.id("a"), second.shell_pid(), c.id("b")],
    );
    c.close();
    assert_no_lock_nodes(&zk, &path);
}

/// `_c_<uuid>-<name><seq>`, Curator's protected node name: a 36-character
/// uuid, then a hyphen before the recipe's name.
fn assert_curator_name(node: &str, name: &str) {
    let child = node.rsplit('/').next().unwrap();
    let rest = child
        .strip_prefix("_c_")
        .unwrap_or_else(|| panic!("{child}"));
    let (uuid, rest) = rest.split_at(36);
    assert!(
        uuid.chars().all(|c| c.is_ascii_hexdigit() || c == '-'),
        "{child}"
    );
    let seq = rest
        .strip_prefix(&format!("-{name}"))
        .unwrap_or_else(|| panic!("{child} is not Curator's `_c_<uuid>-{name}<seq>`"));
    assert!(
        seq.len() == 10 && seq.chars().all(|c| c.is_ascii_digit()),
        "{child}"
    );
}

/// Curator and zklock name their nodes alike, each kind of lock: listed while
/// both have a node in the directory, every node is `_c_<uuid>-<name><seq>`.
#[test]
fn nodes_are_named_as_curator_names_them() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let log = LockLog::new();
    let mut c = curator(&log);
    for (kind, args, name) in [
        (CuratorKind::Mutex, &[][..], "lock-"),
        (CuratorKind::Read, &["-s"], "__READ__"),
        (CuratorKind::Write, &["--write"], "__WRIT__"),
        (CuratorKind::Semaphore(2), &["--limit", "2"], "lease-"),
    ] {
        let path = unique_path("curator-names");
        let held = c.hold("a", kind, &path);
        // Exclusive kinds queue behind Curator; shared ones hold beside it.
        let mut z = Holder::spawn(zklock_run(&connect, &path).args(args), &log);
        let dir = match kind {
            CuratorKind::Semaphore(_) => {
                z.wait_started(LONG);
                format!("{path}/leases")
            }
            _ => path.clone(),
        };
        let nodes = wait_for_contenders(&zk, &dir, name, 2);
        assert_eq!(zk.children(&dir).len(), 2, "{dir}: {nodes:?}");
        assert!(nodes.contains(&held.node), "{nodes:?} lacks {}", held.node);
        for node in &nodes {
            assert_curator_name(node, name);
        }
        c.release("a");
        z.wait_started(LONG);
        assert!(nodes.contains(&z.node()), "{nodes:?} lacks {}", z.node());
        z.finish();
    }
    c.close();
}

/// Curator's leases and zklock's runs started together on a semaphore of 2,
/// each letting go as soon as it holds: never more than 2 at once, and every
/// one gets its turn.
#[test]
fn semaphore_contended_by_curator_and_zklock() {
    let path = unique_path("curator-semaphore-race");
    let zk = Inspector::connect(&shared_server().connect_string());
    let log = LockLog::new();
    let mut c = curator(&log);
    let slots = ["a", "b", "c"];
    let mut runs = Vec::new();
    for slot in slots {
        c.acquire(slot, CuratorKind::Semaphore(2), &path, None);
        runs.push(waiting_zklock(&path, &["--limit", "2"], &log));
    }
    let mut waiting = slots.to_vec();
    wait_until(LONG, "every Curator lease taken and returned", || {
        waiting.retain(|slot| match c.next(slot, Duration::from_millis(10)) {
            None => true,
            Some(line) if line.starts_with("acquired ") => {
                c.release(slot);
                false
            }
            Some(line) => panic!("Curator's {slot}: {line}"),
        });
        waiting.is_empty()
    });
    for run in &mut runs {
        assert_exits_ok(run);
    }
    log.assert_max_concurrency(2);
    assert_eq!(log.starts(), 6, "{}", log.contents());
    assert!(log.open_ids().is_empty(), "{}", log.contents());
    c.close();
    assert_no_lock_nodes(&zk, &path);
}
