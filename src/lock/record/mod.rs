//! The run record of `--once-per` (docs/design.md, "The run record"): what
//! it holds and what it decides (pure); its reads and writes are
//! `store.rs`.

mod store;

use serde::{Deserialize, Serialize};

pub use self::store::{Recorded, read, record, rewrite, stamp};
use crate::lock::recipe;

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
