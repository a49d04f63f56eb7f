//! The one owner of a session's end: our nodes are registered as they are
//! created ([`OwnedNodes`]), and [`Opened::scope`] deletes them and ends the
//! session on every way out of its body, in one place, so that no early
//! return can skip it (ARCHITECTURE.md, "session/").

use std::cell::RefCell;
use std::time::Duration;

use tokio::time::Instant;
use zklock::zk::burst::{Burst, Pending};
use zklock::zk::records::Error;

use super::{Losses, Session, connection_timeout_for, is_connection_loss};

/// How long to wait for the server to confirm the end of the session (which
/// deletes our ephemerals, so the next waiter starts at once).
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// A node of ours, once the server has it.
#[derive(Debug, Clone)]
pub struct Node {
    /// Full path (under the chroot, as clients of the same `-z` see it).
    pub path: String,
    /// The node's czxid: strictly increasing across successive holders.
    pub czxid: i64,
}

impl Node {
    pub fn name(&self) -> &str {
        self.path
            .rsplit_once('/')
            .map_or(&self.path, |(_, name)| name)
    }
}

/// Our nodes in a session, in the order they were created: added where a
/// create's answer arrives (or a lost create is found again by our name,
/// lock/nodes.rs), removed when we delete one on purpose; deleted when the
/// session ends (see [`Opened::scope`]).
#[derive(Default)]
pub struct OwnedNodes(RefCell<Vec<Node>>);

impl OwnedNodes {
    pub fn add(&self, node: &Node) {
        self.0.borrow_mut().push(node.clone());
    }

    pub fn remove(&self, path: &str) {
        self.0.borrow_mut().retain(|node| node.path != path);
    }

    /// The first of our nodes still there.
    pub fn first(&self) -> Option<Node> {
        self.0.borrow().first().cloned()
    }
}

/// A session just opened, reached only through [`Opened::scope`]: no
/// request is made in a session that its scope does not close.
#[must_use = "a session is used, and closed, in its scope"]
pub struct Opened(pub(super) Session);

impl Opened {
    pub fn id(&self) -> i64 {
        self.0.id()
    }

    /// The session timeout the ensemble granted.
    pub fn timeout(&self) -> Duration {
        self.0.timeout()
    }

    /// The member (`name:port`) the session was opened on.
    pub fn member(&self) -> &str {
        self.0.client.member()
    }

    /// Runs `body` with the session, then ends it, whichever way the body
    /// returned: sends closeSession, which deletes our nodes with the
    /// session (unless [`Session::release`] already sent their deletes and
    /// the close), and awaits the answers, bounded. The only place a
    /// session is closed.
    pub async fn scope<T>(self, body: impl AsyncFnOnce(&Session) -> T) -> (T, Closed) {
        let Opened(session) = self;
        let value = body(&session).await;
        (value, session.close().await)
    }
}

/// Deletes of our nodes already sent, their answers still to come (see
/// [`Session::release`]).
pub(super) struct Release {
    nodes: Vec<String>,
    deleted: Vec<Pending<()>>,
    closed: Option<Pending<()>>,
    /// Our nodes go with closeSession alone: its answer confirms them.
    by_close: bool,
}

/// How a session ended (see [`Opened::scope`]).
pub struct Closed {
    /// The server confirmed our nodes gone: deleted, or the session expired.
    pub confirmed: bool,
    /// The release found the lock already lost (docs/design.md, "Session
    /// and lease rules"): the session expired, or a node of ours gone
    /// before its delete; why.
    pub lost: Option<String>,
    /// The end was over by the time set with [`Session::end_by`], if any.
    pub in_time: bool,
    /// The session timeout the ensemble granted: unconfirmed, our nodes go
    /// when the session expires, within it.
    pub timeout: Duration,
}

impl Session {
    /// Our nodes in this session.
    pub fn owned(&self) -> &OwnedNodes {
        &self.owned
    }

    /// Sends the deletes of our nodes (last first) and closeSession right
    /// behind them, in one write, without waiting for the answers: the end
    /// of [`Opened::scope`] awaits them. Nothing goes ahead of them: a
    /// lease's watches are dropped locally, without a request. Once only.
    /// For a holder: a node of ours found gone by its delete is a lock
    /// lost before the release ([`Closed::lost`]).
    pub fn release(&self) {
        self.send_release(true);
    }

    /// `deletes`: each node deleted on its own ahead of closeSession, so
    /// that a node already gone is known; without, closeSession alone
    /// deletes them, in the same transaction (half the server's writes,
    /// for a session that never held the lock: a fleet's skipped hosts).
    fn send_release(&self, deletes: bool) {
        let mut released = self.released.borrow_mut();
        if released.is_some() {
            return;
        }
        let nodes: Vec<String> = match deletes {
            true => (self.owned.0.borrow().iter().rev())
                .map(|node| node.path.clone())
                .collect(),
            false => Vec::new(),
        };
        let by_close = !deletes && self.owned.first().is_some();
        let mut burst = Burst::default();
        let deleted = nodes.iter().map(|node| burst.delete(node, -1)).collect();
        let closed = Some(burst.close());
        self.client.send(burst);
        *released = Some(Release {
            nodes,
            deleted,
            closed,
            by_close,
        });
    }

