//! `zklock list [PREFIX]`: every lock under PREFIX, one line each.

use std::time::SystemTime;

use anyhow::Result;
use serde::Serialize;

use crate::cli::ListArgs;
use crate::exit::Exit;
use crate::lock::holder::escape_controls;
use crate::lock::inspect;
use crate::present::{self, human_age};
use crate::report::print_stdout;
use crate::session::{self, Session};

#[derive(Serialize)]
struct ListJson {
    locks: Vec<ListEntry>,
}

/// One lock in `zklock list --json`.
#[derive(Serialize)]
struct ListEntry {
    path: String,
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    holders: usize,
    waiting: usize,
    /// Seconds the longest-holding holder has held (or, for other clients'
    /// holders, been queued), none when nobody holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    oldest_held_seconds: Option<f64>,
}

pub fn list(args: ListArgs) -> Result<Exit> {
    session::block_on(async {
        let session = Session::connect(&args.connection.settings()?).await?;
        let tree = inspect::read_tree(session.client(), args.prefix.as_str()).await;
        session.close(&[]).await;
        let now = SystemTime::now();
        let locks: Vec<ListEntry> = tree?
            .into_iter()
            .map(|(path, view)| {
                let lock = present::lock_json(&path, &view, now);
                ListEntry {
                    kind: lock.kind,
                    limit: lock.limit,
                    holders: lock.holders.len(),
                    waiting: lock.waiting.len(),
                    oldest_held_seconds: lock
                        .holders
                        .iter()
                        .filter_map(|h| h.held_seconds)
                        .reduce(f64::max),
                    path,
                }
            })
            .collect();
        if args.json {
            print_stdout(&serde_json::to_string_pretty(&ListJson { locks })?);
        } else {
            let lines: Vec<String> = locks.iter().map(line).collect();
            print_stdout(&lines.join("\n"));
        }
        Ok(Exit::Command(0))
    })
}

fn line(lock: &ListEntry) -> String {
    let kind = match lock.limit {
        Some(limit) => format!("semaphore of {limit}"),
        None => lock.kind.to_owned(),
    };
    let held = match lock.oldest_held_seconds {
        Some(age) => format!(", held {}", human_age(age)),
        None => String::new(),
    };
    format!(
        "{}  {kind}, {} holding, {} waiting{held}",
        escape_controls(&lock.path),
        lock.holders,
        lock.waiting
    )
}
