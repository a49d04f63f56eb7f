//! The run record of `--once-per` (docs/design.md, "The run record"): what
//! it decides (pure), and its reads and writes. Every write is versioned: a
//! record changed since it was read is read again, never overwritten.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use zklock::zk;
use zklock::zk::ops::CreateMode;

use crate::lock::recipe;
use crate::session::retrying;

/// The record's name under the lock path: no recipe takes it for a contender.
pub const RECORD: &str = "zklock.record";

/// The record's path for a lock path.
pub fn record_path(lock: &str) -> String {
    recipe::child(lock, RECORD)
}

/// What the record node holds, as JSON (field names are a public contract).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<RunRecord>,
    /// The holder that last stamped the record: the run going on, if its
    /// node is still there (hosts that fire meanwhile wait for its outcome
    /// here rather than in the queue); cleared when a run is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<Running>,
}

/// The holder that stamped the record: its node (a full path) and token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    pub node: String,
    pub fencing_token: i64,
}

/// One run. Times are the server's (milliseconds since the epoch, and the
/// same as RFC 3339 text for people).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// When the run's zklock held the lock and decided to run: the mtime
    /// of its write to the record.
    pub start_ms: i64,
    pub start: String,
    /// `start_ms` plus the run's duration as measured on its host.
    pub end_ms: i64,
    pub end: String,
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// zklock's exit status for the run.
    pub exit_status: u8,
    pub fencing_token: i64,
}

impl Record {
    /// Parses node data; empty or foreign data is an empty record, so a
    /// damaged record never stops the job for good.
    pub fn parse(data: &[u8]) -> Record {
        serde_json::from_slice(data).unwrap_or_default()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record always serializes")
    }

    /// The record after `run`: always the last run, and the last success
    /// if it exited 0.
    pub fn with_run(&self, run: RunRecord) -> Record {
        let success = (run.exit_status == 0).then(|| run.clone());
        // A later holder's mark stays: its run goes on.
        let running = (self.running.clone()).filter(|r| r.fencing_token > run.fencing_token);
        Record {
            last_success: success.or_else(|| self.last_success.clone()),
            last_run: Some(run),
            running,
        }
    }
}

/// Whether a run that holds the lock at server time `now_ms` may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Run,
    /// Run, although the record's last success is dated more than the
    /// window after now: a date no clock skew explains is not believed.
    RunPastFuture {
        last: RunRecord,
        ahead_ms: i64,
    },
    /// The last success started `ago_ms` before now (negative: after),
    /// within the window.
    Skip {
        last: RunRecord,
        ago_ms: i64,
    },
    /// The last run failed `ago_ms` before now (negative: after), within
    /// `--retry-after`.
    Retry {
        failed: RunRecord,
        ago_ms: i64,
    },
}

/// Whether a run started at `start_ms` lies within `span_ms` of `now_ms`:
/// less than `span_ms` ago, or not more than `span_ms` ahead (a leader's
/// clock behind the last one's; further ahead is a bogus date).
fn within(start_ms: i64, now_ms: i64, span_ms: i64) -> bool {
    let ago = now_ms.saturating_sub(start_ms);
    ago < span_ms && ago >= span_ms.saturating_neg()
}

/// The decision of `--once-per WINDOW` and `--retry-after RETRY` (0: none),
/// on server times only. A recent success skips; otherwise a recent failure
/// (the last run, when it failed) waits out RETRY from its start.
pub fn decide(record: &Record, now_ms: i64, window_ms: i64, retry_ms: i64) -> Verdict {
    if let Some(last) = &record.last_success {
        if within(last.start_ms, now_ms, window_ms) {
            return Verdict::Skip {
                last: last.clone(),
                ago_ms: now_ms - last.start_ms,
            };
        }
    }
    if let Some(failed) = record.last_run.as_ref().filter(|run| run.exit_status != 0) {
        if retry_ms > 0 && within(failed.start_ms, now_ms, retry_ms) {
            return Verdict::Retry {
                failed: failed.clone(),
                ago_ms: now_ms - failed.start_ms,
            };
        }
    }
    match &record.last_success {
        Some(last) if last.start_ms > now_ms => Verdict::RunPastFuture {
            last: last.clone(),
            ahead_ms: last.start_ms - now_ms,
        },
        _ => Verdict::Run,
    }
}

