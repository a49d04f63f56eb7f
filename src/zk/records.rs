//! The records around every operation: headers, the handshake, stats, ACLs,
//! watcher events, and the error codes a server answers with
//! (ZooKeeper's `zookeeper.jute` and `ZooDefs`).

use std::fmt;

use crate::zk::jute::{Malformed, Reader, Writer};

/// Operation codes (`ZooDefs.OpCode`) of the operations zklock uses.
pub mod opcode {
    pub const CREATE: i32 = 1;
    pub const DELETE: i32 = 2;
    pub const EXISTS: i32 = 3;
    pub const GET_DATA: i32 = 4;
    pub const SET_DATA: i32 = 5;
    pub const GET_ACL: i32 = 6;
    pub const SET_ACL: i32 = 7;
    pub const GET_CHILDREN: i32 = 8;
    pub const SYNC: i32 = 9;
    pub const PING: i32 = 11;
    pub const GET_CHILDREN2: i32 = 12;
    pub const CHECK: i32 = 13;
    pub const MULTI: i32 = 14;
    pub const CREATE2: i32 = 15;
    pub const CREATE_CONTAINER: i32 = 19;
    pub const MULTI_READ: i32 = 22;
    pub const AUTH: i32 = 100;
    pub const SET_WATCHES: i32 = 101;
    pub const SASL: i32 = 102;
    pub const WHO_AM_I: i32 = 107;
    pub const CLOSE_SESSION: i32 = -11;
    /// The type of a failed operation's result in a multi's answer.
    pub const ERROR: i32 = -1;
}

/// The xids the protocol reserves; ordinary requests count up from 1.
pub mod xid {
    pub const WATCHER_EVENT: i32 = -1;
    pub const PING: i32 = -2;
    pub const AUTH: i32 = -4;
    pub const SET_WATCHES: i32 = -8;
}

/// Why a request failed: the error codes of `KeeperException.Code`, which
/// a server sends in a reply header. This client reports a few of them of
/// its own, with the same meaning (ConnectionLoss, SessionExpired,
/// AuthFailed), and one more no server sends: [`Error::Closed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    System,
    RuntimeInconsistency,
    DataInconsistency,
    /// The answer was lost with the connection: the request may or may not
    /// have taken effect (docs/design.md, "The protocol layer").
    ConnectionLoss,
    Marshalling,
    /// The server does not know the operation (older than it).
    Unimplemented,
    OperationTimeout,
    BadArguments,
    UnknownSession,
    Api,
    NoNode,
    NoAuth,
    BadVersion,
    NoChildrenForEphemerals,
    NodeExists,
    NotEmpty,
    SessionExpired,
    InvalidAcl,
    AuthFailed,
    SessionMoved,
    NotReadOnly,
    NoWatcher,
    RequestTimeout,
    SessionClosedRequireSaslAuth,
    QuotaExceeded,
    Throttled,
    /// Any other number a server sends.
    Other(i32),
    /// An operation of a failed multi that did not fail itself: the multi
    /// failed on another, so it was not applied (the server's result 0).
    RolledBack,
    /// The session is closed, or every handle to it is gone.
    Closed,
}

const CODES: &[(i32, Error)] = &[
    (-1, Error::System),
    (-2, Error::RuntimeInconsistency),
    (-3, Error::DataInconsistency),
    (-4, Error::ConnectionLoss),
    (-5, Error::Marshalling),
    (-6, Error::Unimplemented),
    (-7, Error::OperationTimeout),
    (-8, Error::BadArguments),
    (-15, Error::UnknownSession),
    (-100, Error::Api),
    (-101, Error::NoNode),
    (-102, Error::NoAuth),
    (-103, Error::BadVersion),
    (-108, Error::NoChildrenForEphemerals),
    (-110, Error::NodeExists),
    (-111, Error::NotEmpty),
    (-112, Error::SessionExpired),
    (-114, Error::InvalidAcl),
    (-115, Error::AuthFailed),
    (-118, Error::SessionMoved),
    (-119, Error::NotReadOnly),
    (-121, Error::NoWatcher),
    (-122, Error::RequestTimeout),
    (-124, Error::SessionClosedRequireSaslAuth),
    (-125, Error::QuotaExceeded),
    (-127, Error::Throttled),
];

