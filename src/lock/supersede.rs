//! `--supersede` (docs/design.md, "Superseding waiters"): a run that queues
//! removes the older runs on its path that still wait and were started with
//! `--supersede` too; such a run whose node goes while it waits finds the
//! newer run that removed it.
//!
//! Which runs are such is read from their node data (holder.rs): correctness
//! of the lock never depends on it, since a node is removed only while
//! something ahead of it still exists, that is, while it cannot hold.

use std::cmp::Ordering;

use zookeeper_client as zk;

use crate::lock::holder::{self, HolderData, Seen};
use crate::lock::queue::{Acquired, Request};
use crate::lock::recipe::{self, Class, Contender};
use crate::session::{is_connection_loss, retrying};

/// Removes from `dir` (listed as `children`) every `--supersede` run waiting
/// ahead of our node `me`, never the first in line (it holds, or is about
/// to). Each removal is one multi: a check that a node ahead of the victim
/// still exists (any version: a holder writes its node) and the delete of
/// the victim, so a victim that took the lock meanwhile is left alone: it
/// cannot hold while anything precedes it. When such a check fails, the
/// queue is listed again and the victims still waiting are tried against
/// what is ahead of them now. True if anything was removed (the caller's
/// listing is then stale).
///
/// A removed run exits and leaves nothing behind; we keep our own place at
/// the end of the queue: we do not take the victim's place ahead of plain
/// waiters that queued after it.
///
/// Anything that goes wrong here (no DELETE on a victim, a lost session)
/// leaves the victim waiting: our own wait goes on, and says what is wrong.
pub async fn remove_older(client: &zk::Client, dir: &str, children: &[String], me: &str) -> bool {
    let ahead = ahead_of(children, me);
    // The first in line is never a victim.
    let Some((_, candidates)) = ahead.split_first() else {
        return false;
    };
    // Only writers: a --supersede run takes an exclusive or write lock.
    let candidates: Vec<&Contender<'_>> = candidates
        .iter()
        .filter(|c| c.class == Class::Writer)
        .collect();
    if candidates.is_empty() {
        return false;
    }
    // One burst: every read is sent before any answer is awaited.
    let reads: Vec<_> = (candidates.iter())
        .map(|c| client.get_data(&recipe::child(dir, c.name)))
        .collect();
    let answers = futures::future::join_all(reads).await;
    let mut pending: Vec<String> = (candidates.iter().zip(answers))
        .filter(|(_, answer)| answer.as_ref().is_ok_and(|(data, _)| supersedes(data)))
        .map(|(c, _)| c.name.to_owned())
        .collect();
    let mut removed = false;
    // Each round that retries follows a node leaving the queue ahead of us
    // (or a lost connection): bounded by what was ahead.
    let mut listing: Option<Vec<String>> = None;
    for _round in 0..=ahead.len() {
        let listed;
        let ahead = match &listing {
            Some(children) => {
                listed = ahead_of(children, me);
                &listed
            }
            None => &ahead,
        };
        // A victim that is now first in line holds, or is about to.
        pending.retain(|victim| ahead.iter().skip(1).any(|c| c.name == victim));
        if pending.is_empty() {
            break;
        }
        let commits: Vec<_> = (pending.iter())
            .map(|victim| {
                let anchor = anchor_of(ahead, &pending, victim);
                let mut multi = client.new_multi_writer();
                multi
                    .add_check_version(&recipe::child(dir, anchor), -1)
                    .and_then(|()| multi.add_delete(&recipe::child(dir, victim), None))
                    .map(|()| multi.commit())
            })
            .collect();
        let mut retry = false;
        let mut still = Vec::new();
        for (victim, commit) in pending.iter().zip(commits) {
            let outcome = match commit {
                Ok(commit) => commit.await,
                Err(err) => Err(err.into()),
            };
            match outcome {
                Ok(_) => removed = true,
                // Gone already: another newer run removed it, or it gave up.
                Err(zk::MultiWriteError::OperationFailed {
                    index: 1,
                    source: zk::Error::NoNode,
                }) => {}
                // The node ahead of it went: it may hold now; look again.
                Err(zk::MultiWriteError::OperationFailed {
                    index: 0,
                    source: zk::Error::NoNode,
                }) => {
                    retry = true;
                    still.push(victim.clone());
                }
                Err(zk::MultiWriteError::RequestFailed { source })
                    if is_connection_loss(&source) =>
                {
                    retry = true;
                    still.push(victim.clone());
                }
                Err(_) => {}
            }
        }
        pending = still;
        if !retry {
            break;
        }
        match retrying(|| client.list_children(dir)).await {
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

/// Whether node data says its run was started with --supersede.
fn supersedes(data: &[u8]) -> bool {
    HolderData::parse(data).is_some_and(|d| d.supersede == Some(true))
}

/// Why our node `me` in `dir` vanished while we waited: with --supersede,
/// if a newer --supersede run queued behind us, it removed us (the nearest
/// such run names it); otherwise the session or the node was lost and the
/// caller queues again. `children` is a listing made after the node went,
/// if we have one.
pub async fn lost(
    request: &Request<'_>,
    dir: &str,
    me: &str,
    children: Option<&[String]>,
) -> Acquired {
    if !request.supersede {
        return Acquired::Lost;
    }
    let client = request.client;
    let listed;
    let children = match children {
        Some(children) => children,
        None => match retrying(|| client.list_children(dir)).await {
            Ok(children) => {
                listed = children;
                &listed
            }
            Err(_) => return Acquired::Lost,
        },
    };
    let Some(mine) = recipe::parse_contender(me) else {
        return Acquired::Lost;
    };
    let mut newer: Vec<Contender<'_>> = (children.iter())
        .filter_map(|c| recipe::parse_contender(c))
        .filter(|c| c.class == Class::Writer)
        .filter(|c| recipe::seq_order(c.seq, mine.seq) == Ordering::Greater)
        .collect();
    newer.sort_by(|a, b| recipe::seq_order(a.seq, b.seq));
    let reads: Vec<_> = (newer.iter())
        .map(|c| client.get_data(&recipe::child(dir, c.name)))
        .collect();
    // A lost session fails these reads: then it is not a supersede.
    let answers = futures::future::join_all(reads).await;
    let Some(seen) = answers
        .into_iter()
        .flatten()
        .find(|(data, _)| supersedes(data))
        .map(Seen::from)
    else {
        return Acquired::Lost;
    };
    let by = holder::describe(&seen).unwrap_or_else(|| "a newer --supersede run".to_owned());
    Acquired::Superseded(by)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn anchors_skip_the_other_victims() {
        let children = names(&[
            "_c_me-lock-0000000005",
            "_c_a-lock-0000000001",
            "x__lock__0000000002",
            "_c_b-lock-0000000003",
            "unrelated",
            "_c_c-lock-0000000004",
        ]);
        let ahead = ahead_of(&children, "_c_me-lock-0000000005");
        let order: Vec<&str> = ahead.iter().map(|c| c.name).collect();
        assert_eq!(
            order,
            [
                "_c_a-lock-0000000001",
                "x__lock__0000000002",
                "_c_b-lock-0000000003",
                "_c_c-lock-0000000004"
            ]
        );
        let pending = names(&["_c_b-lock-0000000003", "_c_c-lock-0000000004"]);
        assert_eq!(
            anchor_of(&ahead, &pending, "_c_b-lock-0000000003"),
            "x__lock__0000000002"
        );
        assert_eq!(
            anchor_of(&ahead, &pending, "_c_c-lock-0000000004"),
            "x__lock__0000000002"
        );
        let pending = names(&["_c_c-lock-0000000004"]);
        assert_eq!(
            anchor_of(&ahead, &pending, "_c_c-lock-0000000004"),
            "_c_b-lock-0000000003"
        );
        // Our node gone: nothing is ahead of it.
        assert!(ahead_of(&children, "_c_gone-lock-0000000006").is_empty());
    }

    #[test]
    fn only_supersede_data_marks_a_victim() {
        let mut data = HolderData::ours(&["./deploy.sh".into()], None);
        assert!(!supersedes(&data.to_bytes()));
        data.supersede = Some(true);
        assert!(supersedes(&data.to_bytes()));
        assert!(supersedes(&data.acquired(7).to_bytes()));
        assert!(!supersedes(br#"{"supersede":true}"#));
        assert!(!supersedes(b"10.0.0.7"));
    }
}
