//! `zklock status PATH...`: who holds each lock and who waits.

use std::time::SystemTime;

use anyhow::Result;
use zklock::zk;

use crate::cli::StatusArgs;
use crate::exit::Exit;
use crate::lock::directory::PathKind;
use crate::lock::recipe::{self, SEMAPHORE_GATE, SEMAPHORE_LEASES};
use crate::lock::{inspect, parents, record};
use crate::present::json::{self, StatusJson};
use crate::present::{self, LockStatus};
use crate::report::print_stdout;
use crate::session::{self, Session};

pub fn status(args: StatusArgs) -> Result<Exit> {
    session::block_on(async {
        let settings = args.connection.settings()?;
        // As `run` does, only when our ACL keeps others from deleting.
        let guarded = !parents::anyone_may_delete(&settings.acl.to_zk());
        let session = Session::connect(&settings).await?;
        let reading = async |session: &Session| {
            let mut locks = Vec::new();
            for path in &args.paths {
                locks.push(lock_status(session.client(), path.as_str(), guarded).await?);
            }
            anyhow::Ok(locks)
        };
        let locks = session.scope(reading).await.0?;
        let any_taken =
            (locks.iter()).any(|l| !l.view.holders.is_empty() || !l.view.waiting.is_empty());
        if args.json {
            let locks = locks.iter().map(json::lock).collect();
            print_stdout(&serde_json::to_string_pretty(&StatusJson { locks })?);
        } else {
            let text: Vec<String> = locks.iter().map(present::lock_text).collect();
            print_stdout(text.concat().trim_end());
        }
        Ok(if any_taken {
            Exit::Held
        } else {
            Exit::Command(0)
        })
    })
}

/// The lock at `path` with its run record and ACL warning.
async fn lock_status(client: &zk::client::Client, path: &str, guarded: bool) -> Result<LockStatus> {
    let (view, open) = tokio::join!(
        inspect::read_lock(client, path),
        open_dirs(client, path, guarded),
    );
    let view = view?;
    // A plain lock's nodes are in PATH, a semaphore's in its leases and gate.
    let semaphore = matches!(view.kind, PathKind::Semaphore { .. });
    let mut status = LockStatus::new(path, view, SystemTime::now());
    status.unprotected = open
        .into_iter()
        .find(|(dir, _)| (dir == path) != semaphore)
        .map(|(_, problem)| problem);
    if let Some((record, _)) = record::read(client, path).await? {
        status.record = record;
    }
    Ok(status)
}

/// The directories that may hold `path`'s nodes (the path, a semaphore's
/// leases and gate) whose ACL lets anyone delete them, with why; their ACLs
/// are asked for all at once, alongside the lock's own reads. Nothing when
/// not `guarded` or not readable.
async fn open_dirs(
    client: &zk::client::Client,
    path: &str,
    guarded: bool,
) -> Vec<(String, String)> {
    if !guarded {
        return Vec::new();
    }
    let dirs = [
        path.to_owned(),
        recipe::child(path, SEMAPHORE_LEASES),
        recipe::child(path, SEMAPHORE_GATE),
    ];
    let answers =
        futures::future::join_all(dirs.iter().map(|dir| client.call(|b| b.get_acl(dir)))).await;
    let open = |(dir, answer): (
        String,
        Result<(Vec<zk::records::Acl>, zk::records::Stat), zk::records::Error>,
    )| {
        let problem = parents::open_dir_problem(&dir, &answer.ok()?.0)?;
        Some((dir, problem))
    };
    dirs.into_iter().zip(answers).filter_map(open).collect()
}
