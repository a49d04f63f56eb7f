//! The lock recipe's pure parts (docs/design.md, "The lock recipe"): node
//! names and paths, ordering and the "who goes next" predicate. `queue.rs`
//! and `semaphore.rs` run them against ZooKeeper.

use std::cmp::Ordering;

/// What a run asks for at one lock path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    /// Curator `InterProcessMutex`: `_c_<uuid>-lock-<seq>`.
    Exclusive,
    /// Curator read lock: `_c_<uuid>-__READ__<seq>`.
    Read,
    /// Curator write lock: `_c_<uuid>-__WRIT__<seq>`.
    Write,
    /// At most N holders: a gate lock under `locks/`, leases under `leases/`.
    Semaphore(u32),
}

/// Node name markers: what a contender's name is recognised by, just before
/// its sequence number. Curator names a protected node `_c_<uuid>-` and the
/// recipe's name (`lock-`, `__READ__`, `__WRIT__`, `lease-`): see
/// [`node_prefix`]. Earlier zklock builds, which may still be running,
/// created read and write nodes without that hyphen
/// (`_c_<uuid>__READ__<seq>`): the markers match both forms.
pub const LOCK: &str = "-lock-";
pub const READ: &str = "__READ__";
pub const WRITE: &str = "__WRIT__";
pub const LEASE: &str = "-lease-";
/// Children of a semaphore's directory.
pub const SEMAPHORE_GATE: &str = "locks";
pub const SEMAPHORE_LEASES: &str = "leases";

/// How a contender's node constrains the nodes after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Excludes everyone after it (exclusive and write nodes).
    Writer,
    /// Excludes only writers after it.
    Reader,
}

/// Every node name we recognize as a contender: ours (Curator's names) and
/// kazoo's `Lock`/`WriteLock` (`__lock__`) and `ReadLock` (`__rlock__`).
const CONTENDERS: [(&str, Class); 5] = [
    (LOCK, Class::Writer),
    (WRITE, Class::Writer),
    (READ, Class::Reader),
    ("__lock__", Class::Writer),
    ("__rlock__", Class::Reader),
];

/// The name prefix of a node we create, as Curator names it
/// (`_c_<uuid>-lock-`, `_c_<uuid>-__READ__`); the server appends the
/// sequence. The uuid lets us find our node again when a create's reply is
/// lost.
pub fn node_prefix(marker: &str, uuid: &str) -> String {
    // `-lock-` and `-lease-` carry Curator's hyphen already.
    let hyphen = if marker.starts_with('-') { "" } else { "-" };
    format!("_c_{uuid}{hyphen}{marker}")
}

/// The path of the child `name` of the node at `dir`.
pub fn child(dir: &str, name: &str) -> String {
    match dir {
        "/" => format!("/{name}"),
        _ => format!("{dir}/{name}"),
    }
}

/// A child of a lock directory that takes part in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contender<'a> {
    pub name: &'a str,
    pub class: Class,
    /// The sequence suffix, as ZooKeeper wrote it.
    pub seq: &'a str,
}

/// Parses a child name; `None` for names that are not lock nodes (they are
/// ignored, so unrelated children cannot block the lock).
pub fn parse_contender(name: &str) -> Option<Contender<'_>> {
    CONTENDERS.iter().find_map(|&(marker, class)| {
        let seq = sequence_after(name, marker)?;
        Some(Contender { name, class, seq })
    })
}

/// The sequence suffix after the last `marker` in `name`, if it is one.
pub fn sequence_after<'a>(name: &'a str, marker: &str) -> Option<&'a str> {
    parse_sequence(&name[name.rfind(marker)? + marker.len()..])
}

/// `suffix` if it is a sequence number as ZooKeeper writes it: `%010d` of a
/// signed 32-bit counter, which wraps to negative numbers (`-2147483648`)
/// after 2^31 creates under one parent.
pub fn parse_sequence(suffix: &str) -> Option<&str> {
    let seq: i32 = suffix.parse().ok()?;
    (format!("{seq:010}") == suffix).then_some(suffix)
}

/// Queue order of two sequence suffixes: as strings, exactly as Curator and
/// kazoo order them, so that all clients agree on the holder even after the
/// counter wraps (docs/design.md, "Queue order").
pub fn seq_order(a: &str, b: &str) -> Ordering {
    a.cmp(b)
}

