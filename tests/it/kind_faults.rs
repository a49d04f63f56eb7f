//! The loss scenarios of the exclusive lock, for the read, write and semaphore
//! kinds: the node deleted by an operator, and the session expired (cut off by a
//! network partition, or zklock frozen past the session timeout). The command is
//! terminated, zklock exits 76, and the next waiter gets the lock.

use std::time::Duration;

use crate::harness::{
    FaultProxy, Holder, Inspector, KillOnDrop, LockLog, Mode, assert_no_lock_nodes, shared_server,
    signal, unique_path, wait_for_contenders, wait_for_exit, wait_no_lock_nodes, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// Short sessions so that expiry takes seconds; the kill-after leaves room in the
/// lease rule (docs/design.md, "Session and lease rules").
const FAST_SESSION: [&str; 4] = ["--session-timeout", "3s", "--kill-after", "0.3s"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Semaphore,
}

impl Kind {
    fn args(self) -> &'static [&'static str] {
        match self {
            Kind::Read => &["-s"],
            Kind::Write => &["--write"],
            Kind::Semaphore => &["--limit", "2"],
        }
    }

    /// A contender that must wait for a holder of this kind: a writer behind a
    /// reader, a reader behind a writer, a third permit of a full semaphore of 2.
    fn waiter_args(self) -> &'static [&'static str] {
        match self {
            Kind::Read => &["-x"],
            Kind::Write => &["-s"],
            Kind::Semaphore => &["--limit", "2"],
        }
    }

    /// Where the waiter's node shows up, its name marker, and how many such nodes
    /// exist once it waits.
    fn queue(self, path: &str) -> (String, &'static str, usize) {
        match self {
            Kind::Read => (path.to_string(), "-lock-", 1),
            Kind::Write => (path.to_string(), "__READ__", 1),
            Kind::Semaphore => (format!("{path}/leases"), "-lease-", 3),
        }
    }

    /// Holders at once that do not break the lock.
    fn limit(self) -> usize {
        match self {
            Kind::Semaphore => 2,
            Kind::Read | Kind::Write => 1,
        }
    }
}

fn node_deleted(kind: Kind) {
    let server = shared_server();
    let connect = server.connect_string();
    let zk = Inspector::connect(&connect);
    let path = unique_path(&format!("deleted-{kind:?}").to_lowercase());
    let log = LockLog::new();
    let mut holder = Holder::start(
        zklock_run(&connect, &path)
            .args(kind.args())
            .args(["--kill-after", "1s"]),
        &log,
    );
    let node = holder.node();
    assert!(zk.delete(&node), "delete {node}");
    holder.assert_exit(76, LONG);
    let stderr = holder.stderr();
    assert!(
        stderr.contains("lock lost") && stderr.contains("deleted"),
        "{stderr}"
    );
    assert!(
        log.open_ids().is_empty(),
        "the command was terminated:\n{}",
        log.contents()
    );
    assert_no_lock_nodes(&zk, &path);
}

#[test]
fn read_lock_node_deleted() {
    node_deleted(Kind::Read);
}

#[test]
fn write_lock_node_deleted() {
    node_deleted(Kind::Write);
}

#[test]
fn semaphore_lease_deleted() {
    node_deleted(Kind::Semaphore);
}

#[derive(Clone, Copy, Debug)]
enum Cut {
    /// A partition between the holder and the server, longer than the session.
    Blackhole,
    /// The holder's zklock stopped (SIGSTOP) past the session timeout.
    Freeze,
}

fn session_expired(kind: Kind, cut: Cut) {
    let server = shared_server();
    let direct = server.connect_string();
    let proxy = matches!(cut, Cut::Blackhole).then(|| FaultProxy::start(server.addr()));
    let zk = Inspector::connect(&direct);
    let path = unique_path(&format!("expired-{kind:?}-{cut:?}").to_lowercase());
    let log = LockLog::new();
    // A semaphore of 2 is full with the victim and one more.
    let mut other = (kind == Kind::Semaphore)
        .then(|| Holder::start(zklock_run(&direct, &path).args(kind.args()), &log));
    let victim_connect = proxy
        .as_ref()
        .map_or(direct.clone(), FaultProxy::connect_string);
    let mut victim = Holder::start(
        zklock_run(&victim_connect, &path)
            .args(kind.args())
            .args(FAST_SESSION),
        &log,
    );
    let mut waiter = KillOnDrop(
        zklock_run(&direct, &path)
            .args(kind.waiter_args())
            .args(["-w", "60s", "--", "sh", "-c"])
            .arg(log.shell_body("true"))
            .spawn()
            .expect("spawn the waiter"),
    );
    let (dir, marker, n) = kind.queue(&path);
    wait_for_contenders(&zk, &dir, marker, n);
    let holding = log.starts();
    let victim_node = victim.node();

    match cut {
        Cut::Blackhole => {
            proxy.as_ref().expect("a proxy").set_mode(Mode::Blackhole);
            victim.assert_exit(76, LONG);
            let status = wait_for_exit(&mut waiter, LONG).expect("the waiter gets the lock");
            assert_eq!(status.code(), Some(0));
            // Given up before the session could expire: exclusion held throughout.
            log.assert_max_concurrency(kind.limit());
        }
        Cut::Freeze => {
            signal(victim.pid() as i32, libc::SIGSTOP);
            // The waiter runs only once the frozen holder's session expired; the
            // frozen holder's keeper stopped its command at the lease deadline.
            let status = wait_for_exit(&mut waiter, LONG).expect("the waiter gets the lock");
            signal(victim.pid() as i32, libc::SIGCONT);
            assert_eq!(status.code(), Some(0));
            assert!(
                !zk.exists(&victim_node),
                "the waiter ran beside a live session"
            );
            victim.assert_exit(76, LONG);
        }
    }
    let stderr = victim.stderr();
    assert!(stderr.contains("lock lost"), "{stderr}");
    assert_eq!(log.starts(), holding + 1, "{}", log.contents());
    assert!(
        log.open_ids().len() == usize::from(other.is_some()),
        "the victim's command was terminated:\n{}",
        log.contents()
    );
    if let Some(other) = &mut other {
        other.finish();
    }
    // A victim cut off could not delete its node: the server deletes it with the
    // session.
    wait_no_lock_nodes(&zk, &path, LONG);
}

#[test]
fn read_lock_session_expired_by_partition() {
    session_expired(Kind::Read, Cut::Blackhole);
}

#[test]
fn read_lock_session_expired_while_frozen() {
    session_expired(Kind::Read, Cut::Freeze);
}

#[test]
fn write_lock_session_expired_by_partition() {
    session_expired(Kind::Write, Cut::Blackhole);
}

#[test]
fn write_lock_session_expired_while_frozen() {
    session_expired(Kind::Write, Cut::Freeze);
}

#[test]
fn semaphore_session_expired_by_partition() {
    session_expired(Kind::Semaphore, Cut::Blackhole);
}

#[test]
fn semaphore_session_expired_while_frozen() {
    session_expired(Kind::Semaphore, Cut::Freeze);
}
