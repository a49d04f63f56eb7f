//! `zklock break PATH`: delete a holder's node or, with `--record`, the run
//! record `--once-per` keeps beside the lock; in either case only the node
//! that was shown (docs/design.md, "Operator commands").

use std::io::{BufRead, IsTerminal, Write};
use std::time::SystemTime;

use anyhow::{Context, Result};
use zklock::zk;

use crate::cli::BreakArgs;
use crate::exit::{Exit, Failure, Step};
use crate::lock::directory::{Client, Entry, EntryKind, PathKind};
use crate::lock::inspect;
use crate::lock::recipe::{self, SEMAPHORE_GATE, SEMAPHORE_LEASES};
use crate::lock::record::{self, record_path};
use crate::present::{self, LockStatus};
use crate::report::{print_stdout, say};
use crate::session::{self, Session, Settings, retrying};

/// The node to delete, as it was shown.
struct Target {
    path: String,
    /// What identifies the node shown.
    shown: Shown,
    text: String,
    /// The line printed once it is deleted: what the deletion did.
    done: String,
}

enum Shown {
    /// A holder's or waiter's node: the same node (czxid), whatever its
    /// holder writes meanwhile.
    Node { czxid: i64 },
    /// The run record: exactly the version shown.
    Record { version: i32 },
}

pub fn break_lock(args: BreakArgs) -> Result<Exit> {
    let options = args.connection.settings()?;
    let lock = args.path.as_str();
    // No session stays open while a person reads and answers the prompt:
    // it could expire meanwhile.
    let found = match args.record {
        true => session::block_on(find_record(&options, lock))?,
        false => session::block_on(find_node(&options, lock, args.node.as_deref()))?,
    };
    let target = match found {
        Step::Go(target) => target,
        Step::End(exit) => return Ok(exit),
    };
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(Failure::usage(format!(
                "not deleting {} without confirmation: stdin is not a terminal; add --yes",
                target.path
            )));
        }
        if !confirmed(&target)? {
            say(format_args!("nothing deleted"));
            return Ok(Exit::NotDeleted);
        }
    }
    let deleted = session::block_on(async {
        let session = Session::connect(&options).await?;
        let deleting = async |session: &Session| delete_if_same(session.client(), &target).await;
        session.scope(deleting).await.0
    })?;
    if deleted {
        print_stdout(&target.done);
        return Ok(Exit::Command(0));
    }
    match target.shown {
        Shown::Node { .. } => say(format_args!(
            "the holder changed: {} is not the node shown; nothing deleted",
            target.path
        )),
        Shown::Record { .. } => say(format_args!(
            "{} changed or was deleted after it was shown; nothing deleted",
            target.path
        )),
    }
    Ok(Exit::Conflict(75))
}