/// Whether a preceding node of class `before` keeps a node of class `me` waiting.
fn excludes(before: Class, me: Class) -> bool {
    before == Class::Writer || me == Class::Writer
}

/// Where a contender stands in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing<'a> {
    /// Nothing that excludes us precedes our node.
    Held,
    /// Wait for `predecessor` to go; `ahead` contenders that exclude us
    /// precede us. `first` is the queue's head, which holds the lock
    /// (nothing precedes it): for a reader, not always one that excludes
    /// it (a reader holds, a writer waits behind it, we behind that).
    Waiting {
        predecessor: &'a str,
        ahead: usize,
        first: &'a str,
    },
    /// Our node is not among the children: our session or node was lost.
    Missing,
}

/// Decides our standing from a listing of the lock directory. We watch only
/// the nearest preceding node that excludes us, so a release wakes exactly
/// the next waiter (two or more only when readers follow a writer).
pub fn standing<'a>(children: &'a [String], me: &str) -> Standing<'a> {
    let Some(mine) = children
        .iter()
        .find(|c| c.as_str() == me)
        .and_then(|c| parse_contender(c))
    else {
        return Standing::Missing;
    };
    let mut ahead = 0;
    let mut nearest: Option<Contender<'a>> = None;
    let mut first: Option<Contender<'a>> = None;
    let preceding = children
        .iter()
        .filter_map(|c| parse_contender(c))
        .filter(|other| {
            other.name != mine.name && seq_order(other.seq, mine.seq) == Ordering::Less
        });
    for other in preceding {
        if first.is_none_or(|f| seq_order(other.seq, f.seq) == Ordering::Less) {
            first = Some(other);
        }
        if !excludes(other.class, mine.class) {
            continue;
        }
        ahead += 1;
        if nearest.is_none_or(|n| seq_order(other.seq, n.seq) == Ordering::Greater) {
            nearest = Some(other);
        }
    }
    match (nearest, first) {
        (Some(predecessor), Some(first)) => Standing::Waiting {
            predecessor: predecessor.name,
            ahead,
            first: first.name,
        },
        _ => Standing::Held,
    }
}

/// For contenders sorted in queue order, which of them hold: the same rule
/// as [`standing`] (nothing that excludes a node precedes it), in one pass
/// instead of one listing scan per node.
pub fn holding(queue: &[Class]) -> Vec<bool> {
    let mut any_before = false;
    let mut writer_before = false;
    queue
        .iter()
        .map(|&class| {
            let excluded = match class {
                Class::Writer => any_before,
                Class::Reader => writer_before,
            };
            any_before = true;
            writer_before |= class == Class::Writer;
            !excluded
        })
        .collect()
}

/// How many contenders precede `me` in the queue without holding the lock
/// (by [`holding`]): the runs waiting ahead of us, whatever they wait for.
/// 0 when `me` is not among the children.
pub fn waiting_ahead(children: &[String], me: &str) -> usize {
    let Some(mine) = parse_contender(me).filter(|_| children.iter().any(|c| c == me)) else {
        return 0;
    };
    let mut ahead: Vec<Contender<'_>> = children
        .iter()
        .filter_map(|c| parse_contender(c))
        .filter(|other| seq_order(other.seq, mine.seq) == Ordering::Less)
        .collect();
    ahead.sort_by(|a, b| seq_order(a.seq, b.seq));
    let classes: Vec<Class> = ahead.iter().map(|c| c.class).collect();
    holding(&classes).into_iter().filter(|held| !held).count()
}

/// Whether a directory's children say it is a semaphore (zklock's or
/// Curator's `InterProcessSemaphoreV2` layout).
pub fn looks_like_semaphore(children: &[String]) -> bool {
    children
        .iter()
        .any(|c| c == SEMAPHORE_GATE || c == SEMAPHORE_LEASES)
}

/// The data of a semaphore's directory: its limit, as decimal text.
pub fn encode_limit(limit: u32) -> Vec<u8> {
    limit.to_string().into_bytes()
}

pub fn decode_limit(data: &[u8]) -> Option<u32> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

/// Paths in the order they must be taken: bytewise, so that two runs asking
/// for overlapping sets cannot deadlock.
pub fn acquisition_order<'a>(paths: &[&'a str]) -> Vec<&'a str> {
    let mut sorted = paths.to_vec();
    sorted.sort_unstable();
    sorted
}

#[cfg(test)]
mod tests;
