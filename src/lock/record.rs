//! The run record of `--once-per` (pure parts; the reads and writes are in
//! `record_store.rs`): a persistent child of the lock path holding the last
//! run and the last successful run, in server time.
//!
//! Its name, [`RECORD`], contains none of the markers any lock recipe
//! parses (`-lock-`/`lock-`, `__READ__`, `__WRIT__`, `__lock__`,
//! `__rlock__`) and is neither `locks` nor `leases` (a semaphore's layout):
//! zklock, Curator and kazoo contenders all ignore it, and Curator, which
//! sorts every child by what follows its marker, sorts a name without one
//! after every sequence number.

use serde::{Deserialize, Serialize};

/// The record's name under the lock path.
pub const RECORD: &str = "zklock.record";

/// The record's path for a lock path.
pub fn record_path(lock: &str) -> String {
    if lock == "/" {
        format!("/{RECORD}")
    } else {
        format!("{lock}/{RECORD}")
    }
}

/// What the record node holds, as JSON (field names are a public contract,
/// listed in the README).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<RunRecord>,
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
    /// zklock's exit status for the run (the command's, 124 on
    /// `--max-runtime`, 128+N for a signal, 76 when the lock was lost).
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
        Record {
            last_success: if run.exit_status == 0 {
                Some(run.clone())
            } else {
                self.last_success.clone()
            },
            last_run: Some(run),
        }
    }
}

/// Whether a run that holds the lock at server time `now_ms` may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Run,
    /// The last success started `ago_ms` before now, within the window.
    Skip {
        last: RunRecord,
        ago_ms: i64,
    },
}

/// The decision of `--once-per WINDOW`, on server times only. A last
/// success stamped after `now_ms` (the ensemble's leader changed to one
/// whose clock is behind) counts as within the window: skipping a run is
/// the failure that can be noticed and retried, running twice is not.
pub fn decide(record: &Record, now_ms: i64, window_ms: i64) -> Verdict {
    match &record.last_success {
        Some(last) if now_ms - last.start_ms < window_ms => Verdict::Skip {
            last: last.clone(),
            ago_ms: now_ms - last.start_ms,
        },
        _ => Verdict::Run,
    }
}

/// Server milliseconds since the epoch as RFC 3339, UTC, to the millisecond.
pub fn rfc3339_ms(millis: i64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(millis.max(0) as u64);
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::recipe::{self, SEMAPHORE_GATE, SEMAPHORE_LEASES};

    fn run(start_ms: i64, exit_status: u8, token: i64) -> RunRecord {
        RunRecord {
            start_ms,
            start: String::new(),
            end_ms: start_ms + 10,
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
        let hour = 3_600_000;
        let empty = Record::default();
        assert_eq!(decide(&empty, 5 * hour, hour), Verdict::Run);
        let ran = empty.with_run(run(2 * hour, 0, 7));
        assert_eq!(
            decide(&ran, 2 * hour + 1000, hour),
            Verdict::Skip {
                last: run(2 * hour, 0, 7),
                ago_ms: 1000
            }
        );
        assert_eq!(decide(&ran, 3 * hour, hour), Verdict::Run);
        // A server clock behind the record's: within the window.
        assert!(matches!(
            decide(&ran, 2 * hour - 5000, hour),
            Verdict::Skip { .. }
        ));
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
