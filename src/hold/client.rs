//! The asking end of a hold's control channel (`control.rs`): `zklock
//! release`, and `zklock hold` letting go of a hold whose variables it
//! could not print, ask a holder over its socket within a deadline, and
//! check that the socket is their own user's.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::control::{Held, Released, Request};
use super::owner::Owner;
use super::runtime;

use crate::run::nested::follow;

/// Why a client got no answer.
#[derive(Debug)]
pub enum Unanswered {
    /// No holder listens there (released already, or its holder ended).
    NoHold,
    /// A socket its holder left behind, nobody listening on it: the holder
    /// was killed (one that ends removes its socket). The hold ended
    /// without a release; the keeper stopped its steps.
    Killed,
    /// The socket belongs to another user, or the answer was garbled.
    Refused(String),
    /// The holder took the connection but did not answer within this
    /// deadline (stopped, or stuck).
    NoAnswer(Duration),
    Io(io::Error),
}

/// How long a holder may take to answer `Paths`: it answers at once, from
/// what it knows.
pub const PATHS_DEADLINE: Duration = Duration::from_secs(2);

/// How long a holder may take to answer `Release`: time for a read, then
/// the deletes and the session's close (bounded by the holder), while
/// ZooKeeper answers slowly.
pub const RELEASE_DEADLINE: Duration = Duration::from_secs(30);

/// The client's end: asks the holder at `socket` and reads its one-line
/// answer (for a release, once ZooKeeper answered the delete) within
/// `deadline`.
fn ask(socket: &Path, request: Request, deadline: Duration) -> Result<String, Unanswered> {
    let until = Instant::now() + deadline;
    let stream = connect(socket, until).map_err(|err| match err.kind() {
        io::ErrorKind::NotFound => Unanswered::NoHold,
        io::ErrorKind::ConnectionRefused => {
            forget_stale(socket);
            Unanswered::Killed
        }
        io::ErrorKind::WouldBlock => Unanswered::NoAnswer(deadline),
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
    let timed_out = |err: io::Error| match err.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Unanswered::NoAnswer(deadline),
        _ => Unanswered::Io(err),
    };
    // The request is a few bytes: its write never waits for the holder.
    (&stream)
        .write_all(line.as_bytes())
        .map_err(Unanswered::Io)?;
    // What is left of the deadline (never zero: that would be none).
    let left = until.saturating_duration_since(Instant::now());
    stream
        .set_read_timeout(Some(left.max(Duration::from_millis(1))))
        .map_err(Unanswered::Io)?;
    let mut answer = String::new();
    BufReader::new(&stream)
        .read_line(&mut answer)
        .map_err(timed_out)?;
    if answer.is_empty() {
        // The holder ended between our connect and its answer.
        return Err(Unanswered::NoHold);
    }
    Ok(answer)
}

/// Connects by `until`: a holder that stopped accepting has a full
/// backlog, and a blocking connect would wait for it for ever (a
/// non-blocking one says EAGAIN, and is tried again).
fn connect(socket: &Path, until: Instant) -> io::Result<UnixStream> {
    let address = rustix::net::SocketAddrUnix::new(socket)?;
    loop {
        let fd = rustix::net::socket_with(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
            None,
        )?;
        match rustix::net::connect(&fd, &address) {
            Ok(()) => {
                let stream = UnixStream::from(fd);
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(rustix::io::Errno::AGAIN) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(err) => return Err(err.into()),
        }
    }
}

/// Removes a socket nobody listens on (its holder was killed), if it is in
/// a runtime directory of ours: nothing is left there.
fn forget_stale(socket: &Path) {
    if socket.parent().is_some_and(runtime::is_ours) {
        let _ = std::fs::remove_file(socket);
    }
}

/// Asks the holder at `socket` to release, within `deadline`.
pub fn release(socket: &Path, deadline: Duration) -> Result<Released, Unanswered> {
    let answer = ask(socket, Request::Release, deadline)?;
    Released::from_line(&answer)
        .ok_or_else(|| Unanswered::Refused(format!("unexpected answer {answer:?}")))
}

/// This user's holds of a path on this host, by owner.
#[derive(Debug, Default)]
pub struct Found {
    /// Those of `owner`: their sockets.
    pub ours: Vec<PathBuf>,
    /// How many are another owner's.
    pub others: usize,
    /// Holders that did not answer within [`PATHS_DEADLINE`]: their
    /// sockets.
    pub unanswered: Vec<PathBuf>,
}

/// This user's holds of `path` on this host, asking every socket of our
/// runtime directories at once: a stopped holder costs [`PATHS_DEADLINE`]
/// once.
pub fn holds_of(path: &str, owner: &Owner) -> Result<Found> {
    let mut sockets = Vec::new();
    for dir in runtime::searched() {
        for entry in std::fs::read_dir(&dir).context(format!("listing {}", dir.display()))? {
            let socket = entry?.path();
            if socket.extension().is_some_and(|ext| ext == "sock") {
                sockets.push(socket);
            }
        }
    }
    let answers: Vec<(PathBuf, Result<String, Unanswered>)> = std::thread::scope(|scope| {
        let asking: Vec<_> = (sockets.into_iter())
            .map(|socket| {
                scope.spawn(move || {
                    let answer = ask(&socket, Request::Paths, PATHS_DEADLINE);
                    (socket, answer)
                })
            })
            .collect();
        asking
            .into_iter()
            .filter_map(|asked| asked.join().ok())
            .collect()
    });
    let mut found = Found::default();
    for (socket, answer) in answers {
        let held = match answer {
            Ok(answer) => serde_json::from_str::<Held>(&answer).ok(),
            Err(Unanswered::NoAnswer(_)) => {
                found.unanswered.push(socket);
                continue;
            }
            Err(_) => None,
        };
        let Some(held) = held.filter(|held| held.paths.iter().any(|p| p == path)) else {
            continue;
        };
        match held.owner == owner.as_str() {
            true => found.ours.push(socket),
            false => found.others += 1,
        }
    }
    Ok(found)
}
