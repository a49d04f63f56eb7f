//! `--supersede` (docs/design.md, "Superseding waiters"): a run that queues
//! removes the older runs on its path that still wait and were started with
//! `--supersede` too, and records itself beside the lock (newest.rs). Runs
//! are compared by age, when they first queued (holder.rs), never by place:
//! a run that lost its place and queues again, or whose node went while it
//! waited, ends when a newer run is known.
//!
//! Which runs are such is read from their node data (holder.rs): correctness
//! of the lock never depends on it, since a node is removed only while
//! something ahead of it still exists, that is, while it cannot hold.

use std::cmp::Ordering;

use zklock::zk;
use zklock::zk::answers::MultiResult;
use zklock::zk::burst::Burst;
use zklock::zk::ops::MultiOp;
use zklock::zk::records::Error;

use crate::lock::holder::{HolderData, Seen};
use crate::lock::newest::{self, Trace};
use crate::lock::queue_policy::{QueuePolicy, Step};
use crate::lock::recipe::{self, Class, Contender, Standing};
use crate::session::{is_connection_loss, retrying};

/// Our node, as a `--supersede` run.
pub struct Ours<'a> {
    pub client: &'a zk::client::Client,
    pub dir: &'a str,
    /// Our node's name.
    pub me: &'a str,
    /// When the run first queued: the czxid of its first node.
    pub age: i64,
    /// Our node's data (holder.rs).
    pub data: &'a [u8],
    /// The ACL of every node we create.
    pub acls: &'a [zk::records::Acl],
}

/// What a run found as it queued.
pub enum Queueing {
    /// It waits (or holds) as it was.
    Kept,
    /// It removed older runs: the caller's listing is stale.
    Removed,
    /// A newer run is known: its node or record as read (None: unread),
    /// for people.
    Superseded(Option<Seen>),
}

/// `--supersede` as a step of the wait: on the first listing after we
/// queue, [`queueing`]; when our node vanishes, [`lost`].
pub struct Supersede<'a> {
    pub ours: Ours<'a>,
    /// Whether the run waits (`--no-wait` only supersedes as it holds).
    pub wait: bool,
    /// Not yet looked as we queued: later waiters queue behind us and
    /// remove us.
    pub joining: bool,
}

impl QueuePolicy for Supersede<'_> {
    async fn on_listing(&mut self, children: &[String], _: &str) -> Step {
        if !std::mem::take(&mut self.joining) {
            return Step::Stay;
        }
        match queueing(&self.ours, children, self.wait).await {
            Queueing::Kept => Step::Stay,
            Queueing::Removed => Step::Relist,
            Queueing::Superseded(by) => Step::Superseded(by),
        }
    }

    async fn on_vanished(&mut self, children: Option<&[String]>) -> Option<Step> {
        let by = lost(&self.ours, children).await?;
        Some(Step::Superseded(Some(by)))
    }

    /// After a reconnection, the event for our own node (removed by a
    /// newer run) may come after the answer that the node ahead is gone.
    fn lists_before_holding(&self) -> bool {
        true
    }
}

