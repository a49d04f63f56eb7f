//! Reading and writing the run record (`record.rs`) in ZooKeeper. Every
//! write is versioned: a record changed since it was read is read again,
//! never overwritten blindly.

use anyhow::{Context, Result, bail};
use zookeeper_client as zk;

use crate::lock::directory::NodeStat;
use crate::lock::inspect::node_stat;
use crate::lock::record::{Record, RunRecord, record_path};
use crate::session::retrying;

/// Versioned writes that keep failing mean someone else keeps writing the
/// record: give up rather than spin.
const TRIES: usize = 10;

/// The record of the lock at `lock`, if there is one.
pub async fn read(client: &zk::Client, lock: &str) -> Result<Option<(Record, NodeStat)>> {
    let path = record_path(lock);
    match retrying(|| client.get_data(&path)).await {
        Ok((data, stat)) => Ok(Some((Record::parse(&data), node_stat(&stat)))),
        Err(zk::Error::NoNode) => Ok(None),
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

/// Rewrites the record unchanged (creating it if missing) to learn the
/// server's time from the write's mtime. Call it while holding the lock.
pub async fn stamp(client: &zk::Client, lock: &str, acls: &[zk::Acl]) -> Result<Stamped> {
    let path = record_path(lock);
    for _ in 0..TRIES {
        let (data, stat) = match retrying(|| client.get_data(&path)).await {
            Err(zk::Error::NoNode) => {
                let empty = Record::default();
                let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::new(acls));
                match retrying(|| client.create(&path, &empty.to_bytes(), &persistent)).await {
                    Ok((stat, _)) => {
                        return Ok(Stamped {
                            record: empty,
                            version: stat.version,
                            now_ms: stat.mtime,
                        });
                    }
                    // Created meanwhile (or by our own lost reply): read it.
                    Err(zk::Error::NodeExists) => continue,
                    Err(err) => return Err(err).with_context(|| format!("creating {path}")),
                }
            }
            result => result.with_context(|| format!("reading {path}"))?,
        };
        match retrying(|| client.set_data(&path, &data, Some(stat.version))).await {
            Ok(written) => {
                return Ok(Stamped {
                    record: Record::parse(&data),
                    version: written.version,
                    now_ms: written.mtime,
                });
            }
            Err(zk::Error::BadVersion | zk::Error::NoNode) => continue,
            Err(err) => return Err(err).with_context(|| format!("writing {path}")),
        }
    }
    bail!("{path} keeps changing; not running")
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
    client: &zk::Client,
    lock: &str,
    mut known: Option<(Record, i32)>,
    run: &RunRecord,
    acls: &[zk::Acl],
) -> Result<Recorded> {
    let path = record_path(lock);
    for _ in 0..TRIES {
        let (record, expected) = match known.take() {
            Some(known) => known,
            None => match retrying(|| client.get_data(&path)).await {
                Ok((data, stat)) => (Record::parse(&data), stat.version),
                Err(zk::Error::NoNode) => {
                    let data = Record::default().with_run(run.clone()).to_bytes();
                    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::new(acls));
                    match retrying(|| client.create(&path, &data, &persistent)).await {
                        Ok(_) => return Ok(Recorded::Done),
                        Err(zk::Error::NodeExists) => continue,
                        Err(err) => return Err(err).with_context(|| format!("creating {path}")),
                    }
                }
                Err(err) => return Err(err).with_context(|| format!("reading {path}")),
            },
        };
        if let Some(later) = record
            .last_run
            .as_ref()
            .filter(|last| last.fencing_token > run.fencing_token)
        {
            return Ok(Recorded::Superseded(later.clone()));
        }
        if record.last_run.as_ref() == Some(run) {
            // Our own write, whose reply was lost.
            return Ok(Recorded::Done);
        }
        let data = record.with_run(run.clone()).to_bytes();
        match retrying(|| client.set_data(&path, &data, Some(expected))).await {
            Ok(_) => return Ok(Recorded::Done),
            Err(zk::Error::BadVersion | zk::Error::NoNode) => continue,
            Err(err) => return Err(err).with_context(|| format!("writing {path}")),
        }
    }
    bail!("{path} keeps changing; this run is not recorded")
}
