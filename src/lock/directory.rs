//! What a lock directory holds, read from its children, their stats and
//! data: the one parser behind `status`, `list` and `break` (pure; the
//! reads are in `inspect.rs`). Holders and waiters are told apart with the
//! same predicate the acquire loop uses (`recipe::standing`).

use serde::Serialize;
use zklock::zk;

use crate::lock::holder::HolderData;
use crate::lock::recipe::{self, Class, LEASE, LOCK, READ, WRITE};

/// A child of a lock directory as read from the server.
#[derive(Debug, Clone)]
pub struct ChildNode {
    pub name: String,
    pub stat: zk::records::Stat,
    pub data: Vec<u8>,
}

/// Which client made a node, judged from its name and data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Client {
    Zklock,
    /// Curator's names without zklock's data.
    Curator,
    Kazoo,
}

/// How a node takes part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// Exclusive (`-lock-`, kazoo's `__lock__`) or a semaphore's gate.
    Lock,
    Read,
    Write,
    Lease,
}

/// One holder or waiter.
#[derive(Debug, Clone)]
pub struct Entry {
    pub node: ChildNode,
    pub kind: EntryKind,
    pub client: Client,
    pub holder: Option<HolderData>,
    /// When it took the lock (holders) or queued (waiters): server clock, ms.
    pub since: i64,
}

/// What a lock path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathKind {
    /// No contender at all (or the path does not exist).
    #[default]
    Free,
    Exclusive,
    /// Readers and writers (read/write nodes present).
    Shared,
    Semaphore {
        limit: u32,
    },
}

/// A lock path's holders and queue, in order.
#[derive(Debug, Clone, Default)]
pub struct LockView {
    pub kind: PathKind,
    pub holders: Vec<Entry>,
    pub waiting: Vec<Entry>,
}

/// The view of a plain (exclusive or read/write) lock directory.
pub fn plain_lock(children: Vec<ChildNode>) -> LockView {
    let queue = in_queue_order(children, |name| Some(recipe::parse_contender(name)?.seq));
    let class = |node: &ChildNode| Some(recipe::parse_contender(&node.name)?.class);
    let classes: Vec<Class> = queue.iter().filter_map(class).collect();
    let held = recipe::holding(&classes);
    let mut view = LockView::default();
    for ((node, class), held) in queue.into_iter().zip(classes).zip(held) {
        let kind = entry_kind(&node.name, class);
        view.kind = match kind {
            EntryKind::Read | EntryKind::Write => PathKind::Shared,
            _ if view.kind == PathKind::Free => PathKind::Exclusive,
            _ => view.kind,
        };
        let entry = entry(node, kind, held);
        match held {
            true => view.holders.push(entry),
            false => view.waiting.push(entry),
        }
    }
    view
}

/// The view of a semaphore of `limit`: `leases` and the `gate` queue. The
/// first `limit` leases hold; a lease beyond them belongs to the gate holder
/// still waiting for a permit. A gate node whose session also has a lease is
/// that lease's owner passing through and is not shown twice.
pub fn semaphore(limit: u32, leases: Vec<ChildNode>, gate: Vec<ChildNode>) -> LockView {
    let mut leases = in_queue_order(leases, |name| recipe::sequence_after(name, LEASE));
    let waiting_leases = leases.split_off(leases.len().min(limit as usize));
    let sessions: Vec<i64> = leases
        .iter()
        .chain(&waiting_leases)
        .map(|n| n.stat.ephemeral_owner)
        .collect();
    let gate = in_queue_order(gate, |name| recipe::sequence_after(name, LOCK))
        .into_iter()
        .filter(|n| !sessions.contains(&n.stat.ephemeral_owner));
    LockView {
        kind: PathKind::Semaphore { limit },
        holders: leases
            .into_iter()
            .map(|n| entry(n, EntryKind::Lease, true))
            .collect(),
        waiting: waiting_leases
            .into_iter()
            .map(|n| entry(n, EntryKind::Lease, false))
            .chain(gate.map(|n| entry(n, EntryKind::Lock, false)))
            .collect(),
    }
}

/// The nodes whose names `seq` finds a sequence suffix in, in queue order.
fn in_queue_order(mut nodes: Vec<ChildNode>, seq: impl Fn(&str) -> Option<&str>) -> Vec<ChildNode> {
    nodes.retain(|node| seq(&node.name).is_some());
    nodes.sort_by(|a, b| {
        recipe::seq_order(
            seq(&a.name).unwrap_or_default(),
            seq(&b.name).unwrap_or_default(),
        )
    });
    nodes
}

fn entry_kind(name: &str, class: Class) -> EntryKind {
    if name.contains(READ) || class == Class::Reader {
        EntryKind::Read
    } else if name.contains(WRITE) {
        EntryKind::Write
    } else {
        EntryKind::Lock
    }
}

