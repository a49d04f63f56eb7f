//! Deciding that a held lock is lost (docs/design.md, "Session and lease
//! rules", which draws the timeline of a disconnection); the rule's
//! arithmetic is in `policy.rs`.

mod policy;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use futures::future::select_all;
use tokio::time::{Instant, sleep_until};
use zookeeper_client as zk;

pub use self::policy::{DEFAULT_KILL_AFTER, LeasePolicy, OnDisconnect};
use crate::lock::queue::NodeWatch;
use crate::report::Report;
use crate::session::{Settings, is_connection_loss, is_session_lost, retrying};
use crate::values::{Precision, human_duration, rfc3339};

/// Why the lock was lost (shown to the user).
pub type LossReason = String;

/// When the lease may first read, and watch, a node it has no watch on yet
/// (one taken without waiting): true, or the sender dropped, means now.
/// Reading it only after zklock's acquisition write (docs/design.md,
/// "Holder data") saves a request and a watch that write would fire.
pub type WatchFrom = tokio::sync::watch::Receiver<bool>;

/// How to reach our session from a second connection (see [`probe`]).
pub struct Reattach {
    /// The same TLS and credentials as the session's own connection.
    pub settings: Settings,
    pub session: zk::SessionInfo,
}

/// The lease deadline (docs/design.md, "Session and lease rules"): the
/// command may run until then. [`lost`] moves it with every answer to a
/// request of ours; the command's supervisor hands it to the keeper.
pub type Deadline = tokio::sync::watch::Sender<Instant>;

/// The deadline of a lock just taken, counted from now: the answers that
/// confirmed the lock have just come (their round trip is within the margin
/// m), and [`lost`] asks for answers of its own from C/3 on.
pub fn deadline(policy: LeasePolicy) -> (Deadline, tokio::sync::watch::Receiver<Instant>) {
    tokio::sync::watch::channel(policy.deadline_after(Instant::now()))
}

