//! The typed API zklock's callers use: a session, bursts of requests
//! written in one write and answered in order, and the link's state.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::zk::answers::{MultiResult, ReadResult, Response};
use crate::zk::ops::{CreateMode, MultiOp, ReadOp, Request};
use crate::zk::records::{Acl, Error, Stat};
use crate::zk::sasl::SaslMechanism;
use crate::zk::session::{Answer, Driver, Queued};
use crate::zk::watches::Watch;

/// Makes the SASL mechanism for each new connection.
pub type SaslFactory = Arc<dyn Fn() -> anyhow::Result<Box<dyn SaslMechanism + Send>> + Send + Sync>;

/// How to reach the ensemble and what to open there.
#[derive(Clone)]
pub struct Config {
    /// The members, `name:port` each, tried in turn.
    pub hosts: Vec<String>,
    /// The chroot ("" for none): every path given and answered is below it.
    pub chroot: String,
    /// The session timeout asked for (the ensemble may grant another).
    pub session_timeout: Duration,
    /// How long [`Client::connect`] may take.
    pub connect_timeout: Duration,
    /// How long one member may take to connect and answer the handshake.
    pub attempt_timeout: Duration,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Credentials (scheme, auth) sent on every connection, e.g. `digest`,
    /// `user:password`.
    pub auth: Vec<(String, Vec<u8>)>,
    pub sasl: Option<SaslFactory>,
}

/// The session's state, as this client knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// A server has answered on the current connection.
    Connected,
    /// The connection was lost; the session may live on (reconnecting).
    Disconnected,
    /// A server said the session has expired.
    Expired,
    /// A server refused the credentials, and ended the session.
    AuthFailed,
    /// The server answered closeSession (or every handle was dropped).
    Closed,
}

impl State {
    pub fn is_over(self) -> bool {
        matches!(self, State::Expired | State::AuthFailed | State::Closed)
    }
}

/// The link's state and history, watched by the lease: `losses` counts the
/// connections lost, so that a loss is seen even after the next connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub state: State,
    pub losses: u64,
    /// The session timeout the ensemble granted.
    pub session_timeout: Duration,
}

/// Why [`Client::connect`] opened no session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// No member answered the handshake in time; the last problem seen.
    Unreachable(String),
    /// SASL failed: the server refused, or the mechanism did.
    AuthFailed(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Unreachable(why) => write!(f, "no ZooKeeper server answered ({why})"),
            ConnectError::AuthFailed(why) => write!(f, "SASL authentication failed: {why}"),
        }
    }
}

impl std::error::Error for ConnectError {}

/// A session. Clones share it.
#[derive(Clone)]
pub struct Client {
    commands: mpsc::UnboundedSender<Vec<Queued>>,
    link: watch::Receiver<Link>,
    session_id: i64,
}

