//! A nested run follows the lease of the hold it runs under (docs/design.md,
//! "Holds"): a step in a shell of its own (a CI step of an
//! `--until-released` hold) is not among the holder's steps, so the holder
//! tells it, on its control socket, each lease deadline it has (as
//! CLOCK_BOOTTIME nanoseconds, `zk::clock`: the socket is on the same host) and when
//! the lock is lost. The nested run stops its command by the earlier of
//! its own lease and the hold's, and its keeper does so if it is frozen;
//! the holder keeps its nodes until its followers have hung up.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use tokio::net::UnixStream;
use zklock::zk::clock::Moment;

use crate::exit::{Exit, Failure};

/// What a holder tells its followers, one line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Told {
    /// First: the session that owns the hold's nodes (a nested run follows
    /// only the hold whose nodes it runs under).
    Owner(i64),
    /// Second: the hold's `--kill-after`, within which its steps are KILLed
    /// once its lock is lost, and so must a nested run's command be (a
    /// holder of before sends none).
    KillAfter(Duration),
    /// The lease deadline moved (later, or earlier on a shorter session).
    Deadline(Moment),
    /// The lock is lost (or released): stop.
    Lost(String),
}

impl Told {
    pub(crate) fn to_line(&self) -> String {
        match self {
            Told::Owner(session) => format!("owner {session}\n"),
            Told::KillAfter(k) => format!("kill-after {}\n", k.as_nanos()),
            Told::Deadline(at) => format!("deadline-boot {}\n", at.as_nanos()),
            Told::Lost(why) => format!("lost {}\n", why.replace(['\n', '\r'], " ")),
        }
    }

    pub(crate) fn from_line(line: &str) -> Option<Told> {
        let line = line.trim_end_matches('\n');
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "owner" => Some(Told::Owner(rest.parse().ok()?)),
            "kill-after" => Some(Told::KillAfter(Duration::from_nanos(rest.parse().ok()?))),
            // Named for its clock: a zklock of before, which sent
            // CLOCK_MONOTONIC's as "deadline", is not understood (a loss).
            "deadline-boot" => Some(Told::Deadline(Moment::from_nanos(rest.parse().ok()?))),
            "lost" => Some(Told::Lost(rest.to_owned())),
            _ => None,
        }
    }
}

/// The request line a follower sends.
pub(crate) const REQUEST: &str = "lease\n";

/// A follower's end of the holder's socket: hung up when dropped.
pub(crate) struct Follower {
    stream: UnixStream,
    /// The hold's kill-after ([`Told::KillAfter`]), if it said.
    kill_after: Option<Duration>,
    /// What was read past the last whole line.
    pending: Vec<u8>,
}

impl Follower {
    /// Asks the holder at `socket` (of our own user) for its lease; None
    /// when its nodes are not those of session `owner`, the one we run
    /// under (a run between it and us holds other paths).
    /// A hold found lost already, or whose holder is gone, is `gave_up`
    /// (`-E`'s code): the lock cannot be had under it.
    pub(crate) fn ask(socket: &Path, owner: i64, gave_up: Exit) -> Result<Option<Follower>> {
        let context = || format!("following the hold at {}", socket.display());
        // The lock cannot be had under a hold whose holder cannot tell us
        // its lease.
        let cannot_follow = |why: &str| -> anyhow::Error {
            let said = format!(
                "the holder of the enclosing hold {why} on {}",
                socket.display()
            );
            Failure::new(gave_up, said).into()
        };
        let mut stream = match std::os::unix::net::UnixStream::connect(socket) {
            Ok(stream) => stream,
            // Our claim was confirmed: the node is there, its holder not
            // (killed), so nothing would stop the step when the session
            // expires. The lock cannot be had under it.
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                ) =>
            {
                return Err(cannot_follow("is gone (killed?): nothing listens"));
            }
            Err(err) => return Err(err).with_context(context),
        };
        let me = rustix::process::getuid().as_raw();
        let cred = rustix::net::sockopt::socket_peercred(&stream).with_context(context)?;
        if cred.uid.as_raw() != me {
            bail!("{} is not a hold of this user", socket.display());
        }
        stream.write_all(REQUEST.as_bytes()).with_context(context)?;
        // The first line comes at once from a holder that is not frozen.
        stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .with_context(context)?;
        let mut read_line = || -> Result<Option<Told>> {
            let mut line = Vec::new();
            let mut byte = [0u8];
            while line.last() != Some(&b'\n') && line.len() < 256 {
                match std::io::Read::read(&mut stream, &mut byte) {
                    Ok(1) => line.push(byte[0]),
                    // Stopped, or ending: nothing would tell us its lease.
                    _ => return Err(cannot_follow("does not answer (stopped?)")),
                }
            }
            Ok(Told::from_line(&String::from_utf8_lossy(&line)))
        };
        if read_line()? != Some(Told::Owner(owner)) {
            return Ok(None);
        }
        let mut next = read_line()?;
        let kill_after = match next {
            Some(Told::KillAfter(k)) => {
                next = read_line()?;
                Some(k)
            }
            _ => None,
        };
        let pending = match next {
            Some(Told::Lost(why)) => {
                return Err(Failure::new(
                    gave_up,
                    format!("the enclosing hold's lock is lost: {why}"),
                )
                .into());
            }
            Some(told) => told.to_line().into_bytes(),
            None => Vec::new(),
        };
        stream.set_nonblocking(true).with_context(context)?;
        Ok(Some(Follower {
            stream: UnixStream::from_std(stream).with_context(context)?,
            kill_after,
            pending,
        }))
    }

    /// The hold's kill-after, if it said.
    pub(crate) fn kill_after(&self) -> Option<Duration> {
        self.kill_after
    }

    /// The next thing told; a holder gone (or garbled) is a loss.
    pub(crate) async fn next(&mut self) -> Told {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                return Told::from_line(&line)
                    .unwrap_or_else(|| Told::Lost(format!("the holder said {line:?}")));
            }
            let mut chunk = [0u8; 256];
            let read = match self.stream.readable().await {
                Ok(()) => self.stream.try_read(&mut chunk),
                Err(err) => Err(err),
            };
            match read {
                Ok(0) => return Told::Lost("the holder of the enclosing hold is gone".into()),
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return Told::Lost("the holder of the enclosing hold is gone".into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let at = Moment::now() + Duration::from_secs(3);
        assert_eq!(
            Told::from_line(&Told::Deadline(at).to_line()),
            Some(Told::Deadline(at))
        );
        // A CLOCK_MONOTONIC deadline of an older zklock is not one.
        assert_eq!(Told::from_line("deadline 5000000000\n"), None);
        assert_eq!(
            Told::from_line(&Told::Lost("a\nb".into()).to_line()),
            Some(Told::Lost("a b".into()))
        );
        assert_eq!(Told::from_line("nonsense"), None);
        assert_eq!(
            Told::from_line(&Told::Owner(0x1000a).to_line()),
            Some(Told::Owner(0x1000a))
        );
        let k = Duration::from_millis(1640);
        assert_eq!(
            Told::from_line(&Told::KillAfter(k).to_line()),
            Some(Told::KillAfter(k))
        );
    }
}
