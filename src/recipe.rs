//! The lock recipe (DESIGN.md section 3): node names, ordering and the
//! "who goes next" predicate as pure functions, and one small acquire loop
//! over the client's primitives.

use std::cmp::Ordering;

use anyhow::{Context, Result, bail};
use zookeeper_client as zk;

use crate::zk::{is_connection_loss, retrying};

/// The kind of node we queue with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Curator `InterProcessMutex` compatible: `_c_<uuid>-lock-<seq>`.
    Exclusive,
}

impl Kind {
    fn marker(self) -> &'static str {
        match self {
            Kind::Exclusive => "-lock-",
        }
    }
}

/// How a contender's node constrains others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Excludes everyone (exclusive and write nodes).
    Writer,
}

/// Name markers of every node kind we recognize as a contender, longest
/// first where one could contain another.
const MARKERS: [(&str, Class); 1] = [("-lock-", Class::Writer)];

/// The name prefix of our node; the server appends the sequence number.
/// The uuid lets us find our node again when a create's reply is lost.
pub fn node_prefix(kind: Kind, uuid: &str) -> String {
    format!("_c_{uuid}{}", kind.marker())
}

/// A child of the lock directory that takes part in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contender<'a> {
    pub name: &'a str,
    pub class: Class,
    pub seq: i32,
}

/// Parses a child name; `None` for names that are not lock nodes (they are
/// ignored, so unrelated children cannot block the lock).
pub fn parse_contender(name: &str) -> Option<Contender<'_>> {
    MARKERS.iter().find_map(|&(marker, class)| {
        let at = name.rfind(marker)?;
        let seq = parse_sequence(&name[at + marker.len()..])?;
        Some(Contender { name, class, seq })
    })
}

/// ZooKeeper formats sequence numbers as `%010d` of a signed 32-bit counter:
/// ten digits, or a minus sign and ten digits after the counter wraps.
fn parse_sequence(suffix: &str) -> Option<i32> {
    let digits = suffix.strip_prefix('-').unwrap_or(suffix);
    if digits.len() != 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    suffix
        .parse::<i64>()
        .ok()
        .and_then(|n| i32::try_from(n).ok())
}

/// Serial-number order of two sequence numbers, correct across the wrap at
/// 2^31 as long as live nodes span less than half the number space.
pub fn seq_order(a: i32, b: i32) -> Ordering {
    a.wrapping_sub(b).cmp(&0)
}

/// Where a contender stands in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing<'a> {
    /// Nothing that excludes us precedes our node.
    Held,
    /// Wait for `predecessor` to go; `ahead` contenders precede us and the
    /// lock is held by (or next for) `first`.
    Waiting {
        predecessor: &'a str,
        ahead: usize,
        first: &'a str,
    },
    /// Our node is not among the children: our session or node was lost.
    Missing,
}

