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
use crate::values::{Precision, rfc3339};

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

/// Resolves when a lock held through one of `nodes` is lost; never resolves
/// while all are held. `owner` is the session the nodes must belong to: ours,
/// or, for a nested run re-entering an enclosing run's lock, that run's.
/// Nodes without a watch are first read once `unwatched_from` says go. With
/// `-v` (`report`), says when the connection is lost and comes back.
#[allow(clippy::too_many_arguments)]
pub async fn lost(
    client: &zk::Client,
    nodes: &[String],
    watches: Vec<Option<NodeWatch>>,
    unwatched_from: WatchFrom,
    policy: LeasePolicy,
    reattach: &Reattach,
    owner: i64,
    report: Report,
) -> LossReason {
    let mut states = client.state_watcher();
    // While disconnected: when that was noticed, and the lease deadline.
    let disconnected = states.peek_state() == zk::SessionState::Disconnected;
    let mut outage = disconnected.then(|| outage_begins(report, policy));
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
    // A reconnection, until a request of ours went through it (see `answers`),
    // and when it must have.
    let mut confirming: Option<Pin<Box<dyn Future<Output = bool> + '_>>> = None;
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
                    confirming = Some(Box::pin(answers(client)));
                    confirm_by = Some(Instant::now() + policy.connection_timeout);
                    probing = None;
                    next_probe = Instant::now() + probe_interval;
                    // Check that our node survived the disconnection.
                    node_check = check_nodes(Vec::new());
                    false
                }
                zk::SessionState::Disconnected | zk::SessionState::ConnectedReadOnly => {
                    (confirming, confirm_by) = (None, None);
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
                    Probe::Alive(replied) => outage = outage.map(|(since, _)| (since, replied + policy.grace())),
                    Probe::Lost(reason) => return reason,
                    Probe::Unreachable => {}
                }
                false
            }
            answered = async { confirming.as_mut().expect("guarded").await }, if confirming.is_some() => {
                (confirming, confirm_by) = (None, None);
                if let (true, Some((since, _))) = (answered, outage) {
                    report.info(format_args!(
                        "connection to ZooKeeper restored after {}; still holding",
                        fmt_tenths(since.elapsed())
                    ));
                    (outage, probing) = (None, None);
                }
                !answered
            }
            () = sleep_until(confirm_by.unwrap_or_else(Instant::now)), if confirm_by.is_some() => {
                confirm_by = None;
                true
            }
            () = sleep_until(next_probe), if outage.is_some() && probing.is_none() => false,
            () = sleep_until(outage.map_or_else(Instant::now, |(_, deadline)| deadline)), if outage.is_some() => {
                return "disconnected from ZooKeeper past the lease deadline (the session may expire)".into();
            }
        };
        if down {
            if policy.on_disconnect == OnDisconnect::Kill {
                return "disconnected from ZooKeeper (--on-disconnect=kill)".into();
            }
            if outage.is_none() {
                outage = Some(outage_begins(report, policy));
                next_probe = Instant::now() + probe_interval;
            }
        }
    }
}

/// Whether a request went through the client's connection. The client
/// library says it is connected as soon as the server answers the session
/// handshake; if the connection breaks before the request it sends next is
/// answered, it reconnects without saying it was disconnected again (until it
/// gives up and calls the session expired). Only an answer proves a
/// reconnection (docs/design.md, "Session and lease rules"). Any node will
/// do, and exists needs no permission.
async fn answers(client: &zk::Client) -> bool {
    retrying(|| client.check_stat("/")).await.is_ok()
}

/// A disconnection while holding begins: now, and the lease deadline. Says
/// so with `-v`, the deadline as a time of day (UTC: the same on every
/// host's log) and from now.
fn outage_begins(report: Report, policy: LeasePolicy) -> (Instant, Instant) {
    let grace = policy.grace();
    let until = rfc3339(SystemTime::now() + grace, Precision::Seconds);
    // `YYYY-MM-DDTHH:MM:SSZ`: the time of day is all a reader needs here.
    let time = until.get(11..19).unwrap_or(&until);
    report.info(format_args!(
        "connection to ZooKeeper lost; the lock is kept until {time} UTC ({} from now) \
         unless the connection comes back (--on-disconnect lease)",
        fmt_tenths(grace)
    ));
    (Instant::now(), Instant::now() + grace)
}

/// A duration to a tenth of a second, as `1.2s`.
fn fmt_tenths(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

enum Probe {
    /// The session and our nodes were there at this instant (the last reply).
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
    let connecting = reattach.settings.open(connector);
    let client = match tokio::time::timeout(policy.connection_timeout, connecting).await {
        Ok(Ok(client)) => client,
        Ok(Err(zk::Error::SessionExpired)) => {
            return Probe::Lost("the ZooKeeper session expired".into());
        }
        Ok(Err(_)) | Err(_) => return Probe::Unreachable,
    };
    for node in nodes {
        match tokio::time::timeout(policy.connection_timeout, client.get_data(node)).await {
            Ok(Ok((_, stat))) if stat.ephemeral_owner == owner => {}
            Ok(Ok(_)) => return Probe::Lost(format!("{node} now belongs to another session")),
            Ok(Err(zk::Error::NoNode)) => return Probe::Lost(format!("{node} was deleted")),
            Ok(Err(_)) | Err(_) => return Probe::Unreachable,
        }
    }
    Probe::Alive(Instant::now())
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
