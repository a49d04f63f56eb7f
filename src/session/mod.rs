//! The ZooKeeper session: connecting within a deadline with a first burst
//! of requests, saying why no session came, and shutting down in the order
//! that frees our node at once.

pub mod acl;
pub mod config;
mod diagnose;
#[cfg(feature = "kerberos")]
pub mod kerberos_check;
pub mod options;
mod owner;
pub mod secret;
pub mod settings;
pub mod tls;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::time::Instant;
use zklock::zk::burst::{Burst, Pending};
use zklock::zk::client::{Client, ConnectError, State};
use zklock::zk::records::Error;

use crate::exit::{Exit, Failure};
use crate::session::diagnose::{credential_problem, diagnose, unresolvable};
pub use crate::session::diagnose::{host_name, servers};
pub use crate::session::options::Options;
pub use crate::session::owner::{Closed, Node, Opened, OwnedNodes};
pub use crate::session::settings::Settings;
use crate::values::human_duration;

/// About a fifth of the session timeout, so that several servers can be
/// tried before the session can expire: how long one member may take to
/// connect and answer.
pub fn connection_timeout_for(session_timeout: Duration) -> Duration {
    session_timeout
        .div_f64(5.0)
        .max(Duration::from_secs(1))
        .min(session_timeout.mul_f64(0.4))
}

/// True when an operation's outcome is unknown because the connection broke
/// before its answer: the session may still be alive and a retry is right
/// (docs/design.md, "The protocol layer"). SessionMoved is one: the server
/// says another connection of the session took it over, and drops this one.
pub fn is_connection_loss(err: &Error) -> bool {
    matches!(err, Error::ConnectionLoss | Error::SessionMoved)
}

/// True when the session is gone for good and only a new one can continue.
/// Not AuthFailed: a new session with the same credentials would be
/// refused too (and each refused session lives on the ensemble until it
/// expires).
pub fn is_session_lost(err: &Error) -> bool {
    matches!(err, Error::SessionExpired | Error::Closed)
}

/// How many times in a row one request may lose its connection before we
/// conclude that the server refuses it. The client holds requests made
/// while disconnected, so each loss broke a connection carrying this very
/// request: a failover does that once or twice, while a request the server
/// refuses (beyond `jute.maxbuffer`: it hangs up, the session stays alive)
/// does it on every connection, within milliseconds. A count tells the two
/// apart; a time bound could not. Only quick losses count (see
/// [`QUICK_LOSS`]).
pub const LOSSES_BEFORE_REFUSED: u32 = 5;

/// A loss this long or longer after the request was made is no refusal: a
/// server that refuses a request hangs up as it reads it, while a member
/// that stalls (an election, a quorum lost) leaves the request unanswered
/// until the client gives the connection up. Such a loss starts the count
/// again.
pub const QUICK_LOSS: Duration = Duration::from_secs(1);

/// A request the server dropped the connection on every time.
#[derive(Debug)]
pub struct Refused(u32);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server dropped the connection each of the {} times this request \
             was sent, with the session alive: it refuses the request, most likely \
             because it exceeds the server's size limit (jute.maxbuffer, 1 MiB by \
             default)",
            self.0
        )
    }
}

impl std::error::Error for Refused {}

/// Counts consecutive connection losses of one request.
#[derive(Debug, Default)]
pub struct Losses(u32);

impl Losses {
    /// Records a loss of the request made at `made`; an error once the
    /// request has to be taken as refused.
    pub fn lost(&mut self, made: Instant) -> Result<(), Refused> {
        if made.elapsed() >= QUICK_LOSS {
            self.0 = 0;
            return Ok(());
        }
        self.0 += 1;
        match self.0 < LOSSES_BEFORE_REFUSED {
            true => Ok(()),
            false => Err(Refused(self.0)),
        }
    }
}

