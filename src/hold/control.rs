//! A hold's control channel (docs/design.md, "Holds"): a unix socket in a
//! per-user runtime directory (mode 0700, ours), on which the holder
//! answers only its own user (the peer's credentials, SO_PEERCRED). One
//! request per connection, one line each way. This is the holder's end;
//! `client.rs` is the asking end.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::owner::Owner;
use super::runtime;

use crate::run::nested::follow::{self, Told};

/// What a client asks a holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The lock paths held (for `zklock release PATH`).
    Paths,
    /// Let go of the lock, then answer.
    Release,
    /// Follow the hold's lease (a nested run: `run::nested::follow`).
    Lease,
}

/// How a release went, as the holder answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// ZooKeeper confirmed our nodes deleted.
    Confirmed,
    /// ZooKeeper could not be reached to confirm: the session ends by
    /// itself, within its timeout.
    Unconfirmed(String),
    /// The lock had been lost before the release, for this reason.
    Lost(String),
}

impl Released {
    fn to_line(&self) -> String {
        match self {
            Released::Confirmed => "released\n".to_owned(),
            Released::Unconfirmed(why) => format!("unconfirmed {}\n", one_line(why)),
            Released::Lost(why) => format!("lost {}\n", one_line(why)),
        }
    }

    pub(super) fn from_line(line: &str) -> Option<Released> {
        let line = line.trim_end_matches('\n');
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "released" => Some(Released::Confirmed),
            "unconfirmed" => Some(Released::Unconfirmed(rest.to_owned())),
            "lost" => Some(Released::Lost(rest.to_owned())),
            _ => None,
        }
    }
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// The holder's end: the socket, removed when dropped.
pub struct Control {
    path: PathBuf,
    listener: tokio::net::UnixListener,
    owner: Owner,
}

impl Control {
    /// Listens on a socket of the runtime directory named after this
    /// process (one holder per process); `owner` is the hold's, which
    /// `Paths` answers.
    pub fn bind(owner: Owner) -> Result<Control> {
        let dir = runtime::for_holder()?;
        let path = dir.join(format!("hold-{}.sock", std::process::id()));
        // A socket left by a holder with this pid that was killed.
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path)
            .context(format!("listening on {}", path.display()))?;
        Ok(Control {
            path,
            listener,
            owner,
        })
    }

    /// The socket's path: the hold's name (`ZKLOCK_HOLD`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next request of our own user; connections of other users are
    /// closed unanswered, and so are requests not read within a second.
    pub async fn next(&self) -> (Request, Asker) {
        let me = rustix::process::getuid().as_raw();
        loop {
            let Ok((stream, _)) = self.listener.accept().await else {
                continue;
            };
            if !stream.peer_cred().is_ok_and(|cred| cred.uid() == me) {
                continue;
            }
            let read = tokio::time::timeout(Duration::from_secs(1), read_line(&stream));
            let request = match read.await {
                Ok(Ok(line)) if line == "paths\n" => Request::Paths,
                Ok(Ok(line)) if line == "release\n" => Request::Release,
                Ok(Ok(line)) if line == follow::REQUEST => Request::Lease,
                _ => continue,
            };
            let asker = Asker {
                stream,
                owner: self.owner.clone(),
            };
            return (request, asker);
        }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One request line (at most a few bytes: a longer one is no request).
async fn read_line(stream: &tokio::net::UnixStream) -> io::Result<String> {
    let mut line = Vec::new();
    while !line.ends_with(b"\n") && line.len() < 16 {
        stream.readable().await?;
        let mut chunk = [0u8; 16];
        match stream.try_read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => line.extend_from_slice(&chunk[..n]),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Err(err),
        }
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// The client that asked, waiting for its answer.
pub struct Asker {
    stream: tokio::net::UnixStream,
    owner: Owner,
}

impl Asker {
    /// Answers a `Paths` request: the paths held and the hold's owner, one
    /// JSON object. A client gone is no matter.
    pub fn paths(self, paths: &[&str]) {
        let held = Held {
            paths: paths.iter().map(|path| (*path).to_owned()).collect(),
            owner: self.owner.as_str().to_owned(),
        };
        let line = serde_json::to_string(&held).unwrap_or_default();
        self.answer(&format!("{line}\n"));
    }

    /// Answers a `Release` request.
    pub fn released(self, released: &Released) {
        self.answer(&released.to_line());
    }

    /// Answers a `Lease` request: the follower, told from now on.
    pub fn following(self) -> Following {
        Following(self.stream)
    }

    /// One short line, far below the socket's buffer: written at once.
    fn answer(self, line: &str) {
        if let Ok(mut stream) = self.stream.into_std() {
            let _ = stream.set_nonblocking(false);
            let _ = stream.write_all(line.as_bytes());
        }
    }
}

/// A nested run following the hold's lease.
pub struct Following(tokio::net::UnixStream);

impl Following {
    /// Tells it `told`; false once it has hung up. A line is far below the
    /// socket's buffer: a follower that does not read loses nothing but
    /// its own lines.
    pub fn tell(&self, told: &Told) -> bool {
        self.0.try_write(told.to_line().as_bytes()).is_ok()
    }

    /// Resolves once it has hung up (its command's group is gone).
    pub async fn hung_up(&self) {
        let mut buf = [0u8; 16];
        loop {
            if self.0.readable().await.is_err() {
                return;
            }
            match self.0.try_read(&mut buf) {
                Ok(0) => return,
                Err(err) if err.kind() != io::ErrorKind::WouldBlock => return,
                _ => {}
            }
        }
    }
}

/// The answer to `Paths`.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Held {
    pub(super) paths: Vec<String>,
    pub(super) owner: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_on_one_line() {
        for released in [
            Released::Confirmed,
            Released::Unconfirmed("no answer".into()),
            Released::Lost("the ZooKeeper session expired".into()),
        ] {
            let line = released.to_line();
            assert_eq!(line.matches('\n').count(), 1);
            assert_eq!(Released::from_line(&line), Some(released));
        }
        assert_eq!(
            Released::from_line(&Released::Lost("a\nb".into()).to_line()),
            Some(Released::Lost("a b".into()))
        );
    }
}