impl Error {
    /// The code of a non-zero error number.
    pub fn from_i32(number: i32) -> Error {
        (CODES.iter())
            .find(|(n, _)| *n == number)
            .map_or(Error::Other(number), |(_, code)| *code)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Other(number) => write!(f, "ZooKeeper error {number}"),
            Error::Closed => write!(f, "the session is closed"),
            code => write!(f, "{code:?}"),
        }
    }
}

impl std::error::Error for Error {}

/// A node's metadata (`org.apache.zookeeper.data.Stat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stat {
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub cversion: i32,
    pub aversion: i32,
    pub ephemeral_owner: i64,
    pub data_length: i32,
    pub num_children: i32,
    pub pzxid: i64,
}

impl Stat {
    pub fn read(r: &mut Reader<'_>) -> Result<Stat, Malformed> {
        Ok(Stat {
            czxid: r.long()?,
            mzxid: r.long()?,
            ctime: r.long()?,
            mtime: r.long()?,
            version: r.int()?,
            cversion: r.int()?,
            aversion: r.int()?,
            ephemeral_owner: r.long()?,
            data_length: r.int()?,
            num_children: r.int()?,
            pzxid: r.long()?,
        })
    }

    #[cfg(test)]
    pub fn write(&self, w: &mut Writer) {
        w.long(self.czxid)
            .long(self.mzxid)
            .long(self.ctime)
            .long(self.mtime);
        w.int(self.version).int(self.cversion).int(self.aversion);
        w.long(self.ephemeral_owner)
            .int(self.data_length)
            .int(self.num_children);
        w.long(self.pzxid);
    }
}

/// The permission bits of an [`Acl`] (`ZooDefs.Perms`).
pub mod perms {
    pub const READ: i32 = 1;
    pub const WRITE: i32 = 2;
    pub const CREATE: i32 = 4;
    pub const DELETE: i32 = 8;
    pub const ADMIN: i32 = 16;
    pub const ALL: i32 = READ | WRITE | CREATE | DELETE | ADMIN;
}

/// One entry of an access control list: permission bits (`ZooDefs.Perms`)
/// for an identity of a scheme (`world:anyone`, `digest:user:hash`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    pub perms: i32,
    pub scheme: String,
    pub id: String,
}

impl Acl {
    /// Every permission for everyone (`world:anyone:cdrwa`, the Java
    /// client's OPEN_ACL_UNSAFE).
    pub fn open() -> Acl {
        Acl {
            perms: perms::ALL,
            scheme: "world".to_owned(),
            id: "anyone".to_owned(),
        }
    }

    pub fn write(&self, w: &mut Writer) {
        w.int(self.perms).string(&self.scheme).string(&self.id);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Acl, Malformed> {
        Ok(Acl {
            perms: r.int()?,
            scheme: r.string()?,
            id: r.string()?,
        })
    }
}

/// The first packet of every connection: a new session (id 0) or the
/// session to resume, with the last zxid this client has seen so that a
/// server behind it refuses the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    pub last_zxid_seen: i64,
    pub timeout_ms: i32,
    pub session_id: i64,
    pub password: Vec<u8>,
    pub read_only: bool,
}

impl ConnectRequest {
    pub fn write(&self, w: &mut Writer) {
        w.int(0); // protocol version
        w.long(self.last_zxid_seen)
            .int(self.timeout_ms)
            .long(self.session_id);
        w.buffer(Some(&self.password)).bool(self.read_only);
    }