/// Resolves when a lock held through one of `nodes` is lost; never resolves
/// while all are held. `owner` is the session the nodes must belong to: ours,
/// or, for a nested run re-entering an enclosing run's lock, that run's.
/// Nodes without a watch are first read once `unwatched_from` says go. Asks
/// the server something every [`LeasePolicy::ask_every`] and moves
/// `deadline` with each answer; the lock is lost when no answer came in
/// time. With `-v` (`report`), says when the connection is lost and comes
/// back.
#[allow(clippy::too_many_arguments)]
pub async fn lost(
    client: &zk::Client,
    nodes: &[String],
    watches: Vec<Option<NodeWatch>>,
    unwatched_from: WatchFrom,
    policy: LeasePolicy,
    reattach: &Reattach,
    owner: i64,
    deadline: &Deadline,
    report: Report,
) -> LossReason {
    let renew = |sent: Instant| {
        deadline.send_if_modified(|at| {
            let renewed = policy.deadline_after(sent);
            let later = renewed > *at;
            if later {
                *at = renewed;
            }
            later
        });
    };
    let past_deadline = || -> LossReason {
        "no answer from ZooKeeper past the lease deadline (the session may expire)".into()
    };
    let mut states = client.state_watcher();
    // While disconnected: since when.
    let mut outage: Option<Instant> = None;
    if states.peek_state() == zk::SessionState::Disconnected {
        match outage_begins(report, *deadline.borrow()) {
            Some(since) => outage = Some(since),
            None => return past_deadline(),
        }
    }
    let check_nodes = |watches| {
        Box::pin(any_node_lost(
            client,
            nodes,
            watches,
            &unwatched_from,
            owner,
            policy,
        ))
    };
    let mut node_check = check_nodes(watches);
    let mut probing: Option<Pin<Box<dyn Future<Output = Probe> + '_>>> = None;
    let probe_interval = (policy.connection_timeout / 2).max(Duration::from_millis(200));
    let mut next_probe = Instant::now();
    // A request of ours in flight (see `answered`); and, after a
    // reconnection, when it must have been answered. The first goes out
    // only after C/3: the lock's confirmation was an answer (see
    // [`deadline`]), and a short command then ends with no request of the
    // lease before its release.
    let mut asking: Option<Pin<Box<dyn Future<Output = Option<Instant>> + '_>>> = None;
    let mut next_ask = Instant::now() + policy.ask_every();
    let mut confirm_by: Option<Instant> = None;
    loop {
        if outage.is_some() && probing.is_none() && Instant::now() >= next_probe {
            probing = Some(Box::pin(probe(reattach, nodes, policy, owner)));
        }
        // Whether the connection is found down.
        let down = tokio::select! {
            reason = &mut node_check => return reason,
            state = states.changed() => match state {
                zk::SessionState::SyncConnected => {
                    // The outage, if any, ends once the connection answers.
                    asking = Some(Box::pin(answered(client)));
                    confirm_by = Some(Instant::now() + policy.connection_timeout);
                    probing = None;
                    next_probe = Instant::now() + probe_interval;
                    // Check that our node survived the disconnection.
                    node_check = check_nodes(Vec::new());
                    false
                }
                zk::SessionState::Disconnected | zk::SessionState::ConnectedReadOnly => {
                    confirm_by = None;
                    true
                }
                zk::SessionState::Expired => return "the ZooKeeper session expired".into(),
                zk::SessionState::Closed => return "the ZooKeeper session was closed".into(),
                zk::SessionState::AuthFailed => return "ZooKeeper authentication failed".into(),
            },
            outcome = async { probing.as_mut().expect("guarded").await }, if probing.is_some() => {
                probing = None;
                next_probe = Instant::now() + probe_interval;
                match outcome {
                    Probe::Alive(sent) => renew(sent),
                    Probe::Lost(reason) => return reason,
                    Probe::Unreachable => {}
                }
                false
            }
            () = sleep_until(next_ask), if asking.is_none() && outage.is_none() => {
                asking = Some(Box::pin(answered(client)));
                false
            }
            sent = async { asking.as_mut().expect("guarded").await }, if asking.is_some() => {
                // Only a reconnection must be answered in time; otherwise
                // the deadline decides.
                let confirming = confirm_by.is_some();
                (asking, confirm_by) = (None, None);
                next_ask = Instant::now() + policy.ask_every();
                if let Some(sent) = sent {
                    renew(sent);
                    if let Some(since) = outage {
                        report.info(format_args!(
                            "connection to ZooKeeper restored after {}; still holding",
                            human_duration(since.elapsed())
                        ));
                        (outage, probing) = (None, None);
                    }
                }
                sent.is_none() && confirming
            }
            () = sleep_until(confirm_by.unwrap_or_else(Instant::now)), if confirm_by.is_some() => {
                confirm_by = None;
                true
            }
            () = sleep_until(next_probe), if outage.is_some() && probing.is_none() => false,
            () = sleep_until(*deadline.borrow()) => return past_deadline(),
        };
        if down {
            if policy.on_disconnect == OnDisconnect::Kill {
                return "disconnected from ZooKeeper (--on-disconnect=kill)".into();
            }
            if outage.is_none() {
                match outage_begins(report, *deadline.borrow()) {
                    Some(since) => outage = Some(since),
                    None => return past_deadline(),
                }
                next_probe = Instant::now() + probe_interval;
            }
        }
    }
}

/// When a request of ours that the server answered was sent: the server
/// heard from the session then or later. Also whether a request goes through
/// the client's connection at all: the client library says it is connected
/// as soon as the server answers the session handshake; if the connection
/// breaks before the request it sends next is answered, it reconnects without
/// saying it was disconnected again (until it gives up and calls the session
/// expired). Only an answer proves a reconnection (docs/design.md, "Session
/// and lease rules"). Any node will do, and exists needs no permission.
async fn answered(client: &zk::Client) -> Option<Instant> {
    let mut sent = Instant::now();
    let answer = retrying(|| {
        sent = Instant::now();
        client.check_stat("/")
    })
    .await;
    answer.ok().map(|_| sent)
}

/// A disconnection while holding begins: says so with `-v`, the lease
/// deadline as a time of day (UTC: the same on every host's log) and from
/// now, and returns now; None when the deadline has passed already (zklock
/// was stopped, or its process starved): no grace is left.
fn outage_begins(report: Report, deadline: Instant) -> Option<Instant> {
    let now = Instant::now();
    let left = deadline
        .checked_duration_since(now)
        .filter(|left| !left.is_zero())?;
    let until = rfc3339(SystemTime::now() + left, Precision::Seconds);
    // `YYYY-MM-DDTHH:MM:SSZ`: the time of day is all a reader needs here.
    let time = until.get(11..19).unwrap_or(&until);
    report.info(format_args!(
        "connection to ZooKeeper lost; the lock is kept until {time} UTC ({} from now) \
         unless the connection comes back (--on-disconnect lease)",
        human_duration(left)
    ));
    Some(now)
}

enum Probe {
    /// The session and our nodes were there; the last request that showed
    /// it was sent at this instant.
    Alive(Instant),
    Lost(LossReason),
    Unreachable,
}

