//! The ZooKeeper session: connecting within a deadline, classifying errors,
//! and shutting down in the order that frees our node at once.

pub mod acl;
pub mod config;
mod diagnose;
#[cfg(feature = "kerberos")]
pub mod kerberos_check;
mod nodelay;
pub mod options;
pub mod secret;
pub mod settings;
pub mod tls;

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::FutureExt;
use futures::future::LocalBoxFuture;

use tokio::time::Instant;
use zookeeper_client as zk;

use crate::exit::{Exit, Failure};
use crate::session::diagnose::{credential_problem, diagnose, unresolvable};
pub use crate::session::diagnose::{host_name, servers};
pub use crate::session::options::Options;
pub use crate::session::settings::Settings;
use crate::values::human_duration;

/// How long to wait for the server to confirm the end of the session (which
/// deletes our ephemerals, so the next waiter starts at once).
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// About a fifth of the session timeout, so that several servers can be
/// tried before the session can expire; the library ignores one above 3/5.
pub fn connection_timeout_for(session_timeout: Duration) -> Duration {
    session_timeout
        .div_f64(5.0)
        .max(Duration::from_secs(1))
        .min(session_timeout.mul_f64(0.4))
}

/// True when an operation's outcome is unknown because the connection broke
/// (in a failover the library also fails calls with custom errors): the
/// session may still be alive and a retry is right. SessionMoved is one: a
/// newer connection of the same session (the lease's probe, a release's
/// reattached connection, a reconnection in an ensemble) has taken it over,
/// the server drops this connection, and the library reconnects, as
/// ZooKeeper's Java client does.
pub fn is_connection_loss(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::ConnectionLoss
            | zk::Error::Custom(_)
            | zk::Error::Timeout
            | zk::Error::SessionMoved
    )
}

/// True when the session is gone for good and only a new one can continue.
/// AuthFailed is one: with SASL the library re-registers watches before SASL
/// has finished on a new connection, and the server ends the session.
pub fn is_session_lost(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed
    )
}

/// How many times in a row one request may lose its connection before we
/// conclude that the server refuses it. The library holds calls made while
/// disconnected, so each loss broke a connection carrying this very request:
/// a failover does that once or twice, while a request the server refuses
/// (beyond `jute.maxbuffer`: it hangs up, the session stays alive) does it
/// on every connection, within milliseconds. A count tells the two apart; a
/// time bound could not.
pub const LOSSES_BEFORE_REFUSED: u32 = 5;

/// Counts consecutive connection losses of one request.
#[derive(Debug, Default)]
pub struct Losses(u32);

impl Losses {
    /// Records a loss; an error once the request has to be taken as refused.
    pub fn lost(&mut self) -> Result<(), zk::Error> {
        self.0 += 1;
        if self.0 < LOSSES_BEFORE_REFUSED {
            return Ok(());
        }
        Err(zk::Error::UnexpectedError(format!(
            "the server dropped the connection each of the {} times this request \
             was sent, with the session alive: it refuses the request, most likely \
             because it exceeds the server's size limit (jute.maxbuffer, 1 MiB by \
             default)",
            self.0
        )))
    }
}

/// Runs a ZooKeeper call until it completes with something other than a
/// connection loss (the library holds calls while disconnected, so this does
/// not spin), or lost its connection [`LOSSES_BEFORE_REFUSED`] times in a row.
pub async fn retrying<T, F, Fut>(mut call: F) -> Result<T, zk::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, zk::Error>>,
{
    let mut losses = Losses::default();
    loop {
        match call().await {
            Err(err) if is_connection_loss(&err) => losses.lost()?,
            result => return result,
        }
    }
}

/// Runs `future` to completion on a current-thread runtime, as every
/// subcommand does: zklock needs no more than one thread of its own.
pub fn block_on<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(future)
}

/// A live session. It owns the only [`zk::Client`]; everything else borrows
/// it, so that [`Session::close`] can drop the last handle and the library
/// sends CloseSession.
pub struct Session {
    client: zk::Client,
    states: zk::StateWatcher,
    connection_timeout: Duration,
    /// For attaching this session from a new connection (see [`Session::close_after`]).
    settings: Settings,
}