/// Right after our node was created (`children` is a listing of its
/// directory with it): ends if a newer `--supersede` run waits ahead
/// of it, holds, or is recorded beside the lock; otherwise records our run
/// there, and then removes the `--supersede` runs waiting ahead of us,
/// never the first in line (it holds, or is about to). A run that does not
/// wait does this only when it holds at once, and has nobody to remove
/// (one that gives up deploys nothing, and makes no run stale).
///
/// Anything that goes wrong here (no DELETE on a victim, a lost session)
/// leaves the victim waiting: our own wait goes on, and says what is wrong.
pub async fn queueing(ours: &Ours<'_>, children: &[String], wait: bool) -> Queueing {
    let Ours {
        client,
        dir,
        me,
        age,
        ..
    } = *ours;
    if !wait && !matches!(recipe::standing(children, me), Standing::Held) {
        return Queueing::Kept;
    }
    let ahead = ahead_of(children, me);
    // Only writers: a --supersede run takes an exclusive or write lock.
    let writers: Vec<&str> = (ahead.iter())
        .filter(|c| c.class == Class::Writer)
        .map(|c| c.name)
        .collect();
    let (runs, trace) = survey(client, dir, &writers).await;
    if let Some(by) = newer_than(&runs, trace.as_ref(), age) {
        return Queueing::Superseded(Some(by));
    }
    // Recorded before anyone is removed, so that every run that ever
    // queued is either still queued, or recorded, or was removed by a run
    // recorded as newer. Failing to record (a lost session) is not fatal:
    // the run queues again, and records itself then.
    let own = HolderData::parse(ours.data).unwrap_or_default();
    let raised = newest::raise(client, dir, ours.acls, trace.as_ref(), &own, age).await;
    if raised.is_ok_and(|newer| newer) {
        let trace = newest::read(client, dir).await;
        let by = newer_than(&[], trace.as_ref(), age);
        return Queueing::Superseded(by);
    }
    let first = ahead.first().map(|c| c.name);
    // Every run read is older than ours now.
    let victims: Vec<String> = (runs.into_iter())
        .map(|run| run.name)
        .filter(|name| Some(name.as_str()) != first)
        .collect();
    match remove(client, dir, &ahead, me, victims).await {
        true => Queueing::Removed,
        false => Queueing::Kept,
    }
}

/// Removes from `dir` the `pending` runs waiting `ahead` of our node `me`.
/// Each removal is one multi: a check that a node ahead of the victim
/// still exists (any version: a holder writes its node) and the delete of
/// the victim, so a victim that took the lock meanwhile is left alone: it
/// cannot hold while anything precedes it. When such a check fails, the
/// queue is listed again and the victims still waiting are tried against
/// what is ahead of them now. True if anything was removed.
///
/// A removed run exits and leaves nothing behind; we keep our own place at
/// the end of the queue: we do not take the victim's place ahead of plain
/// waiters that queued after it.
async fn remove(
    client: &zk::client::Client,
    dir: &str,
    ahead: &[Contender<'_>],
    me: &str,
    mut pending: Vec<String>,
) -> bool {
    let mut removed = false;
    // Each round that retries follows a node leaving the queue ahead of us
    // (or a lost connection): bounded by what was ahead.
    let mut listing: Option<Vec<String>> = None;
    for _round in 0..=ahead.len() {
        let listed;
        let ahead: &[Contender<'_>] = match &listing {
            Some(children) => {
                listed = ahead_of(children, me);
                &listed
            }
            None => ahead,
        };
        // A victim that is now first in line holds, or is about to.
        pending.retain(|victim| ahead.iter().skip(1).any(|c| c.name == victim));
        if pending.is_empty() {
            break;
        }
        let mut burst = Burst::default();
        let commits: Vec<_> = (pending.iter())
            .map(|victim| {
                let anchor = anchor_of(ahead, &pending, victim);
                burst.multi(vec![
                    MultiOp::Check {
                        path: recipe::child(dir, anchor),
                        version: -1,
                    },
                    MultiOp::Delete {
                        path: recipe::child(dir, victim),
                        version: -1,
                    },
                ])
            })
            .collect();
        client.send(burst);
        let mut retry = false;
        let mut still = Vec::new();
        for (victim, commit) in pending.iter().zip(commits) {
            let no_node = |index: usize, results: &[Result<MultiResult, Error>]| {
                results.get(index) == Some(&Err(Error::NoNode))
            };
            match commit.await {
                Ok(results) if results.iter().all(Result::is_ok) => removed = true,
                // Gone already: another newer run removed it, or it gave up.
                Ok(results) if no_node(1, &results) => {}
                // The node ahead of it went: it may hold now; look again.
                Ok(results) if no_node(0, &results) => {
                    retry = true;
                    still.push(victim.clone());
                }
                Err(err) if is_connection_loss(&err) => {
                    retry = true;
                    still.push(victim.clone());
                }
                Ok(_) | Err(_) => {}
            }
        }
        pending = still;
        if !retry {
            break;
        }
        match retrying(|| client.call(|b| b.get_children(dir, false)))
            .await
            .map(|c| c.children)
        {
            Ok(children) => listing = Some(children),
            Err(_) => break,
        }
    }
    removed
}

/// What a removal checks for: the nearest node ahead of `victim` that is
/// not itself to be removed (the first in line at the latest), so that
/// removing several victims at once does not fail on one another.
fn anchor_of<'a>(ahead: &[Contender<'a>], pending: &[String], victim: &str) -> &'a str {
    let at = ahead.iter().position(|c| c.name == victim).unwrap_or(0);
    ahead[..at]
        .iter()
        .rev()
        .find(|c| !pending.iter().any(|p| p == c.name))
        .map_or(ahead[0].name, |c| c.name)
}

