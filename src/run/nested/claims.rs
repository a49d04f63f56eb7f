//! Whether an enclosing `zklock run` already holds what a nested run asks
//! for (pure): `mod.rs` reads the nodes the environment claims, this module
//! decides (docs/design.md, "Nested runs").

use std::cmp::Ordering;

use crate::lock::recipe::{
    self, Class, LEASE, LockKind, SEMAPHORE_LEASES, Standing, sequence_after,
};

/// The `ZKLOCK_*` variables a run inherited.
#[derive(Debug, Default)]
pub struct Inherited {
    pub path: Option<String>,
    pub node: Option<String>,
    pub session: Option<String>,
}

impl Inherited {
    pub fn from_env() -> Inherited {
        let var = |name| std::env::var(name).ok();
        Inherited {
            path: var("ZKLOCK_PATH"),
            node: var("ZKLOCK_NODE"),
            session: var("ZKLOCK_SESSION_ID"),
        }
    }
}

/// How the enclosing run holds a path, from its node's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// An exclusive (`-lock-`) or write (`__WRIT__`) node.
    Writer,
    /// A read (`__READ__`) node.
    Reader,
    /// A semaphore's lease (`PATH/leases/..-lease-..`).
    Lease,
}

/// An enclosing run's claim to hold one of the requested paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub path: String,
    /// The claimed node's full path.
    pub node: String,
    /// The session that must own it.
    pub session: i64,
    pub held: Held,
}

impl Claim {
    /// The directory whose listing decides whether the node holds.
    pub fn dir(&self) -> &str {
        self.node.rsplit_once('/').map_or("", |(dir, _)| dir)
    }

    fn name(&self) -> &str {
        &self.node[self.dir().len() + 1..]
    }
}

/// For each requested path (in the order given), the enclosing run's claim
/// on it. An environment that does not parse as zklock's claims none: the
/// run then takes its locks as usual.
pub fn claims(inherited: &Inherited, requested: &[&str]) -> Vec<Option<Claim>> {
    let parsed = parse(inherited).unwrap_or_default();
    requested
        .iter()
        .map(|path| parsed.iter().find(|claim| claim.path == *path).cloned())
        .collect()
}

fn parse(inherited: &Inherited) -> Option<Vec<Claim>> {
    let paths: Vec<&str> = inherited.path.as_deref()?.lines().collect();
    let nodes: Vec<&str> = inherited.node.as_deref()?.lines().collect();
    let session = parse_session(inherited.session.as_deref()?)?;
    if paths.len() != nodes.len() {
        return None;
    }
    let claim = |(path, node): (&&str, &&str)| {
        Some(Claim {
            path: path.to_string(),
            node: node.to_string(),
            session,
            held: held_as(path, node)?,
        })
    };
    Some(paths.iter().zip(&nodes).filter_map(claim).collect())
}

/// One session id in hex (`0x...`), as zklock exports it; repeated on every
/// line is accepted too.
fn parse_session(text: &str) -> Option<i64> {
    let mut ids = text.lines().map(|line| {
        let hex = line.trim().strip_prefix("0x")?;
        u64::from_str_radix(hex, 16).ok().map(|id| id as i64)
    });
    let first = ids.next()??;
    ids.all(|id| id == Some(first)).then_some(first)
}

/// What kind of node of `path` `node` is: a lock node directly under it, or
/// a lease under its `leases` child; `None` for anything else.
fn held_as(path: &str, node: &str) -> Option<Held> {
    let (dir, name) = node.rsplit_once('/')?;
    if dir == path {
        return recipe::parse_contender(name).map(|c| match c.class {
            Class::Writer => Held::Writer,
            Class::Reader => Held::Reader,
        });
    }
    let leases = dir.strip_prefix(path)?.strip_prefix('/')?;
    (leases == SEMAPHORE_LEASES && sequence_after(name, LEASE).is_some()).then_some(Held::Lease)
}

/// What ZooKeeper showed of a claimed node, all read in one session.
#[derive(Debug, Default)]
pub struct Observed {
    /// The node's ephemeralOwner and czxid; `None` if there is no such node.
    pub stat: Option<(i64, i64)>,
    /// The children of the claim's directory (the lock queue, or the leases).
    pub children: Vec<String>,
    /// For a lease: the semaphore's limit as stored in PATH.
    pub limit: Option<u32>,
}