    /// Bounds the session's end to `at`: after a deadline, "on time" is
    /// the point, and our nodes go with the session anyway.
    pub fn end_by(&self, at: Instant) {
        self.end_by.set(Some(at));
    }

    async fn close(self) -> Closed {
        // Not released by the body: no lock held (or no loss to find),
        // closeSession alone.
        self.send_release(false);
        let timeout = self.timeout();
        let release = self.released.take().expect("sent just now");
        let end_by = self.end_by.get();
        let ending = self.close_after(release);
        let ((confirmed, lost), in_time) = match end_by {
            None => (ending.await, true),
            Some(at) => match tokio::time::timeout_at(at, ending).await {
                Ok(ended) => (ended, true),
                Err(_) => ((false, None), false),
            },
        };
        Closed {
            confirmed,
            lost,
            in_time,
            timeout,
        }
    }

    /// Waits, bounded, for the answers to the release's deletes and its
    /// closeSession; a delete whose answer was lost with the connection is
    /// made again on the session's next connection, with closeSession
    /// behind it (docs/design.md, "Round trips"). True when the server
    /// confirmed our nodes gone: deleted, or the session expired; and why
    /// the lock was lost before the release, if it was.
    async fn close_after(self, release: Release) -> (bool, Option<String>) {
        let Session { client, .. } = self;
        let bound = connection_timeout_for(client.link().borrow().session_timeout).max(CLOSE_WAIT);
        let mut gone_found = None;
        let gone = &mut gone_found;
        let confirming = async {
            let Release {
                mut nodes,
                mut deleted,
                mut closed,
                by_close,
            } = release;
            let mut losses = Losses::default();
            let mut made = Instant::now();
            // Only a first delete's NoNode says the node was gone before:
            // one made again may find its first attempt's work done.
            let mut first = true;
            loop {
                let mut lost = Vec::new();
                for (node, answer) in nodes.into_iter().zip(deleted) {
                    match answer.await {
                        Ok(()) => {}
                        Err(Error::NoNode) if first && gone.is_none() => {
                            *gone = Some(format!("{node} was deleted"));
                        }
                        Err(Error::NoNode) => {}
                        Err(Error::SessionExpired) => {
                            *gone = Some("the ZooKeeper session expired".to_owned());
                            return true;
                        }
                        Err(err) if is_connection_loss(&err) => lost.push(node),
                        Err(_) => return false,
                    }
                }
                first = false;
                let close = match closed.take() {
                    Some(close) => close.await,
                    None => Ok(()),
                };
                let close_lost = matches!(close, Err(Error::ConnectionLoss));
                if by_close {
                    match close {
                        // Expired: our nodes went with the session.
                        Ok(()) | Err(Error::SessionExpired) => return true,
                        Err(err) if is_connection_loss(&err) => {}
                        Err(_) => return false,
                    }
                } else if lost.is_empty() {
                    if close_lost {
                        // Our nodes are gone: end the session on its next
                        // connection, without waiting for it.
                        client.call(|b| b.close());
                    }
                    return true;
                }
                if losses.lost(made).is_err() {
                    return false;
                }
                let mut burst = Burst::default();
                deleted = lost.iter().map(|node| burst.delete(node, -1)).collect();
                closed = Some(burst.close());
                client.send(burst);
                made = Instant::now();
                nodes = lost;
            }
        };
        let confirmed = tokio::time::timeout(bound, confirming)
            .await
            .unwrap_or(false);
        let lost = gone_found.take();
        // The session's end (Closed on closeSession's answer), bounded.
        let mut link = client.link();
        let ended = link.wait_for(|link| link.state.is_over());
        let _ = tokio::time::timeout(CLOSE_WAIT, ended).await;
        (confirmed, lost)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Where a session may be closed: here, and in the protocol's library.
    const OWNERS: &[&str] = &["session/owner.rs", "zk/"];

    fn closes(root: &Path, dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if OWNERS.iter().any(|owner| relative.starts_with(owner)) {
                continue;
            }
            if path.is_dir() {
                closes(root, &path, found);
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (number, line) in text.lines().enumerate() {
                if line.contains(".close(") || line.contains("close_after(") {
                    found.push(format!("{relative}:{}: {}", number + 1, line.trim()));
                }
            }
        }
    }

    /// The rule "every way out deletes our nodes and closes the session" is
    /// held by `Opened::scope` alone: a close written by hand elsewhere is
    /// one an early return could skip.
    #[test]
    fn only_the_scope_closes_a_session() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        closes(&root, &root, &mut found);
        assert!(
            found.is_empty(),
            "sessions are closed by Opened::scope only (src/session/owner.rs):\n{}",
            found.join("\n")
        );
    }
}
