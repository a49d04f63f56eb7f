//! The operations zklock sends and how each one's answer reads
//! (`zookeeper.jute`'s request and response records).

use crate::zk::jute::Writer;
use crate::zk::records::{Acl, MultiHeader, opcode};

/// How a node is created; sequential nodes get a 10-digit suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    Persistent,
    Ephemeral,
    EphemeralSequential,
    /// Deleted by the server once its last child is gone (3.5.3+).
    Container,
}

impl CreateMode {
    fn flags(self) -> i32 {
        match self {
            CreateMode::Persistent => 0,
            CreateMode::Ephemeral => 1,
            CreateMode::EphemeralSequential => 3,
            CreateMode::Container => 4,
        }
    }
}

/// One operation of a multi: all of them take effect or none does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiOp {
    /// Fails the multi unless the node's version is `version` (-1: exists).
    Check { path: String, version: i32 },
    Create {
        path: String,
        data: Vec<u8>,
        acl: Vec<Acl>,
        mode: CreateMode,
    },
    /// `version` -1 deletes any version.
    Delete { path: String, version: i32 },
}

/// One read of a multiRead (3.6+): each answered on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOp {
    GetData(String),
    GetChildren(String),
}

/// A request, its paths as the caller sees them (below the chroot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// create2 (createContainer for a container): answered with the stat.
    Create {
        path: String,
        data: Vec<u8>,
        acl: Vec<Acl>,
        mode: CreateMode,
    },
    Delete {
        path: String,
        version: i32,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        version: i32,
    },
    Exists {
        path: String,
        watch: bool,
    },
    GetData {
        path: String,
        watch: bool,
    },
    /// getChildren2: the names and the parent's stat.
    GetChildren {
        path: String,
        watch: bool,
    },
    GetAcl {
        path: String,
    },
    /// `version` is the ACL's (the stat's aversion), -1 for any.
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        version: i32,
    },
    Sync {
        path: String,
    },
    Multi(Vec<MultiOp>),
    MultiRead(Vec<ReadOp>),
    WhoAmI,
    /// Credentials of a scheme (`digest`, `user:password`); xid -4.
    Auth {
        scheme: String,
        auth: Vec<u8>,
    },
    /// One step of the SASL exchange.
    Sasl {
        token: Vec<u8>,
    },
    /// Watches to set again on a new connection (xid -8), firing for what
    /// changed after `relative_zxid`. Paths here are the server's (chroot
    /// included): the session keeps its watches by server path.
    SetWatches {
        relative_zxid: i64,
        data: Vec<String>,
        exist: Vec<String>,
        child: Vec<String>,
    },
    Ping,
    CloseSession,
}

/// `path` as the server sees it, below `chroot` ("" for none).
pub fn chrooted(chroot: &str, path: &str) -> String {
    match path {
        "/" if !chroot.is_empty() => chroot.to_owned(),
        path => format!("{chroot}{path}"),
    }
}

/// A server's `path` as the caller sees it, `chroot` taken off.
pub fn unchrooted(chroot: &str, path: &str) -> String {
    match path.strip_prefix(chroot) {
        Some("") => "/".to_owned(),
        Some(rest) if rest.starts_with('/') => rest.to_owned(),
        _ => path.to_owned(),
    }
}

impl Request {
    /// The operation code in the request header.
    pub fn opcode(&self) -> i32 {
        match self {
            Request::Create { mode, .. } if *mode == CreateMode::Container => {
                opcode::CREATE_CONTAINER
            }
            Request::Create { .. } => opcode::CREATE2,
            Request::Delete { .. } => opcode::DELETE,
            Request::SetData { .. } => opcode::SET_DATA,
            Request::Exists { .. } => opcode::EXISTS,
            Request::GetData { .. } => opcode::GET_DATA,
            Request::GetChildren { .. } => opcode::GET_CHILDREN2,
            Request::GetAcl { .. } => opcode::GET_ACL,
            Request::SetAcl { .. } => opcode::SET_ACL,
            Request::Sync { .. } => opcode::SYNC,
            Request::Multi(_) => opcode::MULTI,
            Request::MultiRead(_) => opcode::MULTI_READ,
            Request::WhoAmI => opcode::WHO_AM_I,
            Request::Auth { .. } => opcode::AUTH,
            Request::Sasl { .. } => opcode::SASL,
            Request::SetWatches { .. } => opcode::SET_WATCHES,
            Request::Ping => opcode::PING,
            Request::CloseSession => opcode::CLOSE_SESSION,
        }
    }

