//! Attaching the session to a connection: a new session within the
//! connect deadline, or the session resumed on the members in turn.

use std::collections::VecDeque;
use std::mem;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Driver;
use super::flight::{InFlight, Written};
use crate::zk::clock::Moment;
use crate::zk::conn::{self, Conn, Refused};
use crate::zk::link::{ConnectError, SaslFactory, State};
use crate::zk::ops::Request;
use crate::zk::records::{ConnectRequest, ConnectResponse, Error, xid};
use crate::zk::sasl::SaslMechanism;

impl Driver {
    /// Opens a new session on the members in turn until `deadline`, the
    /// waiting burst written behind the ConnectRequest of each attempt: an
    /// attempt whose handshake went unanswered belongs to a session nobody
    /// can resume, so its requests are made again, in the next one.
    pub async fn open(&mut self, deadline: Instant) -> Result<Conn, ConnectError> {
        let mut last = String::from("no member tried");
        while Instant::now() < deadline {
            let host = self.members.next();
            let attempt = self.attempt(&host, true);
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(conn)) => return Ok(conn),
                Ok(Err(Refused::AuthFailed(why))) => {
                    return Err(ConnectError::AuthFailed { member: host, why });
                }
                Ok(Err(refused)) => last = format!("{host}: {}", describe(&refused)),
                Err(_) => last = format!("{host}: no answer in time"),
            }
            self.pause_after_round(Some(deadline), None).await;
        }
        Err(ConnectError::Unreachable(last))
    }

    /// Resumes the session on the members in turn, until one takes it or
    /// says it has expired; requests made meanwhile wait for it.
    pub(super) async fn reconnect(&mut self) -> Result<Conn, Error> {
        loop {
            while let Ok(batch) = self.commands.try_recv() {
                self.waiting.extend(batch);
            }
            if self.commands.is_closed() && self.waiting.is_empty() {
                // Every handle is gone: nobody is left to resume it for.
                return Err(Error::ConnectionLoss);
            }
            let host = self.members.next();
            match self.attempt(&host, false).await {
                Ok(conn) => return Ok(conn),
                Err(Refused::Expired) => return Err(Error::SessionExpired),
                Err(Refused::AuthFailed(_)) => return Err(Error::AuthFailed),
                Err(Refused::Io { .. }) => self.pause_after_round(None, Some(self.timeout)).await,
            }
        }
    }

    /// The member the latest attempt was made to (the one connected to,
    /// once an attempt succeeded).
    pub fn member(&self) -> String {
        self.members.last()
    }

    /// The pause after each round of members that answered nothing (about
    /// a second, jittered: see [`Members`](crate::zk::members::Members);
    /// at most a tenth of `session` while resuming one), cut short at
    /// `deadline`.
    async fn pause_after_round(&mut self, deadline: Option<Instant>, session: Option<Duration>) {
        if self.members.round_done() {
            let until = Instant::now() + self.members.pause(session);
            tokio::time::sleep_until(deadline.map_or(until, |d| d.min(until))).await;
        }
    }

    /// One attempt at `host`: the handshake with, in the same write (after
    /// SASL, if any), the credentials, the watches and the waiting requests.
    async fn attempt(&mut self, host: &str, first: bool) -> Result<Conn, Refused> {
        let config = Arc::clone(&self.config);
        let tls = config.tls.as_ref();
        let mut conn = conn::dial(host, tls, config.attempt_timeout, config.max_packet)
            .await
            .map_err(|err| Refused::Io {
                err,
                written: false,
            })?;
        let sasl = match config.sasl.clone() {
            Some(make) => Some(mechanism_for(make, host).await?),
            None => None,
        };
        let request = ConnectRequest {
            last_zxid_seen: self.last_zxid,
            timeout_ms: i32::try_from(config.session_timeout.as_millis()).unwrap_or(i32::MAX),
            session_id: self.session_id,
            password: self.password.clone(),
            read_only: false,
        };
        let mut in_flight = VecDeque::new();
        let sent = Moment::now();
        let exchange = self.exchange(&mut conn, &request, sasl, &mut in_flight);
        let response = match tokio::time::timeout(config.attempt_timeout, exchange).await {
            Ok(response) => response,
            Err(_) => Err(Refused::Io {
                err: std::io::ErrorKind::TimedOut.into(),
                written: !in_flight.is_empty(),
            }),
        };
        match response {
            Ok(response) => {
                self.session_id = response.session_id;
                self.password = response.password;
                self.timeout = Duration::from_millis(response.timeout_ms as u64);
                self.in_flight = in_flight;
                self.link.send_modify(|link| {
                    link.state = State::Connected;
                    link.session_timeout = self.timeout;
                    link.heard = link.heard.max(sent);
                    link.resumed = sent;
                });
                Ok(conn)
            }
            Err(refused) => {
                let written = matches!(refused, Refused::Io { written: true, .. });
                for flight in in_flight {
                    match written && !first {
                        true => flight.queued.fail(Error::ConnectionLoss),
                        false => self.waiting.push(flight.queued),
                    }
                }
                Err(refused)
            }
        }
    }

    /// The handshake, then SASL if any; what [`Driver::behind`] makes goes
    /// in the handshake's write, or after SASL. The credentials' answers
    /// are read here: a refusal ends the attempt, not a session later.
    async fn exchange(
        &mut self,
        conn: &mut Conn,
        request: &ConnectRequest,
        sasl: Option<Box<dyn SaslMechanism + Send>>,
        in_flight: &mut VecDeque<InFlight>,
    ) -> Result<ConnectResponse, Refused> {
        let Some(mechanism) = sasl else {
            let (behind, sent) = self.behind(in_flight);
            let response = conn::handshake(conn, request, &behind).await?;
            conn::credentials_accepted(conn, &self.credentials[..sent]).await?;
            return Ok(response);
        };
        let response = conn::handshake(conn, request, &[]).await?;
        conn::authenticate(conn, mechanism, &mut self.xid).await?;
        let (behind, sent) = self.behind(in_flight);
        let wrote = conn.write(&behind).await;
        wrote.map_err(|err| Refused::Io { err, written: true })?;
        conn::credentials_accepted(conn, &self.credentials[..sent]).await?;
        Ok(response)
    }

    /// What follows the handshake in one write: the credentials (how many:
    /// their answers are awaited apart), the watches to set again, the
    /// waiting requests (now in flight).
    fn behind(&mut self, in_flight: &mut VecDeque<InFlight>) -> (Vec<u8>, usize) {
        let mut behind = Vec::new();
        for (scheme, auth) in &self.credentials {
            let request = Request::Auth {
                scheme: scheme.clone(),
                auth: auth.clone(),
            };
            request.write_packet(xid::AUTH, "", &mut behind);
        }
        let sent = self.credentials.len();
        for set in self.watches.set_again(self.last_zxid) {
            set.write_packet(xid::SET_WATCHES, "", &mut behind);
        }
        let waiting = mem::take(&mut self.waiting);
        let written = Written {
            xid: &mut self.xid,
            chroot: &self.config.chroot,
            credentials: &mut self.credentials,
        };
        written.queue(waiting, &mut behind, in_flight);
        (behind, sent)
    }
}

/// The SASL mechanism for a connection to `host`, made off the session's
/// thread (GSSAPI's reads the ticket cache).
async fn mechanism_for(
    make: SaslFactory,
    host: &str,
) -> Result<Box<dyn SaslMechanism + Send>, Refused> {
    let host = host.to_owned();
    let made = tokio::task::spawn_blocking(move || make(&host)).await;
    let made = made.map_err(|err| Refused::AuthFailed(format!("{err}")))?;
    made.map_err(|err| Refused::AuthFailed(format!("{err:#}")))
}

fn describe(refused: &Refused) -> String {
    match refused {
        Refused::Io { err, .. } => err.to_string(),
        Refused::Expired => "the session expired".to_owned(),
        Refused::AuthFailed(why) => why.clone(),
    }
}