/// While the client is disconnected, attaches our session from a second,
/// short-lived connection and checks that our nodes are still `owner`'s:
/// the library's reconnect back-off could outlast the deadline, and a
/// successful attach proves the session alive and restarts its timeout.
/// The probe is detached: dropping it must not close the session.
async fn probe(reattach: &Reattach, nodes: &[String], policy: LeasePolicy, owner: i64) -> Probe {
    let connector = reattach
        .settings
        .connector()
        .with_session(reattach.session.clone())
        .with_session_timeout(policy.session_timeout)
        .with_connection_timeout(policy.connection_timeout)
        .with_detached();
    let mut sent = Instant::now();
    let connecting = reattach.settings.open(connector);
    let client = match tokio::time::timeout(policy.connection_timeout, connecting).await {
        Ok(Ok(client)) => client,
        Ok(Err(zk::Error::SessionExpired)) => {
            return Probe::Lost("the ZooKeeper session expired".into());
        }
        Ok(Err(_)) | Err(_) => return Probe::Unreachable,
    };
    for node in nodes {
        sent = Instant::now();
        match tokio::time::timeout(policy.connection_timeout, client.get_data(node)).await {
            Ok(Ok((_, stat))) if stat.ephemeral_owner == owner => {}
            Ok(Ok(_)) => return Probe::Lost(format!("{node} now belongs to another session")),
            Ok(Err(zk::Error::NoNode)) => return Probe::Lost(format!("{node} was deleted")),
            Ok(Err(_)) | Err(_) => return Probe::Unreachable,
        }
    }
    Probe::Alive(sent)
}

/// The first of `nodes` found lost; `watches` are those already set on
/// them (by position), the rest are set here.
async fn any_node_lost(
    client: &zk::Client,
    nodes: &[String],
    mut watches: Vec<Option<NodeWatch>>,
    unwatched_from: &WatchFrom,
    owner: i64,
    policy: LeasePolicy,
) -> LossReason {
    if let Some(interval) = policy.poll_nodes {
        // Dropped while connected: the library removes them from the server now.
        drop(watches);
        return nodes_lost_polling(client, nodes, owner, interval).await;
    }
    watches.resize_with(nodes.len(), || None);
    let checks: Vec<_> = nodes
        .iter()
        .zip(watches)
        .map(|(node, watch)| {
            let mut go = unwatched_from.clone();
            Box::pin(async move {
                if watch.is_none() {
                    // An error means the sender is gone: go.
                    let _ = go.wait_for(|go| *go).await;
                }
                node_lost(client, node, watch, owner).await
            })
        })
        .collect();
    if checks.is_empty() {
        return std::future::pending().await; // select_all needs one
    }
    select_all(checks).await.0
}

/// Reads our nodes every `interval` (without a watch) until one is gone or
/// not owned by `owner`.
async fn nodes_lost_polling(
    client: &zk::Client,
    nodes: &[String],
    owner: i64,
    interval: Duration,
) -> LossReason {
    loop {
        for node in nodes {
            match client.get_data(node).await {
                Ok((_, stat)) if stat.ephemeral_owner != owner => {
                    return format!("{node} now belongs to another session");
                }
                Ok(_) => {}
                Err(zk::Error::NoNode) => return format!("{node} was deleted"),
                // The session's state changes decide these.
                Err(err) if is_connection_loss(&err) || is_session_lost(&err) => {}
                Err(err) => return format!("cannot read {node}: {err}"),
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// Watches our node with a data watch (starting with `watch` if given):
/// resolves when it is deleted or is found owned by a session other than `owner`.
async fn node_lost(
    client: &zk::Client,
    node: &str,
    mut watch: Option<NodeWatch>,
    owner: i64,
) -> LossReason {
    loop {
        let event = match watch.take() {
            Some(watch) => watch.await,
            None => match retrying(|| client.get_and_watch_data(node)).await {
                Ok((_, stat, watcher)) => {
                    if stat.ephemeral_owner != owner {
                        return format!("{node} now belongs to another session");
                    }
                    watcher.changed().await
                }
                Err(zk::Error::NoNode) => return format!("{node} was deleted"),
                Err(err) if is_session_lost(&err) => {
                    return "the ZooKeeper session expired".into();
                }
                Err(err) => return format!("cannot watch {node}: {err}"),
            },
        };
        match event.event_type {
            zk::EventType::NodeDeleted => return format!("{node} was deleted"),
            zk::EventType::Session if event.session_state.is_terminated() => {
                return format!("the ZooKeeper session ended ({})", event.session_state);
            }
            _ => {}
        }
    }
}
