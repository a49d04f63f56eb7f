//! Other clients' locks on the same path: kazoo's (Python, from PyPI) `Lock`,
//! `ReadLock` and `WriteLock`, and Apache Curator's (Java, from Debian)
//! `InterProcessMutex`, `InterProcessReadWriteLock` and
//! `InterProcessSemaphoreV2`. Each side must see the other's nodes as
//! contenders, and queue behind them in arrival order.

use std::process::{Output, Stdio};
use std::time::Duration;

use crate::harness::{
    EntryKind, Holder, Inspector, KazooKind, KazooLock, KillOnDrop, LockLog, Scene,
    assert_no_lock_nodes, shared_server, unique_path, wait_for_contenders, wait_for_exit,
    zklock_run,
};

mod curator;

const LONG: Duration = Duration::from_secs(30);

fn kazoo(kind: KazooKind, path: &str, timeout: Option<Duration>, log: &LockLog) -> KazooLock {
    KazooLock::spawn(
        kind,
        &shared_server().connect_string(),
        path,
        timeout,
        Some(log),
    )
}

fn run_no_wait(path: &str, args: &[&str], log: &LockLog) -> Output {
    zklock_run(&shared_server().connect_string(), path)
        .args(args)
        .args(["-n", "--", "sh", "-c"])
        .arg(log.shell_body("true"))
        .stdin(Stdio::null())
        .output()
        .expect("run zklock")
}