fn entry(node: ChildNode, kind: EntryKind, held: bool) -> Entry {
    let holder = HolderData::parse(&node.data);
    let client = match (node.name.starts_with("_c_"), holder.is_some()) {
        (false, _) => Client::Kazoo,
        (true, true) => Client::Zklock,
        (true, false) => Client::Curator,
    };
    // Only a zklock holder records when it took the lock; for the others
    // the best known time is when they queued.
    let acquired = held && holder.as_ref().and_then(|h| h.acquired) == Some(true);
    let since = match acquired {
        true => node.stat.mtime,
        false => node.stat.ctime,
    };
    Entry {
        node,
        kind,
        client,
        holder,
        since,
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A child created at `czxid` seconds, its data written half a second
    /// later.
    pub fn node(name: &str, czxid: i64, owner: i64, data: &str) -> ChildNode {
        ChildNode {
            name: name.into(),
            stat: zk::records::Stat {
                czxid,
                mzxid: czxid,
                pzxid: czxid,
                ctime: czxid * 1000,
                mtime: czxid * 1000 + 500,
                version: 0,
                cversion: 0,
                aversion: 0,
                ephemeral_owner: owner,
                data_length: data.len() as i32,
                num_children: 0,
            },
            data: data.as_bytes().to_vec(),
        }
    }

    fn names(entries: &[Entry]) -> Vec<&str> {
        entries.iter().map(|e| e.node.name.as_str()).collect()
    }

    const OURS: &str = r#"{"host":"web1","pid":7,"user":"deploy","command":"./job.sh","version":"0.1.0","acquired":true}"#;

    #[test]
    fn exclusive_holder_and_queue_in_order() {
        let view = plain_lock(vec![
            node("_c_b-lock-0000000002", 2, 20, "{}"),
            node("unrelated", 9, 0, ""),
            node("_c_a-lock-0000000001", 1, 10, OURS),
            node("0f3a__lock__0000000003", 3, 30, "10.0.0.7"),
        ]);
        assert_eq!(view.kind, PathKind::Exclusive);
        assert_eq!(names(&view.holders), ["_c_a-lock-0000000001"]);
        assert_eq!(
            names(&view.waiting),
            ["_c_b-lock-0000000002", "0f3a__lock__0000000003"]
        );
        assert_eq!(view.holders[0].client, Client::Zklock);
        // Acquired: the time of the write that said so.
        assert_eq!(view.holders[0].since, 1500);
        assert_eq!(view.waiting[0].client, Client::Curator);
        assert_eq!(view.waiting[0].since, 2000);
        assert_eq!(view.waiting[1].client, Client::Kazoo);
    }

    /// `status` and `list` show the holder Curator and kazoo agree on after
    /// the counter wrapped: the suffixes in string order.
    #[test]
    fn queue_order_after_the_wrap() {
        let view = plain_lock(vec![
            node("_c_a-lock-2147483647", 1, 10, "{}"),
            node("_c_b-lock--2147483648", 2, 20, "{}"),
            node("_c_c-lock--2147483647", 3, 30, "{}"),
        ]);
        assert_eq!(names(&view.holders), ["_c_c-lock--2147483647"]);
        assert_eq!(
            names(&view.waiting),
            ["_c_b-lock--2147483648", "_c_a-lock-2147483647"]
        );
    }

    #[test]
    fn readers_share_and_a_writer_waits() {
        let view = plain_lock(vec![
            node("_c_r1-__READ__0000000001", 1, 10, OURS),
            node("_c_r2-__READ__0000000002", 2, 20, OURS),
            node("_c_w-__WRIT__0000000003", 3, 30, OURS),
            node("x__rlock__0000000004", 4, 40, ""),
        ]);
        assert_eq!(view.kind, PathKind::Shared);
        assert_eq!(view.holders.len(), 2);
        assert!(view.holders.iter().all(|h| h.kind == EntryKind::Read));
        assert_eq!(view.waiting[0].kind, EntryKind::Write);
        assert_eq!(view.waiting[1].kind, EntryKind::Read);
        assert_eq!(view.waiting[1].client, Client::Kazoo);
    }

    #[test]
    fn empty_directory_is_free() {
        let view = plain_lock(vec![node("leftover", 1, 0, "")]);
        assert_eq!(view.kind, PathKind::Free);
    }

    #[test]
    fn semaphore_holders_pending_lease_and_gate_queue() {
        let view = semaphore(
            2,
            vec![
                node("_c_c-lease-0000000003", 3, 30, OURS),
                node("_c_a-lease-0000000001", 1, 10, OURS),
                node("_c_b-lease-0000000002", 2, 20, OURS),
            ],
            vec![
                // The gate holder (session 30) waiting with its lease.
                node("_c_g-lock-0000000005", 5, 30, OURS),
                node("_c_h-lock-0000000006", 6, 60, OURS),
            ],
        );
        assert_eq!(view.kind, PathKind::Semaphore { limit: 2 });
        assert_eq!(
            names(&view.holders),
            ["_c_a-lease-0000000001", "_c_b-lease-0000000002"]
        );
        assert_eq!(
            names(&view.waiting),
            ["_c_c-lease-0000000003", "_c_h-lock-0000000006"]
        );
    }
}