/// Deletes of our nodes already sent, their answers still to come: the
/// first half of [`Session::close_after`].
pub struct Release {
    nodes: Vec<String>,
    answers: Vec<LocalBoxFuture<'static, Result<(), zk::Error>>>,
}

impl Session {
    /// Connects, retrying until `connect_timeout` has passed.
    pub async fn connect(options: &Settings) -> Result<Session> {
        let deadline = Instant::now() + options.connect_timeout;
        let connection_timeout = connection_timeout_for(options.session_timeout);
        let hosts = options.hosts.connect_string();
        let mut last_error = None;
        let tls_problem = credential_problem(options, connection_timeout);
        tokio::pin!(tls_problem);
        let unresolvable = unresolvable(hosts);
        tokio::pin!(unresolvable);
        while Instant::now() < deadline {
            let connecting = options.open(options.connector());
            let attempt = tokio::select! {
                attempt = tokio::time::timeout_at(deadline, connecting) => attempt,
                problem = &mut tls_problem => return Err(problem.into()),
                failure = &mut unresolvable => return Err(failure.into()),
            };
            match attempt {
                Ok(Ok(client)) => {
                    nodelay::set_on_every_socket();
                    let states = client.state_watcher();
                    return Ok(Session {
                        client,
                        states,
                        connection_timeout,
                        settings: options.clone(),
                    });
                }
                Ok(Err(zk::Error::AuthFailed)) => {
                    let credentials = options.credentials();
                    let message = format!("authentication failed at {hosts} ({credentials})");
                    return Err(Failure::new(Exit::NoPermission, message).into());
                }
                Ok(Err(zk::Error::NoNode)) => return Err(options.missing_chroot()),
                Ok(Err(err)) => {
                    last_error = Some(err);
                    // A refused connection fails at once; do not spin on it.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_elapsed) => break,
            }
        }
        // The library reports every failure to reach a server as a timeout
        // or a lost connection; try what it tried to name the real cause.
        let why = match diagnose(hosts).await {
            Some(cause) => format!(": {cause}"),
            None => last_error
                .map(|e| format!(" (last error: {e})"))
                .unwrap_or_default(),
        };
        let message = format!(
            "no ZooKeeper session with {hosts} within {}{why}",
            human_duration(options.connect_timeout)
        );
        Err(Failure::new(Exit::Unavailable, message).into())
    }

    pub fn client(&self) -> &zk::Client {
        &self.client
    }

    pub fn id(&self) -> i64 {
        self.client.session_id().0
    }

    /// Refuses (usage error) an ACL under which contenders of our identity
    /// could not queue. The identities are the server's own view (whoami,
    /// ZooKeeper 3.7+): an x509 subject is spelled exactly as the server
    /// compares it. A digest identity is reported by its user alone, but
    /// compared as `user:hash`: ours is computed as the server does. Servers
    /// without whoami skip the check.
    pub async fn check_acl(&self, settings: &Settings) -> Result<()> {
        if !settings.acl.explicit {
            return Ok(());
        }
        let users = match retrying(|| self.client.list_auth_users()).await {
            Ok(users) => users,
            Err(zk::Error::Unimplemented) => return Ok(()),
            Err(err) => return Err(err).context("asking the server who we are (whoami)"),
        };
        let identities: Vec<(String, String)> = users
            .iter()
            .map(|u| {
                let id = match &settings.digest {
                    Some((user, password)) if u.scheme() == "digest" && u.user() == user => {
                        acl::digest_id(user, password.expose())
                    }
                    _ => u.user().to_owned(),
                };
                (u.scheme().to_owned(), id)
            })
            .collect();
        settings.acl.check(&identities).map_err(Failure::usage)
    }

    /// Since when the connection to the ensemble has been down, if it is:
    /// resolves never; keeps `since` current while polled.
    pub async fn track_connection(&self, since: &std::cell::Cell<Option<Instant>>) {
        let mut states = self.client.state_watcher();
        let mut state = states.peek_state();
        loop {
            match state {
                zk::SessionState::SyncConnected => since.set(None),
                _ if since.get().is_none() => since.set(Some(Instant::now())),
                _ => {}
            }
            if state.is_terminated() {
                return std::future::pending().await;
            }
            state = states.changed().await;
        }
    }

    /// The session timeout the ensemble granted (not necessarily the one asked for).
    pub fn timeout(&self) -> Duration {
        self.client.session_timeout()
    }

    /// Sends the deletes of `nodes` (last first) now, without waiting for
    /// the answers: [`Session::close_after`] awaits them. Sent while a lease
    /// still watches the nodes, a delete fires that watch and so consumes it;
    /// a watch dropped first would make the library send a RemoveWatches
    /// request, which the server serves before the delete.
    pub fn release(&self, nodes: &[&str]) -> Release {
        let nodes: Vec<String> = nodes.iter().rev().map(|node| (*node).to_owned()).collect();
        let answers = (nodes.iter())
            .map(|node| self.client.delete(node, None).boxed_local())
            .collect();
        Release { nodes, answers }
    }

    /// Deletes `nodes` and ends the session (see [`Session::close_after`]).
    pub async fn close(self, nodes: &[&str]) -> bool {
        let release = self.release(nodes);
        self.close_after(release).await
    }

    /// Ends the session right behind the deletes `release` sent (one round
    /// trip), and waits, bounded, for the answers; a delete whose answer was
    /// lost is made again from a new connection to the session, which also
    /// says if the server closed it meanwhile (docs/design.md, "Round trips").
    /// True when the server confirmed our nodes gone. The library's Closed
    /// and Expired are no such proof: it reports them, and fails the deletes
    /// with them, also when it gives up on a connection.
    pub async fn close_after(self, release: Release) -> bool {
        let Session {
            client,
            mut states,
            connection_timeout,
            settings,
        } = self;
        let bound = connection_timeout.max(CLOSE_WAIT);
        let info = client.session().clone();
        let state = states.peek_state();
        // Dropping the only handle makes the library send CloseSession.
        drop(client);
        let answers = tokio::time::timeout(bound, futures::future::join_all(release.answers))
            .await
            .unwrap_or_default();
        // No answers at all when the bound passed.
        let unanswered: Vec<&str> = (release.nodes.iter().enumerate())
            .filter(|(i, _)| !answers.get(*i).is_some_and(is_deleted))
            .map(|(_, node)| node.as_str())
            .collect();
        let confirmed =
            unanswered.is_empty() || delete_attached(&settings, info, &unanswered, bound).await;
        if !state.is_terminated() {
            let closed = async { while !states.changed().await.is_terminated() {} };
            let _ = tokio::time::timeout(CLOSE_WAIT, closed).await;
        }
        confirmed
    }
}

/// Whether the server answered a delete with our node gone: deleted now, or
/// by someone else (an operator, expiry).
fn is_deleted(answer: &Result<(), zk::Error>) -> bool {
    matches!(answer, Ok(()) | Err(zk::Error::NoNode))
}

/// Deletes `nodes` from a new connection to the session `info`, then closes
/// it; true when the server confirmed them gone (the session already closed
/// or expired counts).
async fn delete_attached(
    settings: &Settings,
    info: zk::SessionInfo,
    nodes: &[&str],
    bound: Duration,
) -> bool {
    let attempt = async {
        let connector = settings.connector().with_session(info);
        let client = match settings.open(connector).await {
            Ok(client) => client,
            // The server's answer to the handshake: the session is gone,
            // and its nodes with it.
            Err(zk::Error::SessionExpired) => return true,
            Err(_) => return false,
        };
        let mut confirmed = true;
        for node in nodes {
            confirmed &= is_deleted(&retrying(|| client.delete(node, None)).await);
        }
        confirmed
    };
    tokio::time::timeout(bound, attempt).await.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_session_is_a_lost_connection_not_a_lost_session() {
        assert!(is_connection_loss(&zk::Error::SessionMoved));
        assert!(!is_session_lost(&zk::Error::SessionMoved));
    }

    #[test]
    fn retrying_gives_up_on_endless_losses() {
        let mut calls = 0;
        let result: Result<(), zk::Error> = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(retrying(|| {
                calls += 1;
                async { Err(zk::Error::ConnectionLoss) }
            }));
        let err = result.unwrap_err();
        assert_eq!(calls, LOSSES_BEFORE_REFUSED);
        assert!(!is_connection_loss(&err) && !is_session_lost(&err), "{err}");
        assert!(err.to_string().contains("jute.maxbuffer"), "{err}");
    }
}
