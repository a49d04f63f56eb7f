//! The typed API zklock's callers use: a session, bursts of requests
//! written in one write and answered in order, and the link's state.
//!
//! ```text
//! let mut burst = Burst::default();
//! let ours = burst.create("/locks/x/_c_ID-lock-", data, &acl, CreateMode::EphemeralSequential);
//! let queue = burst.get_children("/locks/x", false);
//! let client = Client::connect(config, burst).await?;   // one write, one round trip
//! let (ours, queue) = (ours.await?, queue.await?);
//! let mut release = Burst::default();
//! let deleted = release.delete(&ours.path, -1);
//! let closed = release.close();
//! client.send(release);                                  // one write, one round trip
//! ```

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::zk::answers::ReadResult;
use crate::zk::burst::{Burst, Children, Data, Pending};
use crate::zk::clock::Moment;
use crate::zk::ops::ReadOp;
use crate::zk::records::Error;
use crate::zk::session::{Answer, Driver, Queued};

pub use crate::zk::link::{Config, ConnectError, DEFAULT_MAX_PACKET, Link, SaslFactory, State};

/// A session. Clones share it.
#[derive(Clone)]
pub struct Client {
    commands: mpsc::UnboundedSender<Vec<Queued>>,
    link: watch::Receiver<Link>,
    /// The connection (numbered by [`Link::losses`]) to give up.
    leave: Arc<watch::Sender<u64>>,
    session_id: i64,
    member: Arc<str>,
}

impl Client {
    /// Opens a session on the first member that answers, trying them in
    /// turn until `config.connect_timeout`; `burst` is written behind the
    /// handshake in the same write (after SASL, with SASL). Returns once a
    /// server has answered the handshake; the burst's answers follow.
    pub async fn connect(config: Config, burst: Burst) -> Result<Client, ConnectError> {
        let deadline = Instant::now() + config.connect_timeout;
        let (commands, received) = mpsc::unbounded_channel();
        let now = Moment::now();
        let (link, watched) = watch::channel(Link {
            state: State::Disconnected,
            losses: 0,
            session_timeout: config.session_timeout,
            heard: now,
            resumed: now,
        });
        let (leave, left) = watch::channel(u64::MAX);
        if config.hosts.is_empty() {
            return Err(ConnectError::Unreachable("no server given".to_owned()));
        }
        let mut driver =
            Driver::new(Arc::new(config), received, link, left, burst.0).map_err(|err| {
                ConnectError::Unreachable(format!("creating the session's timer: {err}"))
            })?;
        let conn = driver.open(deadline).await?;
        let session_id = driver.session_id();
        let member = driver.member().into();
        tokio::spawn(driver.run(conn));
        Ok(Client {
            commands,
            link: watched,
            leave: Arc::new(leave),
            session_id,
            member,
        })
    }

    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// The member (`name:port`) the session was opened on.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// The link's state, to watch for changes.
    pub fn link(&self) -> watch::Receiver<Link> {
        self.link.clone()
    }

    /// When the latest request a server answered was sent ([`Link::heard`]).
    pub fn heard(&self) -> Moment {
        self.link.borrow().heard
    }

    /// Gives up the connection numbered `losses` ([`Link::losses`]) if it
    /// is still the current one, as if it had broken: the session is
    /// resumed on the next member. For a caller that found the member
    /// stalled; the client itself gives a connection up only after 2T/3
    /// of silence.
    pub fn leave(&self, losses: u64) {
        self.leave.send_replace(losses);
    }

    /// Writes the burst's requests in one write (at once, or behind the
    /// next handshake while disconnected).
    pub fn send(&self, burst: Burst) {
        let state = self.link.borrow().state;
        let why = match state {
            State::Expired => Error::SessionExpired,
            State::AuthFailed => Error::AuthFailed,
            _ => Error::Closed,
        };
        if let Err(unsent) = self.commands.send(burst.0) {
            for queued in unsent.0 {
                let _ = queued.reply.send(Answer {
                    result: Err(why),
                    watch: None,
                });
            }
        }
    }

    /// One request alone: `client.call(|b| b.get_data("/x", true))`.
    pub fn call<T>(&self, request: impl FnOnce(&mut Burst) -> Pending<T>) -> Pending<T> {
        let mut burst = Burst::default();
        let pending = request(&mut burst);
        self.send(burst);
        pending
    }

    /// Reads many nodes in one request (multiRead, 3.6+), or, where the
    /// server does not know it, in one burst of single reads.
    pub async fn read_many(
        &self,
        reads: Vec<ReadOp>,
    ) -> Result<Vec<Result<ReadResult, Error>>, Error> {
        match self.call(|b| b.multi_read(reads.clone())).await {
            Err(Error::Unimplemented) => {}
            answered => return answered,
        }
        let mut burst = Burst::default();
        let singles: Vec<_> = (reads.into_iter())
            .map(|read| match read {
                ReadOp::GetData(path) => Single::Data(burst.get_data(&path, false)),
                ReadOp::GetChildren(path) => Single::Children(burst.get_children(&path, false)),
            })
            .collect();
        self.send(burst);
        let mut results = Vec::new();
        for single in singles {
            results.push(match single {
                Single::Data(pending) => pending.await.map(|d| ReadResult::Data {
                    data: d.data,
                    stat: d.stat,
                }),
                Single::Children(pending) => {
                    pending.await.map(|c| ReadResult::Children(c.children))
                }
            });
        }
        Ok(results)
    }
}

enum Single {
    Data(Pending<Data>),
    Children(Pending<Children>),
}
