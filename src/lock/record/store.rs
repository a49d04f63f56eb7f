//! The run record's reads and writes in ZooKeeper. Every write is
//! versioned: a record changed since it was read is read again, never
//! overwritten.

use anyhow::{Context, Result, bail};
use zklock::zk;
use zklock::zk::ops::CreateMode;

use super::{Record, RunRecord, Running, record_path};
use crate::session::retrying;

/// Versioned writes that keep failing mean someone else keeps writing the
/// record: give up rather than spin.
const TRIES: usize = 10;

/// The record of the lock at `lock`, if there is one.
pub async fn read(
    client: &zk::client::Client,
    lock: &str,
) -> Result<Option<(Record, zk::records::Stat)>> {
    let path = record_path(lock);
    match retrying(|| client.call(|b| b.get_data(&path, false)))
        .await
        .map(|d| (d.data, d.stat))
    {
        Ok((data, stat)) => Ok(Some((Record::parse(&data), stat))),
        Err(zk::records::Error::NoNode) => Ok(None),
        Err(err) => Err(err).with_context(|| format!("reading {path}")),
    }
}

/// The record as it was, and the server's time now.
#[derive(Debug)]
pub struct Stamped {
    pub record: Record,
    /// The record's version after our write.
    pub version: i32,
    /// The mtime our write got: the server's clock, now.
    pub now_ms: i64,
}

/// Rewrites the record (creating it if missing), marked as stamped by
/// `running`, to learn the server's time from the write's mtime. Call it
/// while holding the lock.
pub async fn stamp(
    client: &zk::client::Client,
    lock: &str,
    acls: &[zk::records::Acl],
    running: &Running,
) -> Result<Stamped> {
    let path = record_path(lock);
    let marked = |data: Option<&[u8]>| {
        let mut record = data.map(Record::parse).unwrap_or_default();
        record.running = Some(running.clone());
        Ok::<_, std::convert::Infallible>(record.to_bytes())
    };
    let Ok((data, written)) = rewrite(client, &path, acls, None, "not running", marked).await?;
    Ok(Stamped {
        record: Record::parse(&data),
        version: written.version,
        now_ms: written.mtime,
    })
}

/// How recording a run ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Recorded {
    Done,
    /// A run with a later fencing token recorded meanwhile (our lock was
    /// lost or broken): its record stands.
    Superseded(RunRecord),
}

/// Records `run` into the record, expected to be `known` (as [`stamp`]
/// left it, with its version). If the record changed since, it is read
/// again and `run` is merged into it, unless a later holder's run is
/// recorded there.
pub async fn record(
    client: &zk::client::Client,
    lock: &str,
    known: Option<(Record, i32)>,
    run: &RunRecord,
    acls: &[zk::records::Acl],
) -> Result<Recorded> {
    let known = known.map(|(record, version)| (record.to_bytes(), version));
    let mut later = None;
    let with_run = |data: Option<&[u8]>| {
        let record = data.map(Record::parse).unwrap_or_default();
        let last = record.last_run.as_ref();
        later = last
            .filter(|last| last.fencing_token > run.fencing_token)
            .cloned();
        // Nothing to write past a later run, or our own (a reply lost).
        match later.is_none() && last != Some(run) {
            true => Ok(record.with_run(run.clone()).to_bytes()),
            false => Err(()),
        }
    };
    let path = record_path(lock);
    let not_done = "this run is not recorded";
    let _stopped = rewrite(client, &path, acls, known, not_done, with_run).await?;
    Ok(later.map_or(Recorded::Done, Recorded::Superseded))
}

/// Writes at `path` what `change` makes of its data (`None`: no record
/// yet), at the version read or by creating it; read again when someone
/// else wrote meanwhile (or a create's lost reply was ours). `known` (data
/// and version) stands in for the first read. `change` may stop with a
/// value instead. What was written, and the write's stat.
pub async fn rewrite<T>(
    client: &zk::client::Client,
    path: &str,
    acls: &[zk::records::Acl],
    mut known: Option<(Vec<u8>, i32)>,
    not_done: &str,
    mut change: impl FnMut(Option<&[u8]>) -> Result<Vec<u8>, T>,
) -> Result<Result<(Vec<u8>, zk::records::Stat), T>> {
    for _ in 0..TRIES {
        let current = match known.take() {
            Some(known) => Some(known),
            None => match retrying(|| client.call(|b| b.get_data(path, false)))
                .await
                .map(|d| (d.data, d.stat))
            {
                Ok((data, stat)) => Some((data, stat.version)),
                Err(zk::records::Error::NoNode) => None,
                Err(err) => return Err(err).with_context(|| format!("reading {path}")),
            },
        };
        let data = match change(current.as_ref().map(|(data, _)| data.as_slice())) {
            Ok(data) => data,
            Err(stop) => return Ok(Err(stop)),
        };
        let written = match current {
            Some((_, version)) => {
                match retrying(|| client.call(|b| b.set_data(path, &data, version))).await {
                    Err(zk::records::Error::BadVersion | zk::records::Error::NoNode) => None,
                    result => Some(result.with_context(|| format!("writing {path}"))?),
                }
            }
            None => {
                let create =
                    || client.call(|b| b.create(path, &data, acls, CreateMode::Persistent));
                match retrying(create).await {
                    Err(zk::records::Error::NodeExists) => None,
                    result => Some(result.with_context(|| format!("creating {path}"))?.stat),
                }
            }
        };
        if let Some(stat) = written {
            return Ok(Ok((data, stat)));
        }
    }
    bail!("{path} keeps changing; {not_done}")
}