/// The verdict on one claimed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The enclosing run holds it in a way that covers the request.
    Reenter { node: String, czxid: i64 },
    /// The enclosing run holds it shared and the request is exclusive: the
    /// nested run would wait for its own ancestor forever.
    Upgrade,
    /// The claim is stale (the node is gone, belongs to another session, or
    /// does not hold) or of another kind: take the path as usual.
    Normal,
}

/// Judges `claim` for a request of `kind`, from what ZooKeeper showed.
pub fn verdict(claim: &Claim, kind: LockKind, observed: &Observed) -> Verdict {
    let upgrade = match (claim.held, kind) {
        (Held::Writer, LockKind::Exclusive | LockKind::Write | LockKind::Read) => false,
        (Held::Reader, LockKind::Read) => false,
        (Held::Reader, LockKind::Exclusive | LockKind::Write) => true,
        (Held::Lease, LockKind::Semaphore(limit)) if observed.limit == Some(limit) => false,
        // A plain lock on a semaphore's path, a semaphore on a plain lock's
        // path, or another limit: the usual path refuses these (64).
        _ => return Verdict::Normal,
    };
    let Some((owner, czxid)) = observed.stat else {
        return Verdict::Normal;
    };
    if owner != claim.session || !holds(claim, observed) {
        return Verdict::Normal;
    }
    match upgrade {
        true => Verdict::Upgrade,
        false => Verdict::Reenter {
            node: claim.node.clone(),
            czxid,
        },
    }
}

/// Whether the claimed node holds, recomputed from the listing: a lock node
/// by the recipe's own predicate, a lease when fewer than the limit precede
/// it (older leases only ever go, so every held lease passes this).
fn holds(claim: &Claim, observed: &Observed) -> bool {
    let name = claim.name();
    match claim.held {
        Held::Writer | Held::Reader => recipe::standing(&observed.children, name) == Standing::Held,
        Held::Lease => {
            let (Some(mine), Some(limit)) = (sequence_after(name, LEASE), observed.limit) else {
                return false;
            };
            let listed = observed.children.iter().any(|c| c == name);
            let older = observed
                .children
                .iter()
                .filter_map(|c| sequence_after(c, LEASE))
                .filter(|&seq| recipe::seq_order(seq, mine) == Ordering::Less)
                .count();
            listed && older < limit as usize
        }
    }
}

/// What a nested run does.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take the locks as usual.
    Normal,
    /// Run at once under the enclosing run's locks: its node and fencing
    /// token per requested path, in the order given.
    Reenter(Vec<(String, i64)>),
    /// Refuse at once (a usage error), with this message.
    Refuse(String),
}

/// Combines the verdicts (one per requested path, `None` where nothing was
/// claimed). All paths re-entered, or none: re-entering some while taking
/// the others would take locks out of the bytewise order while the
/// enclosing run holds its own, which can deadlock against a third run.
pub fn decide(requested: &[&str], kind: LockKind, verdicts: &[Option<Verdict>]) -> Decision {
    // The first path whose verdict is `wanted`.
    let at = |wanted: fn(Option<&Verdict>) -> bool| {
        requested
            .iter()
            .zip(verdicts)
            .find(|(_, v)| wanted(v.as_ref()))
            .map(|(path, _)| *path)
    };
    if let Some(path) = at(|v| v == Some(&Verdict::Upgrade)) {
        let how = match kind {
            LockKind::Write => "for writing",
            _ => "exclusively",
        };
        return Decision::Refuse(format!(
            "cannot take {path} {how} inside a zklock run that holds it shared: it would \
             wait for that run forever; take it exclusively in the enclosing run"
        ));
    }
    let reentered = at(|v| matches!(v, Some(Verdict::Reenter { .. })));
    let other = at(|v| !matches!(v, Some(Verdict::Reenter { .. })));
    match (reentered, other) {
        (None, _) => Decision::Normal,
        (Some(held), Some(other)) => Decision::Refuse(format!(
            "{held} is held by the enclosing zklock run but {other} is not: a nested run \
             takes only locks the enclosing run holds, or none of them (taking {other} \
             now could deadlock); take {other} in the enclosing run"
        )),
        (Some(_), None) => Decision::Reenter(
            verdicts
                .iter()
                .flatten()
                .filter_map(|v| match v {
                    Verdict::Reenter { node, czxid } => Some((node.clone(), *czxid)),
                    _ => None,
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests;
