//! The session's state machine: one task that owns the connection, writes
//! requests as they come, matches answers in order, pings when the line has
//! been quiet for a third of the session timeout, and on a lost connection
//! says so at once and resumes the session on the next member
//! (docs/design.md, "The protocol layer").

use std::collections::VecDeque;
use std::mem;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::zk::answers::Response;
use crate::zk::clock::{Alarm, Moment};
use crate::zk::conn::Conn;
use crate::zk::jute::Reader;
use crate::zk::link::{Config, Link, State};
use crate::zk::members::Members;
use crate::zk::ops::{Request, chrooted, unchrooted};
use crate::zk::records::{Error, ReplyHeader, WatcherEvent, xid};
use crate::zk::watches::{Watch, WatchKind, Watches};

mod attach;
mod flight;

use self::flight::{InFlight, Written, oldest};

/// What a request's sender gets back.
#[derive(Debug)]
pub struct Answer {
    pub result: Result<Response, Error>,
    /// The watch the request set, if it asked for one and the server set it.
    pub watch: Option<Watch>,
}

/// A request made by a caller, not yet written.
#[derive(Debug)]
pub struct Queued {
    pub request: Request,
    pub reply: oneshot::Sender<Answer>,
}

impl Queued {
    fn fail(self, why: Error) {
        let _ = self.reply.send(Answer {
            result: Err(why),
            watch: None,
        });
    }
}

/// Why serving a connection stopped.
enum End {
    /// The connection broke (or the server stopped answering).
    Lost,
    /// The session is over, for this reason.
    Over(Error),
}

pub struct Driver {
    config: Arc<Config>,
    commands: mpsc::UnboundedReceiver<Vec<Queued>>,
    link: watch::Sender<Link>,
    /// The connection the caller gave up ([`Link::losses`]).
    leave: watch::Receiver<u64>,
    session_id: i64,
    password: Vec<u8>,
    timeout: Duration,
    last_zxid: i64,
    xid: i32,
    /// The credentials sent on every connection: the config's, then those
    /// added to the session ([`crate::zk::burst::Burst::add_auth`]).
    credentials: Vec<(String, Vec<u8>)>,
    watches: Watches,
    in_flight: VecDeque<InFlight>,
    /// Requests made while no connection was up, for the next one.
    waiting: Vec<Queued>,
    /// The members, in the order this session tries them.
    members: Members,
    /// The next ping or the connection's death, whichever comes first.
    alarm: Alarm,
}

impl Driver {
    pub fn new(
        config: Arc<Config>,
        commands: mpsc::UnboundedReceiver<Vec<Queued>>,
        link: watch::Sender<Link>,
        leave: watch::Receiver<u64>,
        burst: Vec<Queued>,
    ) -> std::io::Result<Driver> {
        let timeout = config.session_timeout;
        let credentials = config.auth.clone();
        let members = Members::new(&config.hosts, uuid::Uuid::new_v4().as_u64_pair().0);
        Ok(Driver {
            config,
            commands,
            link,
            leave,
            session_id: 0,
            password: vec![0; 16],
            timeout,
            last_zxid: 0,
            xid: 0,
            credentials,
            watches: Watches::default(),
            in_flight: VecDeque::new(),
            waiting: burst,
            members,
            alarm: Alarm::new()?,
        })
    }

    pub fn session_id(&self) -> i64 {
        self.session_id
    }

    /// Serves the session until it is over: each connection, then the next.
    pub async fn run(mut self, mut conn: Conn) {
        loop {
            let why = match self.serve(&mut conn).await {
                End::Over(why) => why,
                End::Lost => {
                    drop(conn);
                    self.lose_connection();
                    match self.reconnect().await {
                        Ok(next) => {
                            conn = next;
                            continue;
                        }
                        Err(why) => why,
                    }
                }
            };
            return self.finish(why);
        }
    }

    /// Serves one connection until it breaks or the session is over.
    async fn serve(&mut self, conn: &mut Conn) -> End {
        let third = self.timeout / 3;
        let mut abandoned = false;
        let mut leave_open = true;
        let mut last_sent = Moment::now();
        let mut last_heard = Moment::now();
        let mut ping_sent = None;
        loop {
            let ping_at = last_sent + third;
            // Silent for two thirds of the timeout, as the Java client
            // reads it: the connection is gone. A request unanswered for
            // less is a stalled server (a long fsync, a pause), which the
            // session survives; a caller that must not wait for it says
            // so (`Client::leave`).
            let dead_at = last_heard + third * 2;
            if self.alarm.set(ping_at.min(dead_at)).is_err() {
                return End::Lost;
            }
            let mut out = Vec::new();
            tokio::select! {
                packet = conn.packet() => {
                    let Ok(packet) = packet else { return End::Lost };
                    last_heard = Moment::now();
                    if let Some(end) = self.answer(&packet, &mut ping_sent) {
                        return end;
                    }
                }
                batch = self.commands.recv(), if !abandoned => match batch {
                    Some(batch) => {
                        self.write_requests(batch, &mut out);
                        while let Ok(more) = self.commands.try_recv() {
                            self.write_requests(more, &mut out);
                        }
                    }
                    None => {
                        // Every handle is gone: nobody can use the session
                        // any more, so end it (Closed on the answer).
                        abandoned = true;
                        let (reply, _) = oneshot::channel();
                        let close = Queued { request: Request::CloseSession, reply };
                        self.write_requests(vec![close], &mut out);
                    }
                },
                left = self.leave.changed(), if leave_open => {
                    let here = self.link.borrow().losses;
                    leave_open = left.is_ok();
                    if leave_open && *self.leave.borrow_and_update() == here {
                        return End::Lost;
                    }
                }
                rang = self.alarm.ring() => {
                    if rang.is_err() || Moment::now() >= dead_at {
                        return End::Lost;
                    }
                    Request::Ping.write_packet(xid::PING, "", &mut out);
                    ping_sent.get_or_insert_with(Moment::now);
                }
            }
            if !out.is_empty() {
                // A server that stops reading holds the write: it runs
                // under the connection's deadline like any wait.
                let written = tokio::time::timeout_at(dead_at.to_instant(), conn.write(&out)).await;
                if !matches!(written, Ok(Ok(()))) {
                    return End::Lost;
                }
                last_sent = Moment::now();
            }
        }
    }

