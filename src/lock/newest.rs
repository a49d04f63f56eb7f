//! The newest `--supersede` run seen on a lock (docs/design.md,
//! "Superseding waiters"): a persistent node `PATH/zklock.supersede` beside
//! the lock, holding that run's node data (holder.rs) with its age in
//! `first_czxid`. It outlives the runs, so that a run that lost its place
//! learns of a newer run that queued, and maybe held, meanwhile. It is only
//! ever raised (versioned writes), never to an older run.

use anyhow::Result;
use zklock::zk;

use crate::lock::holder::{HolderData, Seen};
use crate::lock::recipe;
use crate::lock::record::rewrite;

/// The node's name under the lock path: no recipe takes it for a contender.
pub const NEWEST: &str = "zklock.supersede";

/// The node's path for a lock path.
pub fn newest_path(lock: &str) -> String {
    recipe::child(lock, NEWEST)
}

/// The node as read.
pub struct Trace {
    /// Its data and version; None when there is no such node yet.
    known: Option<(Vec<u8>, i32)>,
    /// When it was last written, ms since the epoch (server clock).
    mtime: i64,
}

impl Trace {
    /// From the answer to a read of the node; None if that read failed
    /// (nothing is known).
    pub fn from_read(
        answer: Result<(Vec<u8>, zk::records::Stat), zk::records::Error>,
    ) -> Option<Trace> {
        match answer {
            Ok((data, stat)) => Some(Trace {
                known: Some((data, stat.version)),
                mtime: stat.mtime,
            }),
            Err(zk::records::Error::NoNode) => Some(Trace {
                known: None,
                mtime: 0,
            }),
            Err(_) => None,
        }
    }

    /// The run it names: its age, and its node data dated by the write
    /// that recorded it (about when it queued), for people.
    pub fn run(&self) -> Option<(i64, Seen)> {
        let (data, _) = self.known.as_ref()?;
        let age = recorded_age(data)?;
        let seen = Seen {
            data: data.clone(),
            ctime: self.mtime,
            mtime: self.mtime,
        };
        Some((age, seen))
    }
}

/// Reads the node of the lock at `lock`.
pub async fn read(client: &zk::client::Client, lock: &str) -> Option<Trace> {
    Trace::from_read(
        client
            .call(|b| b.get_data(&newest_path(lock), false))
            .await
            .map(|d| (d.data, d.stat)),
    )
}

/// The age of the run that data names.
fn recorded_age(data: &[u8]) -> Option<i64> {
    HolderData::parse(data)?.first_czxid
}

/// Records our run (`own`, aged `age`) unless the node names a run as old
/// or newer; `trace` is the node as read, if it was. True if it names a
/// newer run.
pub async fn raise(
    client: &zk::client::Client,
    lock: &str,
    acls: &[zk::records::Acl],
    trace: Option<&Trace>,
    own: &HolderData,
    age: i64,
) -> Result<bool> {
    let ours = HolderData {
        first_czxid: Some(age),
        ..own.clone()
    }
    .to_bytes();
    let known = trace.and_then(|trace| trace.known.clone());
    let newer = |data: Option<&[u8]>| match data.and_then(recorded_age) {
        // As old: ours (a write whose reply was lost).
        Some(theirs) if theirs >= age => Err(theirs > age),
        _ => Ok(ours.clone()),
    };
    let not_done = "the newest --supersede run is not recorded";
    let written = rewrite(client, &newest_path(lock), acls, known, not_done, newer).await?;
    Ok(written.err() == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::recipe::{SEMAPHORE_GATE, SEMAPHORE_LEASES};
    use crate::lock::record::RECORD;

    #[test]
    fn no_recipe_takes_the_node_for_a_contender() {
        assert_eq!(recipe::parse_contender(NEWEST), None);
        assert!(!recipe::looks_like_semaphore(&[NEWEST.to_owned()]));
        for other in [SEMAPHORE_GATE, SEMAPHORE_LEASES, RECORD] {
            assert_ne!(NEWEST, other);
        }
        // Curator's markers (its mutex matches `lock-`), kazoo's names.
        for marker in ["lock-", "__READ__", "__WRIT__", "__lock__", "__rlock__"] {
            assert!(!NEWEST.contains(marker), "{marker}");
        }
        // Curator sorts a name without its marker as it is: after every
        // sequence number (digits, or `-` past the wrap), so never ahead.
        assert!(NEWEST > "9" && NEWEST > "-");
        assert_eq!(newest_path("/locks/x"), "/locks/x/zklock.supersede");
    }

    #[test]
    fn the_run_named_and_its_age() {
        let mut own = HolderData::ours(&["./deploy.sh".into()], None);
        own.supersede = Some(true);
        // Written at 1,795,341,600.5 s.
        let stat = || crate::lock::directory::tests::node("x", 1_795_341_600, 0, "").stat;
        let aged = HolderData {
            first_czxid: Some(42),
            ..own.clone()
        };
        let trace = Trace::from_read(Ok((aged.to_bytes(), stat()))).unwrap();
        let (age, seen) = trace.run().unwrap();
        assert_eq!(age, 42);
        assert_eq!(seen.ctime, 1_795_341_600_500);
        assert_eq!(trace.known.as_ref().map(|k| k.1), Some(0));
        // Data without an age names no run; no node is no run.
        let foreign = Trace::from_read(Ok((own.to_bytes(), stat()))).unwrap();
        assert!(foreign.run().is_none() && foreign.known.is_some());
        let none = Trace::from_read(Err(zk::records::Error::NoNode)).unwrap();
        assert!(none.run().is_none() && none.known.is_none());
        assert!(Trace::from_read(Err(zk::records::Error::ConnectionLoss)).is_none());
    }
}
