//! A burst: requests written together, each with its typed answer to come.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::zk::answers::{MultiResult, ReadResult, Response};
use crate::zk::ops::{CreateMode, MultiOp, ReadOp, Request};
use crate::zk::records::{Acl, Error, Stat};
use crate::zk::session::{Answer, Queued};
use crate::zk::watches::Watch;

/// Requests to write together, each with its answer to come.
#[derive(Debug, Default)]
pub struct Burst(pub(crate) Vec<Queued>);

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

    /// `other`'s requests after these, in one burst.
    pub fn append(&mut self, other: Burst) {
        self.0.extend(other.0);
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

    /// `version` -1: whatever the ACL's version (the stat's aversion).
    pub fn set_acl(&mut self, path: &str, acl: &[Acl], version: i32) -> Pending<Stat> {
        let (path, acl) = (path.to_owned(), acl.to_vec());
        self.push(Request::SetAcl { path, acl, version }, stat)
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

    /// Adds credentials of a scheme (`digest`, `user:password`) to the
    /// session, sent again on every later connection. A refusal ends the
    /// session (AuthFailed), as the server closes the connection.
    pub fn add_auth(&mut self, scheme: &str, auth: &[u8]) -> Pending<()> {
        let (scheme, auth) = (scheme.to_owned(), auth.to_vec());
        self.push(Request::Auth { scheme, auth }, |a| a.result.map(drop))
    }

    /// Ends the session; the state becomes Closed on the answer.
    pub fn close(&mut self) -> Pending<()> {
        self.push(Request::CloseSession, |a| a.result.map(drop))
    }
}

fn stat(answer: Answer) -> Result<Stat, Error> {
    match answer.result? {
        Response::Stat(stat) => Ok(stat),
        _ => unreachable!("setData and setACL answer a stat"),
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