/// The last success to report (`--metrics-file`) for a record read at
/// server time `now_ms`: never later than now. A success dated ahead
/// within the window, taken as recent, counts as now; one further ahead,
/// not believed, is left out.
pub fn reported_success(record: &Record, now_ms: i64, window_ms: i64) -> Option<i64> {
    let start = record.last_success.as_ref()?.start_ms;
    if start <= now_ms {
        Some(start)
    } else {
        within(start, now_ms, window_ms).then_some(now_ms)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::recipe::{SEMAPHORE_GATE, SEMAPHORE_LEASES};

    const HOUR: i64 = 3_600_000;

    fn run(start_ms: i64, exit_status: u8, token: i64) -> RunRecord {
        RunRecord {
            start_ms,
            start: String::new(),
            end_ms: start_ms.saturating_add(10),
            end: String::new(),
            host: "web1".into(),
            user: None,
            exit_status,
            fencing_token: token,
        }
    }

    #[test]
    fn no_recipe_takes_the_record_for_a_contender() {
        assert_eq!(recipe::parse_contender(RECORD), None);
        assert!(!recipe::looks_like_semaphore(&[RECORD.to_owned()]));
        assert_ne!(RECORD, SEMAPHORE_GATE);
        assert_ne!(RECORD, SEMAPHORE_LEASES);
        // Curator's markers (its mutex matches `lock-`), kazoo's names.
        for marker in ["lock-", "__READ__", "__WRIT__", "__lock__", "__rlock__"] {
            assert!(!RECORD.contains(marker), "{marker}");
        }
        assert_eq!(record_path("/locks/x"), "/locks/x/zklock.record");
        assert_eq!(record_path("/"), "/zklock.record");
    }

    #[test]
    fn window_decides_on_the_last_success_start() {
        let empty = Record::default();
        assert_eq!(decide(&empty, 5 * HOUR, HOUR, 0), Verdict::Run);
        let ran = empty.with_run(run(2 * HOUR, 0, 7));
        assert_eq!(
            decide(&ran, 2 * HOUR + 1000, HOUR, 0),
            Verdict::Skip {
                last: run(2 * HOUR, 0, 7),
                ago_ms: 1000
            }
        );
        assert_eq!(decide(&ran, 3 * HOUR, HOUR, 0), Verdict::Run);
        // A server clock behind the record's by up to the window: recent.
        assert_eq!(
            decide(&ran, 2 * HOUR - 5000, HOUR, 0),
            Verdict::Skip {
                last: run(2 * HOUR, 0, 7),
                ago_ms: -5000
            }
        );
        assert!(matches!(decide(&ran, HOUR, HOUR, 0), Verdict::Skip { .. }));
        // Further ahead than the window: not believed.
        assert_eq!(
            decide(&ran, HOUR - 1, HOUR, 0),
            Verdict::RunPastFuture {
                last: run(2 * HOUR, 0, 7),
                ahead_ms: HOUR + 1
            }
        );
        let absurd = empty.with_run(run(i64::MAX, 0, 7));
        assert!(matches!(
            decide(&absurd, HOUR, HOUR, HOUR),
            Verdict::RunPastFuture { .. }
        ));
        let ancient = empty.with_run(run(i64::MIN, 0, 7));
        assert_eq!(decide(&ancient, HOUR, HOUR, HOUR), Verdict::Run);
    }

    #[test]
    fn a_failure_waits_out_retry_after_from_its_start() {
        let ok = Record::default().with_run(run(0, 0, 1));
        let failed = ok.with_run(run(30 * HOUR, 1, 2));
        // A window of 20 hours, and a --retry-after of 2.
        let decide_at = |record: &Record, now| decide(record, now, 20 * HOUR, 2 * HOUR);
        // Without --retry-after, the next run retries at once.
        assert_eq!(decide(&failed, 30 * HOUR + 1, 20 * HOUR, 0), Verdict::Run);
        assert_eq!(
            decide_at(&failed, 31 * HOUR),
            Verdict::Retry {
                failed: run(30 * HOUR, 1, 2),
                ago_ms: HOUR
            }
        );
        assert_eq!(decide_at(&failed, 32 * HOUR), Verdict::Run);
        // A recent success still says so first; a success after the
        // failure ends the wait.
        assert!(matches!(
            decide_at(&failed, 10 * HOUR),
            Verdict::Skip { .. }
        ));
        let recovered = failed.with_run(run(31 * HOUR, 0, 3));
        assert_eq!(decide_at(&recovered, 52 * HOUR), Verdict::Run);
        // A failure dated ahead: within RETRY of now waits, further is bogus.
        assert!(matches!(
            decide_at(&failed, 29 * HOUR),
            Verdict::Retry { ago_ms, .. } if ago_ms == -HOUR
        ));
        assert_eq!(decide_at(&failed, 27 * HOUR), Verdict::Run);
    }

    #[test]
    fn the_reported_success_is_never_after_now() {
        assert_eq!(reported_success(&Record::default(), HOUR, HOUR), None);
        let ran = Record::default().with_run(run(2 * HOUR, 0, 7));
        assert_eq!(reported_success(&ran, 5 * HOUR, HOUR), Some(2 * HOUR));
        assert_eq!(
            reported_success(&ran, 2 * HOUR - 10, HOUR),
            Some(2 * HOUR - 10)
        );
        assert_eq!(reported_success(&ran, HOUR - 1, HOUR), None);
    }

    #[test]
    fn a_failure_is_the_last_run_only() {
        let ok = Record::default().with_run(run(1000, 0, 1));
        let failed = ok.with_run(run(2000, 1, 2));
        assert_eq!(failed.last_run, Some(run(2000, 1, 2)));
        assert_eq!(failed.last_success, Some(run(1000, 0, 1)));
        assert_eq!(Record::parse(&failed.to_bytes()), failed);
        assert_eq!(Record::parse(b"garbage"), Record::default());
        assert_eq!(Record::parse(b""), Record::default());
    }
}