    fn write_requests(&mut self, batch: Vec<Queued>, out: &mut Vec<u8>) {
        let written = Written {
            xid: &mut self.xid,
            chroot: &self.config.chroot,
            credentials: &mut self.credentials,
        };
        written.queue(batch, out, &mut self.in_flight);
    }

    /// Handles one packet from the server; the end of the connection or the
    /// session when it says so.
    fn answer(&mut self, packet: &[u8], ping_sent: &mut Option<Moment>) -> Option<End> {
        let mut r = Reader::new(packet);
        let Ok(header) = ReplyHeader::read(&mut r) else {
            return Some(End::Lost);
        };
        let chroot = self.config.chroot.as_str();
        match header.xid {
            xid::WATCHER_EVENT => {
                let Ok(event) = WatcherEvent::read(&mut r) else {
                    return Some(End::Lost);
                };
                let path = unchrooted(chroot, &event.path);
                self.watches.fire(event.event_type, &event.path, &path);
                return None;
            }
            xid::AUTH => {
                // Auth is answered as the server reads it, ahead of requests
                // still in its pipeline: in order among auths only.
                let Some(flight) = oldest(&mut self.in_flight, true) else {
                    return Some(End::Lost);
                };
                let result = match header.err {
                    0 => Ok(Response::Empty),
                    err => Err(Error::from_i32(err)),
                };
                let refused = result.is_err();
                let _ = flight.queued.reply.send(Answer {
                    result,
                    watch: None,
                });
                return refused.then_some(End::Over(Error::AuthFailed));
            }
            xid::PING => {
                if let Some(sent) = ping_sent.take() {
                    self.heard(sent);
                }
                return None;
            }
            xid::SET_WATCHES => return None,
            _ => {}
        }
        let Some(flight) = oldest(&mut self.in_flight, false) else {
            return Some(End::Lost);
        };
        if flight.xid != header.xid {
            self.in_flight.push_front(flight);
            return Some(End::Lost);
        }
        if header.zxid > 0 {
            self.last_zxid = header.zxid;
        }
        self.heard(flight.sent);
        let request = &flight.queued.request;
        let result = match header.err {
            0 => match request.read_response(chroot, &mut r) {
                Ok(response) => Ok(response),
                Err(_) => {
                    self.in_flight.push_front(flight);
                    return Some(End::Lost);
                }
            },
            err => Err(Error::from_i32(err)),
        };
        let watch = self.watch_set_by(request, &result);
        let closed = *request == Request::CloseSession;
        let _ = flight.queued.reply.send(Answer { result, watch });
        match Error::from_i32(header.err) {
            _ if closed => Some(End::Over(Error::Closed)),
            Error::SessionExpired => Some(End::Over(Error::SessionExpired)),
            _ => None,
        }
    }

    /// A server answered a request sent at `sent`; no watcher of the link
    /// is woken for that.
    fn heard(&self, sent: Moment) {
        self.link.send_if_modified(|link| {
            link.heard = link.heard.max(sent);
            false
        });
    }

    /// The watch the server set with this answer: an exists finding the
    /// node sets a data watch, one finding none an exist watch.
    fn watch_set_by(
        &mut self,
        request: &Request,
        result: &Result<Response, Error>,
    ) -> Option<Watch> {
        let (kind, path) = match (request, result) {
            (Request::Exists { path, watch: true }, Ok(_)) => (WatchKind::Data, path),
            (Request::Exists { path, watch: true }, Err(Error::NoNode)) => (WatchKind::Exist, path),
            (Request::GetData { path, watch: true }, Ok(_)) => (WatchKind::Data, path),
            (Request::GetChildren { path, watch: true }, Ok(_)) => (WatchKind::Child, path),
            _ => return None,
        };
        let server_path = chrooted(&self.config.chroot, path);
        Some(self.watches.add(kind, &server_path))
    }

    /// Reports the loss at once and fails what it left unanswered.
    fn lose_connection(&mut self) {
        self.link.send_modify(|link| {
            link.state = State::Disconnected;
            link.losses += 1;
        });
        for flight in mem::take(&mut self.in_flight) {
            flight.queued.fail(Error::ConnectionLoss);
        }
    }

    /// The session is over: says why, to the link, every request and watch.
    fn finish(mut self, why: Error) {
        let state = match why {
            Error::SessionExpired => Some(State::Expired),
            Error::AuthFailed => Some(State::AuthFailed),
            Error::Closed => Some(State::Closed),
            // Abandoned while disconnected: the session may live on, until
            // it expires; nobody is left to resume it.
            _ => None,
        };
        if let Some(state) = state {
            self.link.send_modify(|link| link.state = state);
        }
        self.commands.close();
        while let Ok(batch) = self.commands.try_recv() {
            self.waiting.extend(batch);
        }
        let in_flight = mem::take(&mut self.in_flight).into_iter().map(|f| f.queued);
        for queued in in_flight.chain(mem::take(&mut self.waiting)) {
            queued.fail(why);
        }
        self.watches.end(why);
    }
}