    #[cfg(test)]
    pub fn read(r: &mut Reader<'_>) -> Result<ConnectRequest, Malformed> {
        let _protocol_version = r.int()?;
        Ok(ConnectRequest {
            last_zxid_seen: r.long()?,
            timeout_ms: r.int()?,
            session_id: r.long()?,
            password: r.buffer()?.unwrap_or_default().to_vec(),
            read_only: r.bool()?,
        })
    }
}

/// The server's answer to [`ConnectRequest`]. A timeout of 0 (or less)
/// means the session asked for has expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectResponse {
    pub timeout_ms: i32,
    pub session_id: i64,
    pub password: Vec<u8>,
    pub read_only: bool,
}

impl ConnectResponse {
    pub fn read(r: &mut Reader<'_>) -> Result<ConnectResponse, Malformed> {
        let _protocol_version = r.int()?;
        Ok(ConnectResponse {
            timeout_ms: r.int()?,
            session_id: r.long()?,
            password: r.buffer()?.unwrap_or_default().to_vec(),
            // Servers before 3.4 end the record here.
            read_only: !r.is_empty() && r.bool()?,
        })
    }

    #[cfg(test)]
    pub fn write(&self, w: &mut Writer) {
        w.int(0).int(self.timeout_ms).long(self.session_id);
        w.buffer(Some(&self.password)).bool(self.read_only);
    }
}

/// The header before every answer (and watcher event). `err` is 0 or an
/// error number; the answer's record follows only when it is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader {
    pub xid: i32,
    pub zxid: i64,
    pub err: i32,
}

impl ReplyHeader {
    pub fn read(r: &mut Reader<'_>) -> Result<ReplyHeader, Malformed> {
        Ok(ReplyHeader {
            xid: r.int()?,
            zxid: r.long()?,
            err: r.int()?,
        })
    }

    #[cfg(test)]
    pub fn write(&self, w: &mut Writer) {
        w.int(self.xid).long(self.zxid).int(self.err);
    }
}

/// What happened to a watched node (`Watcher.Event.EventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    NodeCreated,
    NodeDeleted,
    NodeDataChanged,
    NodeChildrenChanged,
    Other(i32),
}

/// A watch firing (`WatcherEvent`, sent with xid -1): the event's type, the
/// session's state (always connected when a server sends it) and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatcherEvent {
    pub event_type: EventType,
    pub path: String,
}

impl WatcherEvent {
    pub fn read(r: &mut Reader<'_>) -> Result<WatcherEvent, Malformed> {
        let event_type = match r.int()? {
            1 => EventType::NodeCreated,
            2 => EventType::NodeDeleted,
            3 => EventType::NodeDataChanged,
            4 => EventType::NodeChildrenChanged,
            other => EventType::Other(other),
        };
        let _state = r.int()?;
        let path = r.string()?;
        Ok(WatcherEvent { event_type, path })
    }

    #[cfg(test)]
    pub fn write(&self, w: &mut Writer) {
        let number = match self.event_type {
            EventType::NodeCreated => 1,
            EventType::NodeDeleted => 2,
            EventType::NodeDataChanged => 3,
            EventType::NodeChildrenChanged => 4,
            EventType::Other(number) => number,
        };
        w.int(number).int(3).string(&self.path);
    }
}

/// The header before each operation of a multi and each of its results
/// (`MultiHeader`); the list ends with one whose `done` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiHeader {
    pub op: i32,
    pub done: bool,
    pub err: i32,
}

impl MultiHeader {
    pub const END: MultiHeader = MultiHeader {
        op: -1,
        done: true,
        err: -1,
    };

    pub fn write(&self, w: &mut Writer) {
        w.int(self.op).bool(self.done).int(self.err);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<MultiHeader, Malformed> {
        Ok(MultiHeader {
            op: r.int()?,
            done: r.bool()?,
            err: r.int()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_map_both_ways() {
        for (number, code) in CODES {
            assert_eq!(Error::from_i32(*number), *code);
        }
        assert_eq!(Error::from_i32(-999), Error::Other(-999));
    }
}
