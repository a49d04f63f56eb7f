//! `zklock break PATH`: delete a holder's node, the one that was shown.

use std::io::{BufRead, IsTerminal, Write};
use std::time::SystemTime;

use anyhow::{Context, Result};
use zookeeper_client as zk;

use crate::cli::BreakArgs;
use crate::exit::{Exit, Failure};
use crate::lock::directory::{Client, Entry, EntryKind, PathKind};
use crate::lock::inspect;
use crate::lock::recipe::{SEMAPHORE_GATE, SEMAPHORE_LEASES};
use crate::present;
use crate::report::{print_stdout, say};
use crate::session::{self, Session, Settings, retrying};

/// The node to delete, as it was shown.
pub struct Target {
    pub path: String,
    pub czxid: i64,
    pub text: String,
    /// The line printed once it is deleted: what the deletion did.
    pub done: String,
}

pub fn break_lock(args: BreakArgs) -> Result<Exit> {
    if args.record {
        return crate::break_record::break_record(&args);
    }
    let options = args.connection.settings()?;
    let lock = args.path.as_str();
    // No session stays open while a person reads and answers the prompt:
    // it could expire meanwhile.
    let Some(target) = session::block_on(find_target(&options, lock, args.node.as_deref()))? else {
        return Ok(Exit::NotDeleted);
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
    session::block_on(delete_target(&options, &target))
}

/// Finds the node to delete: the named one, or the only holder.
async fn find_target(options: &Settings, lock: &str, name: Option<&str>) -> Result<Option<Target>> {
    let session = Session::connect(options).await?;
    let view = inspect::read_lock(session.client(), lock).await;
    session.close(&[]).await;
    let view = view?;
    let json = present::lock_json(lock, &view, SystemTime::now());
    let entries: Vec<(&Entry, &present::EntryJson)> = view
        .holders
        .iter()
        .chain(&view.waiting)
        .zip(json.holders.iter().chain(&json.waiting))
        .collect();
    // Where an entry's node is: its full path is what `run -v` prints and
    // `--node` accepts, as well as the name alone.
    let dir = |entry: &Entry| match (view.kind, entry.kind) {
        (PathKind::Semaphore { .. }, EntryKind::Lease) => format!("{lock}/{SEMAPHORE_LEASES}"),
        (PathKind::Semaphore { .. }, _) => format!("{lock}/{SEMAPHORE_GATE}"),
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
        Some(name) => entries.iter().position(|(e, _)| {
            e.node.name == name || format!("{}/{}", dir(e), e.node.name) == name
        }),
        None => match view.holders.len() {
            0 => None,
            1 => Some(0),
            n => {
                return Err(Failure::usage(format!(
                    "{lock} has {n} holders; name the node to delete with --node (see zklock status {lock})"
                )));
            }
        },
    };
    let Some((at, (entry, shown))) = chosen.map(|at| (at, entries[at])) else {
        match name {
            Some(name) => say(format_args!("{lock} has no node {name}; nothing deleted")),
            None => say(format_args!("{lock} is free; nothing deleted")),
        }
        return Ok(None);
    };
    let header = present::lock_text(&json);
    let header = header.lines().next().unwrap_or_default();
    let path = format!("{}/{}", dir(entry), entry.node.name);
    // A holder's zklock stops its command (76); a zklock waiter whose node
    // disappears queues again, so deleting it only sends it to the back.
    let done = match (at < view.holders.len(), entry.client) {
        (true, _) => format!("deleted {path}"),
        (false, Client::Zklock) => format!(
            "deleted waiter node {path}; that zklock run queues again at the end of the queue"
        ),
        (false, _) => format!("deleted waiter node {path}"),
    };
    Ok(Some(Target {
        path,
        czxid: entry.node.stat.czxid,
        text: format!("{header}\n{}", present::entry_text(shown)),
        done,
    }))
}

pub fn confirmed(target: &Target) -> Result<bool> {
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

/// Deletes the target if it is still the node shown (same czxid).
async fn delete_target(options: &Settings, target: &Target) -> Result<Exit> {
    let session = Session::connect(options).await?;
    let result = delete_if_same(session.client(), target).await;
    session.close(&[]).await;
    match result? {
        true => {
            print_stdout(&target.done);
            Ok(Exit::Command(0))
        }
        false => {
            say(format_args!(
                "the holder changed: {} is not the node shown; nothing deleted",
                target.path
            ));
            Ok(Exit::Conflict(75))
        }
    }
}

/// Deletes `target` at the data version just read, so a node replaced or
/// rewritten in between is never deleted blindly; false if it is gone or
/// another node now.
async fn delete_if_same(client: &zk::Client, target: &Target) -> Result<bool> {
    // The holder's own writes change the version; a few tries outlast them.
    for _ in 0..5 {
        let stat = match retrying(|| client.get_data(&target.path)).await {
            Err(zk::Error::NoNode) => return Ok(false),
            result => {
                result
                    .with_context(|| format!("reading {}", target.path))?
                    .1
            }
        };
        if stat.czxid != target.czxid {
            return Ok(false);
        }
        match retrying(|| client.delete(&target.path, Some(stat.version))).await {
            Ok(()) => return Ok(true),
            Err(zk::Error::NoNode) => return Ok(false),
            Err(zk::Error::BadVersion) => continue,
            Err(err) => return Err(err).with_context(|| format!("deleting {}", target.path)),
        }
    }
    Ok(false)
}
