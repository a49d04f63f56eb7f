//! How each operation's answer reads (`zookeeper.jute`'s response
//! records), paths given back below the chroot.

use crate::zk::jute::{Malformed, Reader};
use crate::zk::ops::{Request, unchrooted};
use crate::zk::records::{Acl, Error, MultiHeader, Stat, opcode};

/// An answer, its paths as the caller sees them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// delete, check, auth, setWatches, ping, closeSession.
    Empty,
    Created {
        path: String,
        stat: Stat,
    },
    /// setData, setACL and exists.
    Stat(Stat),
    Data {
        data: Vec<u8>,
        stat: Stat,
    },
    Children {
        children: Vec<String>,
        stat: Stat,
    },
    Acl {
        acl: Vec<Acl>,
        stat: Stat,
    },
    /// sync: the path synced.
    Path(String),
    /// One result per operation; on failure, each operation's code (the
    /// ones that did not fail themselves say RuntimeInconsistency).
    Multi(Vec<Result<MultiResult, Error>>),
    MultiRead(Vec<Result<ReadResult, Error>>),
    /// whoAmI: the session's identities as (scheme, user).
    WhoAmI(Vec<(String, String)>),
    Sasl(Vec<u8>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiResult {
    Checked,
    Created(String),
    Deleted,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadResult {
    Data { data: Vec<u8>, stat: Stat },
    Children(Vec<String>),
}

impl Request {
    /// Reads the record of a successful answer to this request.
    pub fn read_response(&self, chroot: &str, r: &mut Reader<'_>) -> Result<Response, Malformed> {
        let path = |p: String| unchrooted(chroot, &p);
        Ok(match self {
            Request::Create { .. } => Response::Created {
                path: path(r.string()?),
                stat: Stat::read(r)?,
            },
            Request::SetData { .. } | Request::SetAcl { .. } | Request::Exists { .. } => {
                Response::Stat(Stat::read(r)?)
            }
            Request::GetData { .. } => Response::Data {
                data: r.buffer()?.unwrap_or_default().to_vec(),
                stat: Stat::read(r)?,
            },
            Request::GetChildren { .. } => Response::Children {
                children: r.vector(Reader::string)?,
                stat: Stat::read(r)?,
            },
            Request::GetAcl { .. } => Response::Acl {
                acl: r.vector(Acl::read)?,
                stat: Stat::read(r)?,
            },
            Request::Sync { .. } => Response::Path(path(r.string()?)),
            Request::Multi(_) => Response::Multi(read_results(r, |op, r| {
                Ok(match op {
                    opcode::CHECK => MultiResult::Checked,
                    opcode::DELETE => MultiResult::Deleted,
                    opcode::CREATE => MultiResult::Created(path(r.string()?)),
                    opcode::CREATE2 | opcode::CREATE_CONTAINER => {
                        let created = path(r.string()?);
                        Stat::read(r)?;
                        MultiResult::Created(created)
                    }
                    _ => return Err(Malformed("unknown result in a multi's answer")),
                })
            })?),
            Request::MultiRead(_) => Response::MultiRead(read_results(r, |op, r| {
                Ok(match op {
                    opcode::GET_DATA => ReadResult::Data {
                        data: r.buffer()?.unwrap_or_default().to_vec(),
                        stat: Stat::read(r)?,
                    },
                    opcode::GET_CHILDREN => ReadResult::Children(r.vector(Reader::string)?),
                    _ => return Err(Malformed("unknown result in a multiRead's answer")),
                })
            })?),
            Request::WhoAmI => Response::WhoAmI(r.vector(|r| Ok((r.string()?, r.string()?)))?),
            Request::Sasl { .. } => Response::Sasl(r.buffer()?.unwrap_or_default().to_vec()),
            Request::Delete { .. }
            | Request::Auth { .. }
            | Request::SetWatches { .. }
            | Request::Ping
            | Request::CloseSession => Response::Empty,
        })
    }
}

/// The results of a multi or multiRead: a header before each, an error
/// result carrying its code, up to the header marked done.
fn read_results<T>(
    r: &mut Reader<'_>,
    mut result: impl FnMut(i32, &mut Reader<'_>) -> Result<T, Malformed>,
) -> Result<Vec<Result<T, Error>>, Malformed> {
    let mut results = Vec::new();
    loop {
        let header = MultiHeader::read(r)?;
        if header.done {
            return Ok(results);
        }
        results.push(match header.op {
            // The operations of a failed multi before the one that failed
            // carry 0: they did not fail, and were not applied either.
            opcode::ERROR => Err(match r.int()? {
                0 => Error::RolledBack,
                code => Error::from_i32(code),
            }),
            op => Ok(result(op, r)?),
        });
    }
}