fn assert_code(output: &Output, code: i32, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{what}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A zklock that waits (bounded) for the lock, logs its turn and exits.
fn waiting_zklock(path: &str, args: &[&str], log: &LockLog) -> KillOnDrop {
    KillOnDrop(
        zklock_run(&shared_server().connect_string(), path)
            .args(args)
            .args(["-w", "60s", "--", "sh", "-c"])
            .arg(log.shell_body("true"))
            .spawn()
            .expect("spawn zklock"),
    )
}

fn assert_exits_ok(child: &mut KillOnDrop) {
    let status = wait_for_exit(child, LONG).expect("zklock gets the lock and exits");
    assert_eq!(status.code(), Some(0));
}

/// The holders' ids in the order they started.
fn start_order(log: &LockLog) -> Vec<u32> {
    log.entries()
        .iter()
        .filter(|e| e.kind == EntryKind::Start)
        .map(|e| e.id)
        .collect()
}

#[test]
fn kazoo_lock_excludes_zklock() {
    let s = Scene::new("kazoo-lock-held");
    let mut k = kazoo(KazooKind::Lock, &s.path, None, &s.log);
    k.expect("acquired", LONG);
    assert_code(
        &run_no_wait(&s.path, &[], &s.log),
        75,
        "zklock -n while kazoo holds",
    );

    let mut z = waiting_zklock(&s.path, &[], &s.log);
    wait_for_contenders(s.zk(), &s.path, "-lock-", 1);
    assert_eq!(
        s.log.starts(),
        1,
        "zklock waits for kazoo:\n{}",
        s.log.contents()
    );
    k.release(LONG);
    assert_exits_ok(&mut z);
    s.log.assert_exclusive();
    assert_eq!(s.log.starts(), 2);
    s.assert_no_lock_nodes();
}

#[test]
fn zklock_excludes_kazoo_lock() {
    let s = Scene::new("kazoo-lock-waits");
    let mut z = Holder::start(&mut s.run(), &s.log);

    let mut impatient = kazoo(
        KazooKind::Lock,
        &s.path,
        Some(Duration::from_secs(1)),
        &s.log,
    );
    impatient.expect("timeout", LONG);
    impatient.assert_exit(3, LONG);

    let mut k = kazoo(KazooKind::Lock, &s.path, None, &s.log);
    wait_for_contenders(s.zk(), &s.path, "__lock__", 1);
    assert_eq!(k.next_line(Duration::ZERO), None, "kazoo waits for zklock");
    z.finish();
    k.expect("acquired", LONG);
    s.log.assert_exclusive();
    assert_eq!(start_order(&s.log).first(), Some(&z.shell_pid()));
    k.release(LONG);
    s.assert_no_lock_nodes();
}

#[test]
fn kazoo_read_lock_and_zklock_shared_share() {
    let s = Scene::new("kazoo-read-share");
    let mut kr = kazoo(KazooKind::ReadLock, &s.path, None, &s.log);
    kr.expect("acquired", LONG);
    assert_code(
        &run_no_wait(&s.path, &["-s"], &s.log),
        0,
        "zklock -s beside a kazoo reader",
    );
    assert_code(
        &run_no_wait(&s.path, &["-x"], &s.log),
        75,
        "zklock -x beside a kazoo reader",
    );
    assert_eq!(s.log.max_concurrency(), 2, "{}", s.log.contents());
    kr.release(LONG);

    let mut z = Holder::start(s.run().arg("-s"), &s.log);
    let mut kr = kazoo(
        KazooKind::ReadLock,
        &s.path,
        Some(Duration::from_secs(20)),
        &s.log,
    );
    kr.expect("acquired", LONG);
    kr.release(LONG);
    z.finish();
    s.assert_no_lock_nodes();
}

#[test]
fn kazoo_write_lock_excludes_zklock_shared() {
    let s = Scene::new("kazoo-write");
    let mut kw = kazoo(KazooKind::WriteLock, &s.path, None, &s.log);
    kw.expect("acquired", LONG);
    assert_code(
        &run_no_wait(&s.path, &["-s"], &s.log),
        75,
        "zklock -s beside a kazoo writer",
    );

    let mut z = waiting_zklock(&s.path, &["-s"], &s.log);
    wait_for_contenders(s.zk(), &s.path, "__READ__", 1);
    assert_eq!(
        s.log.starts(),
        1,
        "zklock -s waits for kazoo:\n{}",
        s.log.contents()
    );
    kw.release(LONG);
    assert_exits_ok(&mut z);
    s.log.assert_exclusive();

    // And the other way: kazoo's writer sees zklock's reader.
    let mut z = Holder::start(s.run().arg("-s"), &s.log);
    let mut kw = kazoo(
        KazooKind::WriteLock,
        &s.path,
        Some(Duration::from_secs(1)),
        &s.log,
    );
    kw.expect("timeout", LONG);
    kw.assert_exit(3, LONG);
    z.finish();
    s.assert_no_lock_nodes();
}

#[test]
fn kazoo_read_lock_waits_for_zklock_exclusive() {
    let s = Scene::new("kazoo-read-waits");
    let mut z = Holder::start(&mut s.run(), &s.log);
    let mut kr = kazoo(KazooKind::ReadLock, &s.path, None, &s.log);
    wait_for_contenders(s.zk(), &s.path, "__rlock__", 1);
    assert_eq!(kr.next_line(Duration::ZERO), None, "kazoo's reader waits");
    z.finish();
    kr.expect("acquired", LONG);
    s.log.assert_exclusive();
    assert_eq!(start_order(&s.log).first(), Some(&z.shell_pid()));
    kr.release(LONG);
    s.assert_no_lock_nodes();
}

/// Nodes of earlier zklock builds (`_c_<uuid>__READ__<seq>`, no hyphen) are
/// still contenders: their writer excludes a reader, their reader a writer.
#[test]
fn older_read_and_write_node_names_still_count() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let log = LockLog::new();
    let path = unique_path("older-names");
    zk.create_all(&path);
    let uuid = "0b5f5d1e-0000-4000-8000-000000000001";
    let (writer, _) = zk.create_ephemeral_sequential(&format!("{path}/_c_{uuid}__WRIT__"), b"");
    assert_code(
        &run_no_wait(&path, &["-s"], &log),
        75,
        "zklock -s beside an older writer node",
    );
    assert!(zk.delete(&writer));
    let (reader, _) = zk.create_ephemeral_sequential(&format!("{path}/_c_{uuid}__READ__"), b"");
    assert_code(
        &run_no_wait(&path, &["--write"], &log),
        75,
        "zklock --write beside an older reader node",
    );
    assert_code(
        &run_no_wait(&path, &["-s"], &log),
        0,
        "zklock -s beside an older reader node",
    );
    assert_eq!(log.starts(), 1, "{}", log.contents());
    assert!(zk.delete(&reader));
    assert_no_lock_nodes(&zk, &path);
}