    /// Appends this request as one packet: length, header, record.
    pub fn write_packet(&self, xid: i32, chroot: &str, out: &mut Vec<u8>) {
        let mut w = Writer::default();
        w.int(xid).int(self.opcode());
        self.write(chroot, &mut w);
        out.extend_from_slice(&(w.bytes.len() as i32).to_be_bytes());
        out.extend_from_slice(&w.bytes);
    }

    fn write(&self, chroot: &str, w: &mut Writer) {
        let path = |p: &str| chrooted(chroot, p);
        match self {
            Request::Create {
                path: p,
                data,
                acl,
                mode,
            } => {
                write_create(w, &path(p), data, acl, *mode);
            }
            Request::Delete { path: p, version }
            | Request::SetData {
                path: p, version, ..
            } => {
                w.string(&path(p));
                if let Request::SetData { data, .. } = self {
                    w.buffer(Some(data));
                }
                w.int(*version);
            }
            Request::Exists { path: p, watch }
            | Request::GetData { path: p, watch }
            | Request::GetChildren { path: p, watch } => {
                w.string(&path(p)).bool(*watch);
            }
            Request::GetAcl { path: p } | Request::Sync { path: p } => {
                w.string(&path(p));
            }
            Request::SetAcl {
                path: p,
                acl,
                version,
            } => {
                w.string(&path(p));
                w.vector(acl, |w, acl| acl.write(w));
                w.int(*version);
            }
            Request::Multi(ops) => {
                for op in ops {
                    write_multi_op(w, op, chroot);
                }
                MultiHeader::END.write(w);
            }
            Request::MultiRead(reads) => {
                for read in reads {
                    let (op, p) = match read {
                        ReadOp::GetData(p) => (opcode::GET_DATA, p),
                        ReadOp::GetChildren(p) => (opcode::GET_CHILDREN, p),
                    };
                    MultiHeader {
                        op,
                        done: false,
                        err: -1,
                    }
                    .write(w);
                    w.string(&path(p)).bool(false);
                }
                MultiHeader::END.write(w);
            }
            Request::Auth { scheme, auth } => {
                w.int(0).string(scheme).buffer(Some(auth));
            }
            Request::Sasl { token } => {
                w.buffer(Some(token));
            }
            Request::SetWatches {
                relative_zxid,
                data,
                exist,
                child,
            } => {
                w.long(*relative_zxid);
                for paths in [data, exist, child] {
                    w.vector(paths, |w, p| {
                        w.string(p);
                    });
                }
            }
            Request::WhoAmI | Request::Ping | Request::CloseSession => {}
        }
    }
}

fn write_create(w: &mut Writer, path: &str, data: &[u8], acl: &[Acl], mode: CreateMode) {
    w.string(path).buffer(Some(data));
    w.vector(acl, |w, acl| acl.write(w));
    w.int(mode.flags());
}

fn write_multi_op(w: &mut Writer, op: &MultiOp, chroot: &str) {
    let header = |op| MultiHeader {
        op,
        done: false,
        err: -1,
    };
    match op {
        MultiOp::Check { path, version } => {
            header(opcode::CHECK).write(w);
            w.string(&chrooted(chroot, path)).int(*version);
        }
        MultiOp::Create {
            path,
            data,
            acl,
            mode,
        } => {
            let op = match mode {
                CreateMode::Container => opcode::CREATE_CONTAINER,
                _ => opcode::CREATE,
            };
            header(op).write(w);
            write_create(w, &chrooted(chroot, path), data, acl, *mode);
        }
        MultiOp::Delete { path, version } => {
            header(opcode::DELETE).write(w);
            w.string(&chrooted(chroot, path)).int(*version);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chroot_applies_in_and_out() {
        assert_eq!(chrooted("", "/a"), "/a");
        assert_eq!(chrooted("/app", "/a"), "/app/a");
        assert_eq!(chrooted("/app", "/"), "/app");
        assert_eq!(unchrooted("/app", "/app/a"), "/a");
        assert_eq!(unchrooted("/app", "/app"), "/");
        assert_eq!(unchrooted("", "/a"), "/a");
        // Not below the chroot (cannot happen from a server): left alone.
        assert_eq!(unchrooted("/app", "/apple"), "/apple");
    }
}
