//! Running the command while the lock is held: spawning it, recording the
//! acquisition in our nodes, the lease that watches them, and deleting them
//! once the command is done (docs/design.md, "Lifecycle of `zklock run`").
//! Shared by a run that took its locks and a nested run under an enclosing
//! run's locks.

use std::pin::pin;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use futures::future::{Either, select};

use super::once;
use super::plan::Plan;
use super::{Event, Outputs};
use zklock::zk::burst::Burst;
use zklock::zk::clock::{self, Moment};

use super::nested::follow::{Follower, Told};
use crate::command::child::{Child, Prepared};
use crate::command::signals::Signals;
use crate::command::supervise;
use crate::exit::Exit;
use crate::lock::lease::{self, LeasePolicy, LossReason};
use crate::lock::queue::{Node, NodeWatch};
use crate::session::Session;
use crate::values::{Precision, rfc3339};

/// How long the command runs before zklock records the acquisition in its
/// node (see `run_command`); the recorded time is at most this late.
const ACQUIRED_WRITE_DELAY: Duration = Duration::from_millis(20);

/// The lock the command runs under, as the lease watches it.
pub(crate) struct HeldLock {
    pub(crate) nodes: Vec<String>,
    /// The watches set on `nodes` while waiting, by position.
    pub(crate) watches: Vec<Option<NodeWatch>>,
    /// The session that owns `nodes`.
    pub(crate) owner: i64,
    /// The lease rule for the session the lock is held in.
    pub(crate) policy: LeasePolicy,
    /// Whether `nodes` are ours (not when a nested run re-entered an
    /// enclosing run's lock): then the acquisition is recorded in them.
    pub(crate) ours: bool,
    /// The `--once-per` run to record before releasing the lock.
    pub(crate) record: Option<once::Pending>,
}

