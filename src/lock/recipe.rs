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
    /// precede us, the earliest being `first` (the holder, or next in line).
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
    let blockers = children
        .iter()
        .filter_map(|c| parse_contender(c))
        .filter(|other| {
            other.name != mine.name
                && seq_order(other.seq, mine.seq) == Ordering::Less
                && excludes(other.class, mine.class)
        });
    for other in blockers {
        ahead += 1;
        if nearest.is_none_or(|n| seq_order(other.seq, n.seq) == Ordering::Greater) {
            nearest = Some(other);
        }
        if first.is_none_or(|f| seq_order(other.seq, f.seq) == Ordering::Less) {
            first = Some(other);
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
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn waiting<'a>(predecessor: &'a str, ahead: usize, first: &'a str) -> Standing<'a> {
        Standing::Waiting {
            predecessor,
            ahead,
            first,
        }
    }

    #[test]
    fn prefixes_are_curator_compatible() {
        assert_eq!(node_prefix(LOCK, "u-1"), "_c_u-1-lock-");
        assert_eq!(node_prefix(READ, "u-1"), "_c_u-1-__READ__");
        assert_eq!(node_prefix(WRITE, "u-1"), "_c_u-1-__WRIT__");
        assert_eq!(node_prefix(LEASE, "u-1"), "_c_u-1-lease-");
        // What we create parses back as the contender it is.
        for (marker, class) in [
            (LOCK, Class::Writer),
            (READ, Class::Reader),
            (WRITE, Class::Writer),
        ] {
            let name = format!("{}0000000005", node_prefix(marker, "u-1"));
            let parsed = parse_contender(&name).map(|c| (c.class, c.seq));
            assert_eq!(parsed, Some((class, "0000000005")), "{name}");
        }
    }

    /// Read and write nodes of earlier zklock builds (no hyphen before the
    /// marker) are still contenders, of the same class, in one queue with
    /// Curator's names.
    #[test]
    fn reads_the_older_read_and_write_names() {
        for (name, class) in [
            ("_c_ab__WRIT__0000000007", Class::Writer),
            ("_c_ab__READ__0000000008", Class::Reader),
        ] {
            let parsed = parse_contender(name).map(|c| (c.class, c.seq));
            assert_eq!(parsed, Some((class, &name[name.len() - 10..])), "{name}");
        }
        let children = names(&[
            "_c_old__WRIT__0000000001",
            "_c_new-__READ__0000000002",
            "_c_old__READ__0000000003",
        ]);
        let (writer, reader) = ("_c_old__WRIT__0000000001", "_c_new-__READ__0000000002");
        assert_eq!(standing(&children, writer), Standing::Held);
        assert_eq!(standing(&children, reader), waiting(writer, 1, writer));
        assert_eq!(
            standing(&children, "_c_old__READ__0000000003"),
            waiting(writer, 1, writer)
        );
    }

    #[test]
    fn parses_every_contender_kind() {
        for (name, class, seq) in [
            ("_c_ab-lock-0000000042", Class::Writer, "0000000042"),
            ("_c_ab-__WRIT__0000000007", Class::Writer, "0000000007"),
            ("_c_ab-__READ__0000000008", Class::Reader, "0000000008"),
            ("0f3a__lock__0000000009", Class::Writer, "0000000009"),
            ("0f3a__rlock__0000000010", Class::Reader, "0000000010"),
        ] {
            let parsed = parse_contender(name).map(|c| (c.class, c.seq));
            assert_eq!(parsed, Some((class, seq)), "{name}");
        }
    }

    #[test]
    fn parses_wrapped_sequences() {
        let seq = |n| parse_contender(n).map(|c| c.seq);
        assert_eq!(seq("_c_ab-lock--2147483648"), Some("-2147483648"));
        assert_eq!(seq("_c_ab-lock--000000001"), Some("-000000001"));
        assert_eq!(seq("_c_ab-lock-2147483647"), Some("2147483647"));
        for junk in [
            "locks",
            "leases",
            "_c_ab-lock-",
            "_c_ab-lock-12",
            "_c_ab-lock-00000000001",
            "_c_ab-lock--1",
            "x-lock-000000000a",
        ] {
            assert_eq!(seq(junk), None, "{junk}");
        }
    }

    #[test]
    fn exclusive_queue() {
        let (a, b, c) = (
            "_c_a-lock-0000000001",
            "_c_b-lock-0000000002",
            "_c_c-lock-0000000003",
        );
        let children = names(&[c, a, "unrelated", b]);
        assert_eq!(standing(&children, a), Standing::Held);
        // A waiter watches only its predecessor.
        assert_eq!(standing(&children, c), waiting(b, 2, a));
        assert_eq!(
            standing(&children, "_c_z-lock-0000000009"),
            Standing::Missing
        );
    }

    /// After the wrap, the nodes with negative sequence numbers go first, in
    /// string order (`-2147483647` before `-2147483648`), as they do for a
    /// Curator or kazoo client reading the same children: were we to order
    /// by the numbers' wrap-around, two clients would each believe they hold.
    #[test]
    fn queue_order_across_the_wrap() {
        let (old, new, newer) = (
            "_c_old-lock-2147483647",
            "_c_new-lock--2147483648",
            "_c_newer-lock--2147483647",
        );
        let children = names(&[old, new, newer]);
        assert_eq!(standing(&children, newer), Standing::Held);
        assert_eq!(standing(&children, new), waiting(newer, 1, newer));
        assert_eq!(standing(&children, old), waiting(new, 2, newer));
    }

    #[test]
    fn readers_share_until_a_writer() {
        let [r1, r2, w1, r3, x1] = [
            "_c_r1-__READ__0000000001",
            "_c_r2-__READ__0000000002",
            "_c_w1-__WRIT__0000000003",
            "_c_r3-__READ__0000000004",
            "_c_x1-lock-0000000005",
        ];
        let children = names(&[r1, r2, w1, r3, x1]);
        assert_eq!(standing(&children, r2), Standing::Held);
        // A writer waits for the nearest node of any kind.
        assert_eq!(standing(&children, w1), waiting(r2, 2, r1));
        // A reader after a queued writer waits for it: no writer starvation.
        assert_eq!(standing(&children, r3), waiting(w1, 1, w1));
        // An exclusive node is a writer for everyone.
        assert_eq!(standing(&children, x1), waiting(r3, 4, r1));
    }

    /// Every queue of up to 6 readers and writers: the classes and the names.
    fn every_queue() -> impl Iterator<Item = (Vec<Class>, Vec<String>)> {
        (0..=6u32).flat_map(|len| {
            (0..(1u32 << len)).map(move |bits| {
                let classes: Vec<Class> = (0..len)
                    .map(|i| match bits >> i & 1 {
                        1 => Class::Writer,
                        _ => Class::Reader,
                    })
                    .collect();
                let children = classes
                    .iter()
                    .enumerate()
                    .map(|(i, class)| {
                        let marker = if *class == Class::Writer { WRITE } else { READ };
                        format!("_c_{i}{marker}{:010}", i + 1)
                    })
                    .collect();
                (classes, children)
            })
        })
    }

    #[test]
    fn holding_agrees_with_standing() {
        for (classes, children) in every_queue() {
            let expected: Vec<bool> = children
                .iter()
                .map(|me| standing(&children, me) == Standing::Held)
                .collect();
            assert_eq!(holding(&classes), expected, "{children:?}");
        }
    }

    #[test]
    fn waiting_ahead_counts_only_non_holders() {
        let [w1, r1, r2, x1, r3] = [
            "_c_w1-__WRIT__0000000001",
            "_c_r1-__READ__0000000002",
            "_c_r2-__READ__0000000003",
            "_c_x1-lock-0000000004",
            "_c_r3-__READ__0000000005",
        ];
        // Listed out of order, with an unrelated child.
        let children = names(&[r3, "unrelated", x1, w1, r2, r1]);
        assert_eq!(waiting_ahead(&children, w1), 0);
        assert_eq!(waiting_ahead(&children, r1), 0);
        // Readers queued behind a writer are waiting, even for a reader.
        assert_eq!(waiting_ahead(&children, r2), 1);
        assert_eq!(waiting_ahead(&children, x1), 2);
        assert_eq!(waiting_ahead(&children, r3), 3);
        assert_eq!(waiting_ahead(&children, "_c_z-lock-0000000009"), 0);

        // Readers that hold together do not count; the writer after them does.
        let [r1, r2, w1, me] = [
            "_c_r1-__READ__0000000001",
            "0f3a__rlock__0000000002",
            "0f3a__lock__0000000003",
            "_c_me-lock-0000000004",
        ];
        assert_eq!(waiting_ahead(&names(&[r1, r2, w1, me]), me), 1);

        // Exclusive: everyone after the first waits; across the wrap, in
        // string order (see `queue_order_across_the_wrap`).
        let [a, b, c, d] = [
            "_c_a-lock-2147483646",
            "_c_b-lock-2147483647",
            "_c_c-lock--2147483648",
            "_c_d-lock--2147483647",
        ];
        let children = names(&[a, b, c, d]);
        assert_eq!(waiting_ahead(&children, d), 0);
        assert_eq!(waiting_ahead(&children, c), 0);
        assert_eq!(waiting_ahead(&children, a), 1);
        assert_eq!(waiting_ahead(&children, b), 2);
    }

    /// Whatever holds, the count is the contenders ahead minus the holders
    /// among them, as `holding` decides them.
    #[test]
    fn waiting_ahead_agrees_with_holding() {
        for (classes, children) in every_queue() {
            let held = holding(&classes);
            for (i, me) in children.iter().enumerate() {
                let expected = held[..i].iter().filter(|h| !**h).count();
                assert_eq!(waiting_ahead(&children, me), expected, "{children:?} {me}");
            }
        }
    }

    #[test]
    fn semaphore_directories_are_recognized() {
        assert!(looks_like_semaphore(&names(&["locks", "leases"])));
        assert!(!looks_like_semaphore(&names(&["_c_a-lock-0000000001"])));
        assert_eq!(decode_limit(&encode_limit(3)), Some(3));
        assert_eq!(decode_limit(b""), None);
        assert_eq!(decode_limit(b"x"), None);
    }

    #[test]
    fn paths_are_taken_in_bytewise_order() {
        assert_eq!(
            acquisition_order(&["/b", "/a/z", "/a", "/B"]),
            ["/B", "/a", "/a/z", "/b"]
        );
    }
}
