//! A hold's control channel (docs/design.md, "Holds"): a unix socket in a
//! per-user runtime directory (mode 0700, ours), on which the holder
//! answers only its own user (the peer's credentials, SO_PEERCRED). One
//! request per connection, one line each way.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};

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

    fn from_line(line: &str) -> Option<Released> {
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

/// This user's runtime directory for holds: `$XDG_RUNTIME_DIR/zklock`, or
/// `/tmp/zklock-UID`; created (mode 0700) when `create`. Refused unless it
/// is a directory (not a link) that we own, with no access for others:
/// another user must not be able to put a socket of theirs in our place.
pub fn runtime_dir(create: bool) -> Result<PathBuf> {
    let uid = rustix::process::getuid().as_raw();
    let dir = dir_path();
    if create {
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(err).context(format!("creating {}", dir.display())),
        }
    }
    let meta = std::fs::symlink_metadata(&dir).context(format!("reading {}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        bail!(
            "{} is not a directory of uid {uid} with mode 0700: refusing to use it for holds",
            dir.display()
        );
    }
    Ok(dir)
}

/// The holder's end: the socket, removed when dropped.
pub struct Control {
    path: PathBuf,
    listener: tokio::net::UnixListener,
}

impl Control {
    /// Listens on a socket of the runtime directory named after this
    /// process (one holder per process).
    pub fn bind() -> Result<Control> {
        let dir = runtime_dir(true)?;
        let path = dir.join(format!("hold-{}.sock", std::process::id()));
        // A socket left by a holder with this pid that was killed.
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path)
            .context(format!("listening on {}", path.display()))?;
        Ok(Control { path, listener })
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
            return (request, Asker(stream));
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
pub struct Asker(tokio::net::UnixStream);

impl Asker {
    /// Answers a `Paths` request. A client gone is no matter.
    pub fn paths(self, paths: &[&str]) {
        self.answer(&format!("{}\n", serde_json::json!(paths)));
    }

    /// Answers a `Release` request.
    pub fn released(self, released: &Released) {
        self.answer(&released.to_line());
    }

    /// Answers a `Lease` request: the follower, told from now on.
    pub fn following(self) -> Following {
        Following(self.0)
    }

    /// One short line, far below the socket's buffer: written at once.
    fn answer(self, line: &str) {
        if let Ok(mut stream) = self.0.into_std() {
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

/// Why a client got no answer.
#[derive(Debug)]
pub enum Unanswered {
    /// No holder listens there (released already, or its holder ended).
    NoHold,
    /// The socket belongs to another user, or the answer was garbled.
    Refused(String),
    Io(io::Error),
}

/// The client's end: asks the holder at `socket` and reads its one-line
/// answer (for a release, once ZooKeeper answered the delete).
fn ask(socket: &Path, request: Request) -> Result<String, Unanswered> {
    let mut stream = UnixStream::connect(socket).map_err(|err| match err.kind() {
        io::ErrorKind::NotFound => Unanswered::NoHold,
        io::ErrorKind::ConnectionRefused => {
            forget_stale(socket);
            Unanswered::NoHold
        }
        _ => Unanswered::Io(err),
    })?;
    let me = rustix::process::getuid().as_raw();
    let cred =
        rustix::net::sockopt::socket_peercred(&stream).map_err(|err| Unanswered::Io(err.into()))?;
    if cred.uid.as_raw() != me {
        return Err(Unanswered::Refused(format!(
            "{} belongs to uid {}, not to us",
            socket.display(),
            cred.uid.as_raw()
        )));
    }
    let line = match request {
        Request::Paths => "paths\n",
        Request::Release => "release\n",
        Request::Lease => follow::REQUEST,
    };
    stream.write_all(line.as_bytes()).map_err(Unanswered::Io)?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .map_err(Unanswered::Io)?;
    if answer.is_empty() {
        // The holder ended between our connect and its answer.
        return Err(Unanswered::NoHold);
    }
    Ok(answer)
}

/// Removes a socket nobody listens on (its holder was killed), if it is in
/// our runtime directory: nothing is left there.
fn forget_stale(socket: &Path) {
    let ours = runtime_dir(false).ok();
    if ours.is_some() && socket.parent() == ours.as_deref() {
        let _ = std::fs::remove_file(socket);
    }
}

/// Asks the holder at `socket` to release.
pub fn release(socket: &Path) -> Result<Released, Unanswered> {
    let answer = ask(socket, Request::Release)?;
    Released::from_line(&answer)
        .ok_or_else(|| Unanswered::Refused(format!("unexpected answer {answer:?}")))
}

/// This user's holds of `path` on this host: their sockets.
pub fn holds_of(path: &str) -> Result<Vec<PathBuf>> {
    if !dir_path().exists() {
        return Ok(Vec::new());
    }
    let dir = runtime_dir(false)?;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).context(format!("listing {}", dir.display()))? {
        let socket = entry?.path();
        if socket.extension().is_none_or(|ext| ext != "sock") {
            continue;
        }
        let Ok(answer) = ask(&socket, Request::Paths) else {
            continue;
        };
        let paths: Vec<String> = serde_json::from_str(&answer).unwrap_or_default();
        if paths.iter().any(|held| held == path) {
            found.push(socket);
        }
    }
    Ok(found)
}

/// Where [`runtime_dir`] is, unchecked.
fn dir_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(base) if base.is_absolute() => base.join("zklock"),
        _ => PathBuf::from(format!(
            "/tmp/zklock-{}",
            rustix::process::getuid().as_raw()
        )),
    }
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