/// Finds the node to delete: the named one, or the only holder.
async fn find_node(options: &Settings, lock: &str, name: Option<&str>) -> Result<Step<Target>> {
    let session = Session::connect(options).await?;
    let reading = async |session: &Session| inspect::read_lock(session.client(), lock).await;
    let (view, _) = session.scope(reading).await;
    let status = LockStatus::new(lock, view?, SystemTime::now());
    let entries: Vec<(usize, bool, &Entry)> = status.entries().collect();
    let semaphore = matches!(status.view.kind, PathKind::Semaphore { .. });
    // Where an entry's node is: its full path is what `run -v` prints and
    // `--node` accepts, as well as the name alone.
    let dir = |entry: &Entry| match (semaphore, entry.kind) {
        (true, EntryKind::Lease) => recipe::child(lock, SEMAPHORE_LEASES),
        (true, _) => recipe::child(lock, SEMAPHORE_GATE),
        _ => lock.to_owned(),
    };
    if let Some(name) = name.filter(|n| n.contains('/')) {
        if !name.starts_with(&format!("{lock}/")) {
            return Err(Failure::usage(format!(
                "--node {name} is not a node of {lock}: give its name or its full path under {lock}"
            )));
        }
    }
    let chosen = match name {
        Some(name) => entries.iter().position(|(_, _, e)| {
            e.node.name == name || recipe::child(&dir(e), &e.node.name) == name
        }),
        None => match status.view.holders.len() {
            0 => None,
            1 => Some(0),
            n => {
                return Err(Failure::usage(format!(
                    "{lock} has {n} holders; name the node to delete with --node (see zklock status {lock})"
                )));
            }
        },
    };
    let Some((position, held, entry)) = chosen.map(|at| entries[at]) else {
        match name {
            Some(name) => say(format_args!("{lock} has no node {name}; nothing deleted")),
            None => say(format_args!("{lock} is free; nothing deleted")),
        }
        return Ok(Step::End(Exit::NotDeleted));
    };
    let header = present::lock_header(&status);
    let path = recipe::child(&dir(entry), &entry.node.name);
    // A holder's zklock stops its command (76); a zklock waiter whose node
    // disappears queues again, so deleting it only sends it to the back.
    let done = match (held, entry.client) {
        (true, _) => format!("deleted {path}"),
        (false, Client::Zklock) => format!(
            "deleted waiter node {path}; that zklock run queues again at the end of the queue"
        ),
        (false, _) => format!("deleted waiter node {path}"),
    };
    Ok(Step::Go(Target {
        path,
        shown: Shown::Node {
            czxid: entry.node.stat.czxid,
        },
        text: format!(
            "{header}\n{}",
            present::entry_text(entry, position, held, status.now)
        ),
        done,
    }))
}

/// Finds the run record to delete.
async fn find_record(options: &Settings, lock: &str) -> Result<Step<Target>> {
    let session = Session::connect(options).await?;
    let reading = async |session: &Session| record::read(session.client(), lock).await;
    let (found, _) = session.scope(reading).await;
    let Some((record, stat)) = found? else {
        say(format_args!("{lock} has no run record; nothing deleted"));
        return Ok(Step::End(Exit::NotDeleted));
    };
    let path = record_path(lock);
    let text = format!("{lock}: run record {path}\n{}", present::runs_text(&record));
    Ok(Step::Go(Target {
        done: format!("deleted {path}"),
        path,
        shown: Shown::Record {
            version: stat.version,
        },
        text,
    }))
}

fn confirmed(target: &Target) -> Result<bool> {
    let mut stderr = std::io::stderr();
    let _ = write!(stderr, "{}delete {}? [y/N] ", target.text, target.path);
    let _ = stderr.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("reading the answer")?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}

/// Deletes `target` if it is still the node shown; false if it is gone or
/// another node (or, for the record, another version) now. A lock node is
/// deleted at the data version just read, so a node replaced or rewritten
/// in between is never deleted blindly.
async fn delete_if_same(client: &zk::client::Client, target: &Target) -> Result<bool> {
    // A holder's own writes change its node's version; a few tries outlast them.
    for _ in 0..5 {
        let version = match target.shown {
            Shown::Record { version } => version,
            Shown::Node { czxid } => {
                match retrying(|| client.call(|b| b.get_data(&target.path, false)))
                    .await
                    .map(|d| (d.data, d.stat))
                {
                    Ok((_, stat)) if stat.czxid == czxid => stat.version,
                    Ok(_) | Err(zk::records::Error::NoNode) => return Ok(false),
                    Err(err) => {
                        return Err(err).with_context(|| format!("reading {}", target.path));
                    }
                }
            }
        };
        match retrying(|| client.call(|b| b.delete(&target.path, version))).await {
            Ok(()) => return Ok(true),
            Err(zk::records::Error::BadVersion) if matches!(target.shown, Shown::Node { .. }) => {}
            Err(zk::records::Error::NoNode | zk::records::Error::BadVersion) => return Ok(false),
            Err(err) => return Err(err).with_context(|| format!("deleting {}", target.path)),
        }
    }
    Ok(false)
}