/// Spawns the command and supervises it while `lock` holds (and, under a
/// hold in another shell, while the hold's lease does: `enclosing`); then
/// sends the deletes of our nodes and closeSession right behind them
/// (`Session::release`), for the session's scope to await.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run_command(
    plan: &Plan<'_>,
    out: &Outputs,
    signals: &mut Signals,
    session: &Session,
    mut lock: HeldLock,
    env: &[(&'static str, String)],
    prepared: Prepared,
    mut enclosing: Option<Follower>,
) -> Result<Exit> {
    let policy = lock.policy;
    // Under a hold, its steps' kill-after if shorter: the hold keeps its
    // nodes only that long past a loss (docs/design.md, "Holds").
    let kill_after = (enclosing.as_ref())
        .and_then(Follower::kill_after)
        .map_or(policy.kill_after, |k| k.min(policy.kill_after));
    // Taken right after the lock was confirmed held.
    let (deadline, own) = lease::deadline(session.client(), policy);
    let (handed_to, handed) = tokio::sync::watch::channel(*own.borrow());
    // Before the spawn: a command that then cannot start is this host's
    // failure, pinged and counted as such.
    out.emit(Event::Running);
    let child = Child::spawn(prepared, env, signals, *own.borrow(), kill_after)?;
    out.emit(Event::Started { env });
    let acquired = plan.holder().acquired(child.pid()).to_bytes();
    let watches = std::mem::take(&mut lock.watches);
    let lost = lease_watch(plan, out, session, &lock, watches, &deadline, acquired);
    let lost = earlier_of(lost, own, enclosing.as_mut(), handed_to);
    let report = &plan.report;
    let limits = supervise::Limits {
        kill_after,
        max_runtime: plan.max_runtime.map(|limit| limit.0),
        stop_limit: policy.grace(),
    };
    let lock_lost_because = |why: std::fmt::Arguments<'_>| out.emit(Event::Lost { why });
    let (exit, keeper) = supervise::supervise(
        child,
        signals,
        pin!(lost),
        handed,
        limits,
        report,
        &lock_lost_because,
    )
    .await;
    // Hung up only now that the command's group is gone: the hold keeps its
    // nodes until its followers hang up.
    drop(enclosing);
    // With a run to record, the record says what the release would: a
    // lock lost before the command ended is a lost run (docs/design.md,
    // "Session and lease rules").
    let lost = match (&lock.record, exit) {
        (Some(_), exit) if exit != Exit::LockLost => {
            lease::lost_at_leader(session.client(), &lock.nodes, lock.owner).await
        }
        _ => None,
    };
    let exit = match lost {
        Some(why) => {
            out.emit(Event::Lost {
                why: format_args!(
                    "{why} (found after the command ended: it may have run without it)"
                ),
            });
            Exit::LockLost
        }
        None => exit,
    };
    out.emit(Event::Ended {
        exit,
        max_runtime: plan.max_runtime,
    });
    if let Some(record) = lock.record {
        record.finish(plan, session.client(), exit).await;
    }
    // The lease's watches are forgotten locally: nothing goes ahead of the
    // deletes (see `Session::release`).
    session.release();
    keeper.end_with_zklock();
    Ok(exit)
}

/// Records the acquisition in our nodes (`acquired`, the node data) and
/// watches them as the lease does; resolves with why the lock was lost,
/// feeding systemd's watchdog until then. Shared by a run's command and a
/// hold's holder (docs/design.md, "Holds").
pub(crate) async fn lease_watch(
    plan: &Plan<'_>,
    out: &Outputs,
    session: &Session,
    lock: &HeldLock,
    watches: Vec<Option<NodeWatch>>,
    deadline: &lease::Deadline,
    acquired: Vec<u8>,
) -> LossReason {
    // One write per node (docs/design.md, "Holder data"), only once the
    // command has run for ACQUIRED_WRITE_DELAY: the server serves a
    // session's requests in order, so a write in flight when a short
    // command ends would hold up the delete the next waiter waits for. A
    // watch set while waiting fires on it; a node without one is first
    // watched after it (`lease::WatchFrom`).
    let (written, unwatched_from) = tokio::sync::watch::channel(false);
    let lease = lease::lost(
        session.client(),
        &lock.nodes,
        watches,
        unwatched_from,
        lock.policy,
        lock.owner,
        deadline,
        &plan.report,
    );
    // Their answers matter to no one (correctness never depends on node
    // data; the lease's watches see a node gone): nothing awaits them.
    let recording = async {
        let written = written;
        if !lock.ours {
            return; // `written` dropped: the lease watches at once
        }
        tokio::time::sleep(ACQUIRED_WRITE_DELAY).await;
        // Written at once, in one write, so the lease's reads go out
        // after these writes.
        let mut burst = Burst::default();
        for node in &lock.nodes {
            drop(burst.set_data(node, &acquired, -1));
        }
        session.client().send(burst);
        let _ = written.send(true);
    };
    let lost = async {
        match select(pin!(lease), pin!(recording)).await {
            Either::Left((reason, _)) => reason,
            Either::Right(((), lease)) => lease.await,
        }
    };
    // The watchdog is fed only until the lock is lost.
    match select(pin!(lost), pin!(out.notify.watchdog())).await {
        Either::Left((reason, _)) => reason,
        Either::Right((never, _)) => match never {},
    }
}

/// The lock is lost when `lost` says so or, under a hold followed in
/// another shell, when the hold says so or its lease deadline passes
/// (docs/design.md, "Holds"); `handed` gets the earlier of the two
/// deadlines, for the command's supervisor and its keeper.
async fn earlier_of(
    lost: impl Future<Output = LossReason>,
    mut own: tokio::sync::watch::Receiver<Moment>,
    enclosing: Option<&mut Follower>,
    handed: tokio::sync::watch::Sender<Moment>,
) -> LossReason {
    let mut lost = pin!(lost);
    let Some(hold) = enclosing else {
        let forward = async {
            while own.changed().await.is_ok() {
                let _ = handed.send(*own.borrow_and_update());
            }
            std::future::pending().await
        };
        return match select(lost, pin!(forward)).await {
            Either::Left((reason, _)) => reason,
            Either::Right((never, _)) => never,
        };
    };
    let mut theirs: Option<Moment> = None;
    let mut following = true;
    loop {
        let earlier = theirs.map_or(*own.borrow(), |at| at.min(*own.borrow()));
        let _ = handed.send(earlier);
        tokio::select! {
            reason = &mut lost => return reason,
            changed = own.changed(), if following => following = changed.is_ok(),
            told = hold.next() => match told {
                Told::Deadline(at) => theirs = Some(at),
                Told::Owner(_) | Told::KillAfter(_) => {}
                Told::Lost(why) => return format!("the enclosing hold ended: {why}"),
            },
            () = clock::sleep_until(theirs.unwrap_or_else(Moment::now)), if theirs.is_some() => {
                return "the enclosing hold's lease deadline passed".to_owned();
            }
        }
    }
}

/// systemd's status line while the command runs: since when, and the
/// fencing tokens the command was given.
pub(crate) fn held_status(env: &[(&'static str, String)]) -> String {
    let given = |name| {
        env.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.replace('\n', " "))
            .unwrap_or_default()
    };
    format!(
        "holding {} since {} (fencing token {})",
        given("ZKLOCK_PATH"),
        rfc3339(SystemTime::now(), Precision::Seconds),
        given("ZKLOCK_FENCING_TOKEN")
    )
}

/// The contract of docs/design.md, "Given to the command". With several paths, each variable
/// lists one line per path, in the order the paths were given.
pub(crate) fn command_environment(
    paths: &[&str],
    order: &[&str],
    held: &[Node],
    session: i64,
    connect: &crate::session::Settings,
) -> Vec<(&'static str, String)> {
    let node_of = |path: &str| {
        &held[order
            .iter()
            .position(|p| *p == path)
            .expect("every path is held")]
    };
    let lines = |f: &dyn Fn(&Node) -> String| {
        paths
            .iter()
            .map(|p| f(node_of(p)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut env = vec![
        ("ZKLOCK_PATH", paths.join("\n")),
        ("ZKLOCK_NODE", lines(&|node| node.path.clone())),
        (
            "ZKLOCK_FENCING_TOKEN",
            lines(&|node| node.czxid.to_string()),
        ),
        ("ZKLOCK_SESSION_ID", format!("{session:#x}")),
    ];
    env.extend(connect.passed_on());
    env
}