impl Client {
    /// Opens a session on the first member that answers, trying them in
    /// turn until `config.connect_timeout`; `burst` is written behind the
    /// handshake in the same write (after SASL, with SASL). Returns once a
    /// server has answered the handshake; the burst's answers follow.
    pub async fn connect(config: Config, burst: Burst) -> Result<Client, ConnectError> {
        let deadline = Instant::now() + config.connect_timeout;
        let (commands, received) = mpsc::unbounded_channel();
        let (link, watched) = watch::channel(Link {
            state: State::Disconnected,
            losses: 0,
            session_timeout: config.session_timeout,
        });
        if config.hosts.is_empty() {
            return Err(ConnectError::Unreachable("no server given".to_owned()));
        }
        let mut driver = Driver::new(Arc::new(config), received, link, burst.0);
        let conn = driver.open(deadline).await?;
        let session_id = driver.session_id();
        tokio::spawn(driver.run(conn));
        Ok(Client {
            commands,
            link: watched,
            session_id,
        })
    }

    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// The link's state, to watch for changes.
    pub fn link(&self) -> watch::Receiver<Link> {
        self.link.clone()
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

/// Requests to write together, each with its answer to come.
#[derive(Debug, Default)]
pub struct Burst(Vec<Queued>);

/// A node created: its name (with the sequence number) and stat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub path: String,
    pub stat: Stat,
}

/// Whether a node exists, and the watch asked for (set either way).
#[derive(Debug)]
pub struct Existence {
    pub stat: Option<Stat>,
    pub watch: Option<Watch>,
}

#[derive(Debug)]
pub struct Data {
    pub data: Vec<u8>,
    pub stat: Stat,
    pub watch: Option<Watch>,
}

#[derive(Debug)]
pub struct Children {
    pub children: Vec<String>,
    pub stat: Stat,
    pub watch: Option<Watch>,
}

impl Burst {
    fn push<T>(&mut self, request: Request, read: fn(Answer) -> Result<T, Error>) -> Pending<T> {
        let (reply, answer) = oneshot::channel();
        self.0.push(Queued { request, reply });
        Pending { answer, read }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn create(
        &mut self,
        path: &str,
        data: &[u8],
        acl: &[Acl],
        mode: CreateMode,
    ) -> Pending<Created> {
        let request = Request::Create {
            path: path.to_owned(),
            data: data.to_vec(),
            acl: acl.to_vec(),
            mode,
        };
        self.push(request, |a| match a.result? {
            Response::Created { path, stat } => Ok(Created { path, stat }),
            _ => unreachable!("create answers Created"),
        })
    }

    /// `version` -1: whatever the version.
    pub fn delete(&mut self, path: &str, version: i32) -> Pending<()> {
        let path = path.to_owned();
        self.push(Request::Delete { path, version }, |a| a.result.map(drop))
    }

    pub fn set_data(&mut self, path: &str, data: &[u8], version: i32) -> Pending<Stat> {
        let (path, data) = (path.to_owned(), data.to_vec());
        self.push(
            Request::SetData {
                path,
                data,
                version,
            },
            stat,
        )
    }

    pub fn exists(&mut self, path: &str, watch: bool) -> Pending<Existence> {
        let path = path.to_owned();
        self.push(Request::Exists { path, watch }, |a| match a.result {
            Ok(Response::Stat(stat)) => Ok(Existence {
                stat: Some(stat),
                watch: a.watch,
            }),
            Err(Error::NoNode) => Ok(Existence {
                stat: None,
                watch: a.watch,
            }),
            Err(err) => Err(err),
            Ok(_) => unreachable!("exists answers a stat"),
        })
    }

    pub fn get_data(&mut self, path: &str, watch: bool) -> Pending<Data> {
        let path = path.to_owned();
        self.push(Request::GetData { path, watch }, |a| match a.result? {
            Response::Data { data, stat } => Ok(Data {
                data,
                stat,
                watch: a.watch,
            }),
            _ => unreachable!("getData answers data"),
        })
    }

    pub fn get_children(&mut self, path: &str, watch: bool) -> Pending<Children> {
        let path = path.to_owned();
        self.push(Request::GetChildren { path, watch }, |a| match a.result? {
            Response::Children { children, stat } => Ok(Children {
                children,
                stat,
                watch: a.watch,
            }),
            _ => unreachable!("getChildren2 answers children"),
        })
    }

    pub fn get_acl(&mut self, path: &str) -> Pending<(Vec<Acl>, Stat)> {
        let path = path.to_owned();
        self.push(Request::GetAcl { path }, |a| match a.result? {
            Response::Acl { acl, stat } => Ok((acl, stat)),
            _ => unreachable!("getACL answers an ACL"),
        })
    }

    pub fn sync(&mut self, path: &str) -> Pending<()> {
        let path = path.to_owned();
        self.push(Request::Sync { path }, |a| a.result.map(drop))
    }

    /// All of `ops` or none: each operation's result, or on failure each
    /// one's error (docs/design.md, "The protocol layer").
    pub fn multi(&mut self, ops: Vec<MultiOp>) -> Pending<Vec<Result<MultiResult, Error>>> {
        self.push(Request::Multi(ops), |a| match a.result? {
            Response::Multi(results) => Ok(results),
            _ => unreachable!("multi answers results"),
        })
    }

    /// Each read answered on its own (3.6+; Unimplemented before).
    pub fn multi_read(&mut self, reads: Vec<ReadOp>) -> Pending<Vec<Result<ReadResult, Error>>> {
        self.push(Request::MultiRead(reads), |a| match a.result? {
            Response::MultiRead(results) => Ok(results),
            _ => unreachable!("multiRead answers results"),
        })
    }

    /// The session's identities as the server sees them, (scheme, user)
    /// (3.7+; Unimplemented before).
    pub fn who_am_i(&mut self) -> Pending<Vec<(String, String)>> {
        self.push(Request::WhoAmI, |a| match a.result? {
            Response::WhoAmI(identities) => Ok(identities),
            _ => unreachable!("whoAmI answers identities"),
        })
    }

    /// Ends the session; the state becomes Closed on the answer.
    pub fn close(&mut self) -> Pending<()> {
        self.push(Request::CloseSession, |a| a.result.map(drop))
    }
}

fn stat(answer: Answer) -> Result<Stat, Error> {
    match answer.result? {
        Response::Stat(stat) => Ok(stat),
        _ => unreachable!("setData answers a stat"),
    }
}

/// One request's answer to come. Its request is written whether or not
/// this is awaited; dropping it ignores the answer.
#[derive(Debug)]
pub struct Pending<T> {
    answer: oneshot::Receiver<Answer>,
    read: fn(Answer) -> Result<T, Error>,
}

impl<T> Future for Pending<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let read = self.read;
        Pin::new(&mut self.answer)
            .poll(cx)
            .map(|answer| answer.map_err(|_| Error::Closed).and_then(read))
    }
}