/// Runs a ZooKeeper request until it completes with something other than a
/// connection loss. It does not spin: the client holds requests while
/// disconnected, so each loss broke a connection carrying this request.
/// The requests made this way are small, far below any size a server
/// refuses (our node's create, which carries holder data, counts its
/// losses instead: [`Losses`]); the caller's own deadline bounds the wait.
pub async fn retrying<T, F, Fut>(mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    loop {
        match call().await {
            Err(err) if is_connection_loss(&err) => {}
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

/// whoAmI's answer: (scheme, identity) pairs.
type Identities = Vec<(String, String)>;

/// A live session. It owns the only [`Client`] handle kept beyond a call,
/// so that a session dropped unclosed still ends (the client sends
/// closeSession once every handle is gone); it is reached only in its
/// scope, which closes it, deleting our nodes first ([`Opened::scope`]).
pub struct Session {
    client: Client,
    /// whoAmI's answer, asked in the first burst when `--acl` was given.
    who_am_i: Cell<Option<Pending<Identities>>>,
    owned: OwnedNodes,
    /// The deletes and closeSession, once sent (see [`Session::release`]).
    released: RefCell<Option<owner::Release>>,
    /// When the session's end must be over (see [`Session::end_by`]).
    end_by: Cell<Option<Instant>>,
}

impl Session {
    /// Connects within `--connect-timeout`, with nothing but the checks of
    /// the first burst (see [`Session::open`]).
    pub async fn connect(settings: &Settings) -> Result<Opened> {
        Session::open(settings, Burst::default()).await
    }

    /// Connects within `--connect-timeout`, `burst` written in the same
    /// write as the handshake (after SASL, with SASL), behind an exists of
    /// the chroot's root (a `-z` chroot that does not exist is a usage
    /// error) and whoAmI when `--acl` was given (see [`Session::check_acl`]):
    /// one round trip for all of them (docs/design.md, "Round trips").
    /// Returns once the chroot is known to exist; the burst's answers come.
    /// The session is used only in its scope ([`Opened::scope`]).
    pub async fn open(settings: &Settings, burst: Burst) -> Result<Opened> {
        Session::open_by(settings, burst, None).await
    }

    /// [`Session::open`], given up by `by` if that comes before the connect
    /// timeout (a run's `--timeout` counts from its start, the connection
    /// included), but never before one attempt's time (the attempt timeout
    /// C, see [`connection_timeout_for`]).
    pub async fn open_by(settings: &Settings, burst: Burst, by: Option<Instant>) -> Result<Opened> {
        let mut config = settings.config();
        // The first look at the queue always happens (`-w 1ms` takes a
        // free lock): the connection gets one attempt's time at least.
        let first_look = config.attempt_timeout;
        let limit = by.map(|by| by.saturating_duration_since(Instant::now()).max(first_look));
        config.connect_timeout = config.connect_timeout.min(limit.unwrap_or(Duration::MAX));
        let within = match config.connect_timeout < settings.connect_timeout {
            true => "before --timeout ran out".to_owned(),
            false => format!("within {}", human_duration(settings.connect_timeout)),
        };
        let mut first = Burst::default();
        let chroot = (settings.hosts.chroot()).map(|_| first.exists("/", false));
        let who_am_i = settings.acl.explicit.then(|| first.who_am_i());
        first.append(burst);
        let hosts = settings.hosts.connect_string();
        let connecting = Client::connect(config, first);
        let tls_problem =
            credential_problem(settings, connection_timeout_for(settings.session_timeout));
        let client = tokio::select! {
            connected = connecting => connected,
            problem = tls_problem => return Err(problem.into()),
            failure = unresolvable(hosts) => return Err(failure.into()),
        };
        let client = match client {
            Ok(client) => client,
            Err(ConnectError::AuthFailed { member, why }) => {
                return Err(auth_failed(settings, &member, &why));
            }
            Err(ConnectError::Unreachable(last)) => {
                // Try what the client tried, to name the real cause.
                let why = match diagnose(hosts).await {
                    Some(cause) => format!(": {cause}"),
                    None => format!(" ({last})"),
                };
                let message = format!("no ZooKeeper session with {hosts} {within}{why}");
                return Err(Failure::new(Exit::Unavailable, message).into());
            }
        };
        if let Some(chroot) = chroot {
            let found = match chroot.await {
                Err(err) if is_connection_loss(&err) => {
                    retrying(|| client.call(|b| b.exists("/", false))).await
                }
                answered => answered,
            };
            match found {
                Ok(found) if found.stat.is_none() => return Err(settings.missing_chroot()),
                Ok(_) => {}
                Err(Error::AuthFailed) => return Err(auth_failed(settings, hosts, "refused")),
                Err(err) => return Err(err).context("checking that the chroot exists"),
            }
        }
        Ok(Opened(Session {
            client,
            who_am_i: Cell::new(who_am_i),
            owned: OwnedNodes::default(),
            released: RefCell::default(),
            end_by: Cell::default(),
        }))
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn id(&self) -> i64 {
        self.client.session_id()
    }

    /// Refuses (usage error) an ACL under which contenders of our identity
    /// could not queue. The identities are the server's own view (whoAmI,
    /// ZooKeeper 3.7+, asked in the first burst): an x509 subject is spelled
    /// exactly as the server compares it. A digest identity is reported by
    /// its user alone, but compared as `user:hash`: ours is computed as the
    /// server does. Servers without whoAmI skip the check.
    pub async fn check_acl(&self, settings: &Settings) -> Result<()> {
        let Some(asked) = self.who_am_i.take() else {
            return Ok(());
        };
        let users = match asked.await {
            Err(err) if is_connection_loss(&err) => {
                retrying(|| self.client.call(|b| b.who_am_i())).await
            }
            answered => answered,
        };
        let users = match users {
            Ok(users) => users,
            Err(Error::Unimplemented) => return Ok(()),
            Err(err) => return Err(err).context("asking the server who we are (whoami)"),
        };
        let identities: Vec<(String, String)> = (users.into_iter())
            .map(|(scheme, user)| {
                let id = match &settings.digest {
                    Some((name, password)) if scheme == "digest" && user == *name => {
                        acl::digest_id(name, password.expose())
                    }
                    _ => user,
                };
                (scheme, id)
            })
            .collect();
        settings.acl.check(&identities).map_err(Failure::usage)
    }

    /// Since when the connection to the ensemble has been down, if it is:
    /// resolves never; keeps `since` current while polled.
    pub async fn track_connection(&self, since: &Cell<Option<Instant>>) {
        let mut link = self.client.link();
        loop {
            let state = link.borrow_and_update().state;
            match state {
                State::Connected => since.set(None),
                _ if since.get().is_none() => since.set(Some(Instant::now())),
                _ => {}
            }
            if state.is_over() || link.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// The session timeout the ensemble granted (not necessarily the one asked for).
    pub fn timeout(&self) -> Duration {
        self.client.link().borrow().session_timeout
    }
}

/// The error for credentials a member refused (77): one line, naming the
/// member and the scheme; no other member is tried with them.
fn auth_failed(settings: &Settings, member: &str, why: &str) -> anyhow::Error {
    let credentials = settings.credentials();
    let message = format!("authentication failed at {member} ({credentials}): {why}");
    Failure::new(Exit::NoPermission, message).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_session_is_a_lost_connection_not_a_lost_session() {
        assert!(is_connection_loss(&Error::SessionMoved));
        assert!(!is_session_lost(&Error::SessionMoved));
        assert!(!is_session_lost(&Error::AuthFailed), "never queue again");
    }

    #[test]
    fn retrying_makes_a_lost_request_again() {
        let mut calls = 0;
        let result: Result<u32, Error> = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(retrying(|| {
                calls += 1;
                let answer = match calls {
                    1..10 => Err(Error::ConnectionLoss),
                    _ => Ok(calls),
                };
                async move { answer }
            }));
        assert_eq!(result, Ok(10));
    }

    #[test]
    fn only_quick_losses_count_as_a_refusal() {
        let mut losses = Losses::default();
        let quick = Instant::now();
        for _ in 1..LOSSES_BEFORE_REFUSED {
            losses.lost(quick).unwrap();
        }
        // A loss after a stall (an election) starts the count again.
        losses.lost(Instant::now() - QUICK_LOSS).unwrap();
        for _ in 1..LOSSES_BEFORE_REFUSED {
            losses.lost(quick).unwrap();
        }
        let refused = losses.lost(quick).unwrap_err();
        assert!(refused.to_string().contains("jute.maxbuffer"), "{refused}");
    }
}
