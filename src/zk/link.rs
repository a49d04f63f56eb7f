//! What a session is opened with and how its link stands: below both the
//! client (the typed API) and the session's driver, which share them.

use std::sync::Arc;
use std::time::Duration;

use crate::zk::clock::Moment;
use crate::zk::sasl::SaslMechanism;

/// Makes the SASL mechanism for each new connection, given the member it
/// is to (`name:port`): GSSAPI names the server's principal after it.
pub type SaslFactory =
    Arc<dyn Fn(&str) -> anyhow::Result<Box<dyn SaslMechanism + Send>> + Send + Sync>;

/// The largest packet a client accepts unless told otherwise: four times
/// ZooKeeper's own default `jute.maxbuffer` (1 MiB), room for a node of
/// that size with its stat, or a long listing.
pub const DEFAULT_MAX_PACKET: usize = 4 << 20;

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
    /// The largest packet accepted from a server ([`DEFAULT_MAX_PACKET`]);
    /// a longer one ends the connection before it is read.
    pub max_packet: usize,
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
    /// The server answered closeSession (sent by [`Burst::close`], or by
    /// the session itself once every handle to it is gone).
    Closed,
}

impl State {
    pub fn is_over(self) -> bool {
        matches!(self, State::Expired | State::AuthFailed | State::Closed)
    }
}

/// The link's state and history, watched by the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub state: State,
    /// The connections lost so far, which also numbers the current one: a
    /// watcher that looks only after the next connect still sees the loss
    /// (the lease does, see `Client::leave`).
    pub losses: u64,
    /// The session timeout the ensemble granted.
    pub session_timeout: Duration,
    /// When the latest request a server answered was sent (a handshake
    /// resuming the session, a ping, any request): the server heard from
    /// the session then or later, so its timeout runs from no earlier
    /// (docs/design.md, "Session and lease rules"). Updated without
    /// waking the link's watchers.
    pub heard: Moment,
    /// When the handshake that opened or resumed the session on the
    /// current connection was sent: a member resuming a session asks the
    /// leader, which restarts the session's timeout then or later
    /// (docs/design.md, "Session and lease rules").
    pub resumed: Moment,
}

/// Why [`Client::connect`] opened no session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectError {
    /// No member answered the handshake in time; the last problem seen.
    Unreachable(String),
    /// A member refused the credentials (SASL's, or those sent with the
    /// handshake), or the SASL mechanism failed; `why` names the scheme.
    AuthFailed { member: String, why: String },
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Unreachable(why) => write!(f, "no ZooKeeper server answered ({why})"),
            ConnectError::AuthFailed { member, why } => {
                write!(f, "authentication failed at {member}: {why}")
            }
        }
    }
}

impl std::error::Error for ConnectError {}
