//! The ZooKeeper session: connecting within a deadline, classifying errors,
//! and shutting down in the order that frees our node at once.

pub mod acl;
pub mod config;
#[cfg(feature = "kerberos")]
pub mod kerberos_check;
pub mod secret;
pub mod settings;
pub mod tls_check;

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use tokio::time::Instant;
use zookeeper_client as zk;

use crate::exit::{ErrorKind, Failure};
pub use crate::session::settings::Settings;

/// How long to wait for the server to confirm the end of the session. The
/// server deletes our ephemerals when it processes the close, so this wait is
/// what lets the next waiter start at once instead of a session timeout later.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The library retries a lost connection to a server silently; a connection
/// timeout of about a fifth of the session timeout leaves room for several
/// servers to be tried before the session can expire. It must stay below 3/5
/// of the session timeout or the library ignores it.
pub fn connection_timeout_for(session_timeout: Duration) -> Duration {
    session_timeout
        .div_f64(5.0)
        .max(Duration::from_secs(1))
        .min(session_timeout.mul_f64(0.4))
}

/// True when an operation's outcome is unknown because the connection broke:
/// the session may still be alive and a retry (after reconnecting) is right.
/// During a failover the library also fails in-flight calls with custom
/// errors ("no response from connection", I/O errors), not just
/// ConnectionLoss.
pub fn is_connection_loss(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout
    )
}

/// True when the session is gone for good: our ephemerals are (or soon will
/// be) deleted by the ensemble, and only a new session can continue.
/// AuthFailed on a session that had authenticated is one: with SASL,
/// zookeeper-client 0.11.2 re-registers watches before SASL has finished on
/// a new connection, and a server enforcing authentication ends the session.
pub fn is_session_lost(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::SessionExpired
            | zk::Error::ClientClosed
            | zk::Error::SessionMoved
            | zk::Error::AuthFailed
    )
}

/// Runs a ZooKeeper call until it completes with something other than a
/// connection loss. The library queues calls made while disconnected and
/// sends them after the same session reconnects, so the loop does not spin;
/// it ends with an error once the session expires.
pub async fn retrying<T, F, Fut>(mut call: F) -> Result<T, zk::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, zk::Error>>,
{
    loop {
        match call().await {
            Err(err) if is_connection_loss(&err) => continue,
            result => return result,
        }
    }
}

/// Resolves with what is wrong with the certificates or the Kerberos
/// ticket if connecting has not succeeded within `after`; never resolves
/// otherwise (the library retries both kinds of failure silently).
async fn credential_problem(settings: &Settings, after: Duration) -> String {
    if settings.tls_pem.is_none() && !settings.uses_kerberos() {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(after).await;
    let settings = settings.clone();
    let check = tokio::task::spawn_blocking(move || {
        let hosts = settings.hosts.connect_string();
        if let Some(pem) = &settings.tls_pem {
            if let Some(problem) = tls_check::diagnose(pem, hosts, after) {
                return Some(problem);
            }
        }
        settings.kerberos_problem()
    })
    .await;
    if let Ok(Some(problem)) = check {
        return problem;
    }
    std::future::pending().await
}

/// A live session. It owns the only [`zk::Client`]; everything else borrows
/// it, so that [`Session::close`] can drop the last handle and the library
/// sends CloseSession.
pub struct Session {
    client: zk::Client,
    states: zk::StateWatcher,
    connection_timeout: Duration,
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
        while Instant::now() < deadline {
            let connecting = options.open(options.connector());
            let attempt = tokio::select! {
                attempt = tokio::time::timeout_at(deadline, connecting) => attempt,
                problem = &mut tls_problem => {
                    return Err(Failure::new(ErrorKind::NoPermission, problem).into());
                }
            };
            match attempt {
                Ok(Ok(client)) => {
                    let states = client.state_watcher();
                    return Ok(Session {
                        client,
                        states,
                        connection_timeout,
                    });
                }
                Ok(Err(zk::Error::AuthFailed)) => {
                    return Err(Failure::new(
                        ErrorKind::NoPermission,
                        format!(
                            "authentication failed at {hosts} ({})",
                            options.credentials()
                        ),
                    )
                    .into());
                }
                Ok(Err(zk::Error::NoNode)) => {
                    let chroot = options.hosts.chroot().unwrap_or("/");
                    return Err(anyhow!("the chroot {chroot} does not exist at {hosts}"));
                }
                Ok(Err(err)) => {
                    last_error = Some(err);
                    // A refused connection fails at once; do not spin on it.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(_elapsed) => break,
            }
        }
        let why = last_error
            .map(|e| format!(" (last error: {e})"))
            .unwrap_or_default();
        let message = format!(
            "no ZooKeeper session with {hosts} within {}{why}",
            humantime::format_duration(options.connect_timeout)
        );
        Err(Failure::new(ErrorKind::Unavailable, message).into())
    }

    pub fn client(&self) -> &zk::Client {
        &self.client
    }

    pub fn id(&self) -> i64 {
        self.client.session_id().0
    }

    /// Refuses (usage error) an ACL under which contenders of our identity
    /// could not queue. The identities are the server's own view (whoami,
    /// ZooKeeper 3.7+): an x509 subject or a digest hash is spelled exactly
    /// as the server compares it. Servers without whoami skip the check.
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
            .map(|u| (u.scheme().to_owned(), u.user().to_owned()))
            .collect();
        settings.acl.check(&identities).map_err(Failure::usage)
    }

    /// Deletes `nodes` (last first), waiting for the server's answers, within
    /// a bound; the first step of [`Session::close`].
    pub async fn delete(&self, nodes: &[&str]) {
        let bound = self.connection_timeout.max(CLOSE_WAIT);
        let deleting = async {
            for node in nodes.iter().rev() {
                // NoNode is fine: someone (an operator, expiry) deleted it already.
                let _ = retrying(|| self.client.delete(node, None)).await;
            }
        };
        let _ = tokio::time::timeout(bound, deleting).await;
    }

    /// The session timeout the ensemble granted (not necessarily the one asked for).
    pub fn timeout(&self) -> Duration {
        self.client.session_timeout()
    }

    /// Deletes `nodes` (last first) and ends the session, waiting for the
    /// server to confirm each step, within bounds. Failing to delete is not
    /// fatal: closing the session deletes all our ephemerals, and if even
    /// that cannot reach the server, the nodes die with the session.
    pub async fn close(self, nodes: &[&str]) {
        self.delete(nodes).await;
        let Session {
            client, mut states, ..
        } = self;
        if states.peek_state().is_terminated() {
            return;
        }
        drop(client);
        let closed = async { while !states.changed().await.is_terminated() {} };
        let _ = tokio::time::timeout(CLOSE_WAIT, closed).await;
    }
}
