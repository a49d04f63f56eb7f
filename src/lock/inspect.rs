//! Reading lock directories for `status`, `list` and `break`: many reads in
//! flight at once (multi-reads, batched), interpreted by `directory.rs`.

use anyhow::{Context, Result};
use futures::future::join_all;
use zklock::zk::answers::ReadResult;
use zklock::zk::client::Client;
use zklock::zk::ops::ReadOp;
use zklock::zk::records::Error;

use crate::lock::directory::{self, ChildNode, LockView};
use crate::lock::recipe::{self, SEMAPHORE_GATE, SEMAPHORE_LEASES};
use crate::session::retrying;

/// Operations per multi-read: small enough that an answer stays far below
/// the server's 1 MB packet limit even with long names and holder data.
const BATCH: usize = 100;

/// The holders and queue of the lock at `path`; a missing path is free.
pub async fn read_lock(client: &Client, path: &str) -> Result<LockView> {
    let children = list(client, path).await?;
    if recipe::looks_like_semaphore(&children) {
        if let Some(limit) = read_limit(client, path).await? {
            return read_semaphore(client, path, limit).await;
        }
    }
    let contenders: Vec<String> = children
        .into_iter()
        .filter(|c| recipe::parse_contender(c).is_some())
        .collect();
    let nodes = read_nodes(client, path, contenders).await?;
    Ok(directory::plain_lock(nodes))
}

/// The children of `dir`; none if it does not exist.
async fn list(client: &Client, dir: &str) -> Result<Vec<String>> {
    match retrying(|| client.call(|b| b.get_children(dir, false)))
        .await
        .map(|c| c.children)
    {
        Err(Error::NoNode) => Ok(Vec::new()),
        result => result.with_context(|| format!("listing {dir}")),
    }
}

/// A semaphore's limit: the data of its directory, if it is one.
async fn read_limit(client: &Client, path: &str) -> Result<Option<u32>> {
    match retrying(|| client.call(|b| b.get_data(path, false))).await {
        Err(Error::NoNode) => Ok(None),
        result => Ok(recipe::decode_limit(
            &result.with_context(|| format!("reading {path}"))?.data,
        )),
    }
}

async fn read_semaphore(client: &Client, path: &str, limit: u32) -> Result<LockView> {
    let leases = recipe::child(path, SEMAPHORE_LEASES);
    let gate = recipe::child(path, SEMAPHORE_GATE);
    let leases = read_nodes(client, &leases, list(client, &leases).await?).await?;
    let gate = read_nodes(client, &gate, list(client, &gate).await?).await?;
    Ok(directory::semaphore(limit, leases, gate))
}

/// Data and stat of the children `names` of `dir`.
async fn read_nodes(client: &Client, dir: &str, names: Vec<String>) -> Result<Vec<ChildNode>> {
    let paths: Vec<String> = names.iter().map(|n| recipe::child(dir, n)).collect();
    let results = multi_read(client, &paths, Read::Data).await?;
    Ok(child_nodes(names, results))
}

/// Each name with its read; those deleted meanwhile are left out.
fn child_nodes(
    names: impl IntoIterator<Item = String>,
    reads: impl IntoIterator<Item = Result<ReadResult, Error>>,
) -> Vec<ChildNode> {
    names
        .into_iter()
        .zip(reads)
        .filter_map(|(name, read)| match read {
            Ok(ReadResult::Data { data, stat }) => Some(ChildNode { name, stat, data }),
            _ => None,
        })
        .collect()
}

#[derive(Clone, Copy)]
enum Read {
    Data,
    Children,
}

/// One read per path, as multi-reads of [`BATCH`] operations, all in flight
/// at once; the results in the order of `paths`.
async fn multi_read(
    client: &Client,
    paths: &[String],
    read: Read,
) -> Result<Vec<Result<ReadResult, Error>>> {
    let mut batches = Vec::new();
    for chunk in paths.chunks(BATCH) {
        let reads = (chunk.iter().cloned())
            .map(|path| match read {
                Read::Data => ReadOp::GetData(path),
                Read::Children => ReadOp::GetChildren(path),
            })
            .collect();
        batches.push(client.read_many(reads));
    }
    let mut results = Vec::with_capacity(paths.len());
    for batch in join_all(batches).await {
        results.extend(batch.context("reading the tree")?);
    }
    Ok(results)
}

/// Every lock under `prefix` (itself included), with its view, in bytewise
/// path order. The tree is read level by level, each level in batched
/// multi-reads all in flight at once; lock nodes (ephemerals) and a
/// semaphore's own `locks`/`leases` are not descended into.
pub async fn read_tree(client: &Client, prefix: &str) -> Result<Vec<(String, LockView)>> {
    let mut found = Vec::new();
    let mut level = vec![prefix.to_owned()];
    while !level.is_empty() {
        let listings = multi_read(client, &level, Read::Children).await?;
        let mut next = Vec::new();
        let mut semaphores = Vec::new();
        let mut plain = Vec::new();
        for (dir, listing) in level.iter().zip(listings) {
            let Ok(ReadResult::Children(children)) = listing else {
                continue;
            };
            let (contenders, others): (Vec<String>, Vec<String>) = children
                .into_iter()
                .partition(|c| recipe::parse_contender(c).is_some());
            if recipe::looks_like_semaphore(&others) {
                semaphores.push(dir.clone());
            } else if !contenders.is_empty() {
                plain.push((dir.clone(), contenders));
            }
            next.extend(
                others
                    .iter()
                    // ZooKeeper's own subtree holds no locks.
                    .filter(|c| !(dir == "/" && c.as_str() == "zookeeper"))
                    .map(|c| recipe::child(dir, c)),
            );
        }
        for dir in semaphores {
            if let Some(limit) = read_limit(client, &dir).await? {
                let gate = recipe::child(&dir, SEMAPHORE_GATE);
                let leases = recipe::child(&dir, SEMAPHORE_LEASES);
                next.retain(|p| *p != gate && *p != leases);
                found.push((dir.clone(), read_semaphore(client, &dir, limit).await?));
            }
        }
        let paths: Vec<String> = plain
            .iter()
            .flat_map(|(dir, names)| names.iter().map(move |n| recipe::child(dir, n)))
            .collect();
        let mut reads = multi_read(client, &paths, Read::Data).await?.into_iter();
        for (dir, names) in plain {
            let count = names.len();
            let nodes = child_nodes(names, reads.by_ref().take(count));
            found.push((dir, directory::plain_lock(nodes)));
        }
        level = next;
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}