/// The contenders ahead of `me`, in queue order; none if `me` is not there.
fn ahead_of<'a>(children: &'a [String], me: &str) -> Vec<Contender<'a>> {
    let Some(mine) = recipe::parse_contender(me) else {
        return Vec::new();
    };
    let mut ahead: Vec<Contender<'a>> = (children.iter())
        .filter_map(|c| recipe::parse_contender(c))
        .filter(|c| recipe::seq_order(c.seq, mine.seq) == Ordering::Less)
        .collect();
    if !children.iter().any(|c| c == me) {
        ahead.clear();
    }
    ahead.sort_by(|a, b| recipe::seq_order(a.seq, b.seq));
    ahead
}

/// A `--supersede` run read from its node.
struct Run {
    /// Its node's name in the queue.
    name: String,
    age: i64,
    seen: Seen,
}

/// The `--supersede` runs among the nodes `names` in `dir`, and the node
/// that records the newest run (None if it could not be read), read in one
/// burst. A node that could not be read counts as no such run.
async fn survey(
    client: &zk::client::Client,
    dir: &str,
    names: &[&str],
) -> (Vec<Run>, Option<Trace>) {
    let reads: Vec<_> = (names.iter())
        .map(|name| async move {
            let found = client
                .call(|b| b.get_data(&recipe::child(dir, name), false))
                .await;
            found.map(|d| (d.data, d.stat))
        })
        .collect();
    let (answers, trace) =
        tokio::join!(futures::future::join_all(reads), newest::read(client, dir));
    let runs = (names.iter().zip(answers))
        .filter_map(|(name, answer)| {
            let (data, stat) = answer.ok()?;
            let age = HolderData::parse(&data)?.supersede_age(stat.czxid)?;
            Some(Run {
                name: (*name).to_owned(),
                age,
                seen: Seen::from((data, stat)),
            })
        })
        .collect();
    (runs, trace)
}

/// The newest of `runs` and the run `trace` records, if newer than `age`,
/// as read (a queued node rather than the record of the same run).
fn newer_than(runs: &[Run], trace: Option<&Trace>, age: i64) -> Option<Seen> {
    let recorded = trace.and_then(Trace::run);
    let queued = runs.iter().map(|run| (run.age, true, &run.seen));
    let (_, _, seen) = queued
        .chain(recorded.iter().map(|(age, seen)| (*age, false, seen)))
        .filter(|(theirs, _, _)| *theirs > age)
        .max_by_key(|(theirs, queued, _)| (*theirs, *queued))?;
    Some(seen.clone())
}

/// Our node vanished while we waited. Whichever way it went (a newer run
/// removed it, an operator deleted it, its session ended), if a run newer
/// than ours is queued or recorded, ours is stale: who that is, the newest.
/// Otherwise None: the caller queues again (and checks again as it
/// queues). `children` is a listing made after the node went, if we have
/// one.
pub async fn lost(ours: &Ours<'_>, children: Option<&[String]>) -> Option<Seen> {
    let Ours {
        client, dir, me, ..
    } = *ours;
    let listed;
    let children = match children {
        Some(children) => children,
        None => match retrying(|| client.call(|b| b.get_children(dir, false)))
            .await
            .map(|c| c.children)
        {
            Ok(children) => {
                listed = children;
                &listed
            }
            Err(_) => return None,
        },
    };
    let writers: Vec<&str> = (children.iter())
        .filter_map(|c| recipe::parse_contender(c))
        .filter(|c| c.class == Class::Writer && c.name != me)
        .map(|c| c.name)
        .collect();
    // A lost session fails these reads: then nothing is known here.
    let (runs, trace) = survey(client, dir, &writers).await;
    newer_than(&runs, trace.as_ref(), ours.age)
}

#[cfg(test)]
mod tests;