/// Decides our standing from a listing of the lock directory. Only the
/// nearest preceding node that excludes us is watched, so a release wakes
/// exactly the next waiter (no herd).
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
    for other in children.iter().filter_map(|c| parse_contender(c)) {
        if other.name == mine.name || seq_order(other.seq, mine.seq) != Ordering::Less {
            continue;
        }
        if !excludes(other.class, mine.class) {
            continue;
        }
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

/// Whether a preceding node of class `before` keeps a node of class `me` waiting.
fn excludes(before: Class, me: Class) -> bool {
    match (before, me) {
        (Class::Writer, _) => true,
    }
}

/// Our node, once the server has it.
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

/// Progress of a wait, for reporting.
pub trait Observer {
    fn queued(&mut self, node: &Node);
    /// `ahead` contenders precede us; `first` (a full path) holds the lock or
    /// is next. `first_data` is its node data when [`Observer::wants_data`].
    fn waiting(&mut self, ahead: usize, first: &str, first_data: Option<&[u8]>);
    /// Whether reading the first node's data (one more round trip, each time
    /// it changes) is worth it.
    fn wants_data(&self) -> bool;
}

/// How a wait for the lock ended, short of an error.
#[derive(Debug, PartialEq, Eq)]
pub enum Acquired {
    Held,
    /// `--no-wait` found the lock held.
    Busy,
    /// Our node vanished while we waited: the session (or the node) is lost.
    Lost,
}

/// Queues for the lock at `dir` and waits until it is ours. `slot` receives
/// our node as soon as it exists, so the caller can delete it even if this
/// future is dropped at a deadline or by a signal.
pub async fn acquire(
    client: &zk::Client,
    dir: &str,
    kind: Kind,
    data: &[u8],
    wait: bool,
    slot: &mut Option<Node>,
    observer: &mut dyn Observer,
) -> Result<Acquired> {
    let uuid = uuid::Uuid::new_v4().to_string();
    let prefix = node_prefix(kind, &uuid);
    let node = create_node(client, dir, &prefix, data).await?;
    observer.queued(&node);
    let me = node.name().to_owned();
    *slot = Some(node);
    let mut reported_first = String::new();
    loop {
        let children = retrying(|| client.list_children(dir))
            .await
            .context("listing the lock's queue")?;
        let (predecessor, ahead, first) = match standing(&children, &me) {
            Standing::Held => return Ok(Acquired::Held),
            Standing::Missing => return Ok(Acquired::Lost),
            Standing::Waiting {
                predecessor,
                ahead,
                first,
            } => (predecessor, ahead, format!("{dir}/{first}")),
        };
        let first_data = match observer.wants_data() && first != reported_first {
            true => client.get_data(&first).await.ok().map(|(data, _)| data),
            false => None,
        };
        observer.waiting(ahead, &first, first_data.as_deref());
        reported_first = first;
        if !wait {
            return Ok(Acquired::Busy);
        }
        let predecessor = format!("{dir}/{predecessor}");
        // A data watch, not an exists watch: on a node that is already gone,
        // an exists watch would stay behind on the server as a creation watch.
        match retrying(|| client.get_and_watch_data(&predecessor)).await {
            Err(zk::Error::NoNode) => continue,
            Err(err) => return Err(err).context("watching the node ahead of us"),
            Ok((_data, _stat, watcher)) => {
                // Any event (deletion, data change, session end) means: look again.
                watcher.changed().await;
            }
        }
    }
}

/// Creates our EPHEMERAL_SEQUENTIAL node with create2 (for the czxid),
/// creating missing ancestors, and recovering a create whose reply was lost.
async fn create_node(client: &zk::Client, dir: &str, prefix: &str, data: &[u8]) -> Result<Node> {
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let requested = format!("{dir}/{prefix}");
    loop {
        match client.create(&requested, data, &options).await {
            Ok((stat, seq)) => {
                return Ok(Node {
                    path: format!("{requested}{seq}"),
                    czxid: stat.czxid,
                });
            }
            // The directory is missing, or a container was reaped under us.
            Err(zk::Error::NoNode) => create_ancestors(client, dir).await?,
            Err(err) if is_connection_loss(&err) => {
                if let Some(node) = find_own_node(client, dir, prefix).await? {
                    return Ok(node);
                }
            }
            Err(err) => return Err(err).context(format!("creating a lock node under {dir}")),
        }
    }
}

/// After a create's outcome was lost: sync so our read sees every write the
/// server acknowledged, then adopt the child carrying our uuid, but only if
/// this session owns it.
async fn find_own_node(client: &zk::Client, dir: &str, prefix: &str) -> Result<Option<Node>> {
    retrying(|| client.sync(dir))
        .await
        .context("syncing the lock directory")?;
    let children = match retrying(|| client.list_children(dir)).await {
        Err(zk::Error::NoNode) => return Ok(None),
        result => result.context("listing the lock directory")?,
    };
    for name in children.iter().filter(|c| c.starts_with(prefix)) {
        let path = format!("{dir}/{name}");
        match retrying(|| client.get_data(&path)).await {
            Ok((_, stat)) if stat.ephemeral_owner == client.session_id().0 => {
                return Ok(Some(Node {
                    path,
                    czxid: stat.czxid,
                }));
            }
            Ok(_) | Err(zk::Error::NoNode) => {}
            Err(err) => return Err(err).context("reading a lock node"),
        }
    }
    Ok(None)
}

/// Creates `dir` and its ancestors as containers, which the server deletes
/// once they are empty again; servers without containers get persistent nodes.
async fn create_ancestors(client: &zk::Client, dir: &str) -> Result<()> {
    let ancestors: Vec<&str> = dir
        .match_indices('/')
        .skip(1)
        .map(|(i, _)| &dir[..i])
        .chain([dir])
        .collect();
    let mut mode = zk::CreateMode::Container;
    // An empty container can be reaped between our creating it and creating
    // its child; starting over a few times outlasts that race.
    for _attempt in 0..10 {
        let mut index = 0;
        while let Some(&ancestor) = ancestors.get(index) {
            let options = mode.with_acls(zk::Acls::anyone_all());
            match retrying(|| client.create(ancestor, &[], &options)).await {
                Ok(_) | Err(zk::Error::NodeExists) => index += 1,
                Err(zk::Error::Unimplemented) if mode == zk::CreateMode::Container => {
                    mode = zk::CreateMode::Persistent;
                }
                Err(zk::Error::NoNode) if index == 0 => {
                    bail!("cannot create {ancestor}: the chroot given with -z does not exist");
                }
                Err(zk::Error::NoNode) => break,
                Err(err) => return Err(err).context(format!("creating {ancestor}")),
            }
        }
        if index == ancestors.len() {
            return Ok(());
        }
    }
    bail!("cannot create {dir}: its parents keep disappearing")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn prefix_is_curator_compatible() {
        assert_eq!(node_prefix(Kind::Exclusive, "u-1"), "_c_u-1-lock-");
    }

    #[test]
    fn parses_sequences_including_wrapped_ones() {
        let c = parse_contender("_c_ab-lock-0000000042").unwrap();
        assert_eq!((c.seq, c.class), (42, Class::Writer));
        assert_eq!(
            parse_contender("_c_ab-lock--2147483648").unwrap().seq,
            i32::MIN
        );
        assert_eq!(
            parse_contender("_c_ab-lock-2147483647").unwrap().seq,
            i32::MAX
        );
        for junk in [
            "locks",
            "_c_ab-lock-",
            "_c_ab-lock-12",
            "_c_ab-lock-00000000001",
            "x-lock-000000000a",
        ] {
            assert_eq!(parse_contender(junk), None, "{junk}");
        }
    }

    #[test]
    fn order_survives_the_wrap() {
        assert_eq!(seq_order(1, 2), Ordering::Less);
        assert_eq!(seq_order(i32::MAX, i32::MIN), Ordering::Less);
        assert_eq!(seq_order(i32::MIN + 3, i32::MAX - 3), Ordering::Greater);
        assert_eq!(seq_order(7, 7), Ordering::Equal);
    }

    #[test]
    fn first_node_holds() {
        let children = names(&["_c_b-lock-0000000002", "_c_a-lock-0000000001", "unrelated"]);
        assert_eq!(standing(&children, "_c_a-lock-0000000001"), Standing::Held);
    }

    #[test]
    fn waiters_watch_only_their_predecessor() {
        let children = names(&[
            "_c_c-lock-0000000003",
            "_c_a-lock-0000000001",
            "_c_b-lock-0000000002",
        ]);
        assert_eq!(
            standing(&children, "_c_c-lock-0000000003"),
            Standing::Waiting {
                predecessor: "_c_b-lock-0000000002",
                ahead: 2,
                first: "_c_a-lock-0000000001"
            }
        );
    }

    #[test]
    fn missing_node_is_reported() {
        let children = names(&["_c_a-lock-0000000001"]);
        assert_eq!(
            standing(&children, "_c_z-lock-0000000009"),
            Standing::Missing
        );
    }

    #[test]
    fn queue_order_across_the_wrap() {
        let children = names(&["_c_old-lock-2147483647", "_c_new-lock--2147483648"]);
        assert_eq!(
            standing(&children, "_c_old-lock-2147483647"),
            Standing::Held
        );
        assert!(matches!(
            standing(&children, "_c_new-lock--2147483648"),
            Standing::Waiting {
                predecessor: "_c_old-lock-2147483647",
                ahead: 1,
                ..
            }
        ));
    }
}
