//! `--once-per DURATION`: once the lock is held, run the command only if the
//! run record allows it, on the server's clock; record the run before
//! releasing the lock (docs/design.md, "The run record").

use std::rc::Rc;
use std::time::Duration;

use anyhow::Result;
use tokio::time::Instant;
use zklock::zk;

use super::metrics::{Facts, Skip};
use super::plan::Plan;
use super::{Event, Outputs};
use crate::exit::{Exit, Step};
use crate::lock::queue::Node;
use crate::lock::record::{self, Record, Recorded, RunRecord, Running, Verdict};
use crate::present::run_text;
use crate::values::Precision::Millis;
use crate::values::{human_duration, rfc3339, server_time};

/// A run that may go ahead, to be recorded once the command is done.
pub struct Pending {
    lock: String,
    known: Option<(Record, i32)>,
    start_ms: i64,
    started: Instant,
    token: i64,
    facts: Rc<Facts>,
}

/// Decides, holding the lock on `held`, whether the command runs:
/// no pending run without `--once-per`; the end when it is skipped.
pub async fn check(
    plan: &Plan<'_>,
    client: &zk::client::Client,
    held: &[Node],
    out: &Outputs,
) -> Result<Step<Option<Pending>>> {
    let facts = &out.facts;
    let (Some(window), Some(node)) = (plan.once_per, held.first()) else {
        return Ok(Step::Go(None));
    };
    let lock = plan.order[0];
    let running = Running {
        node: node.path.clone(),
        fencing_token: node.czxid,
    };
    let stamped = record::stamp(client, lock, &plan.acls, &running).await?;
    if let Some(exit) = skip(plan, out, &stamped.record, stamped.now_ms) {
        return Ok(Step::End(exit));
    }
    let (window_ms, retry_ms) = (millis(window.0), millis(plan.retry_after.0));
    let verdict = record::decide(&stamped.record, stamped.now_ms, window_ms, retry_ms);
    if let Verdict::RunPastFuture { last, ahead_ms } = verdict {
        plan.report.note(format_args!(
            "running: {lock} last ran successfully {}, {}; a success dated further \
             ahead than --once-per {window} is not recent",
            when(-ahead_ms),
            run_text(&last),
        ));
    }
    Ok(Step::Go(Some(Pending {
        lock: lock.to_owned(),
        known: Some((stamped.record, stamped.version)),
        start_ms: stamped.now_ms,
        started: Instant::now(),
        token: node.czxid,
        facts: Rc::clone(facts),
    })))
}

/// Whether `record` skips a run at `now_ms` (server clock): the exit, the
/// skip said (and the last success given to the metrics); None: go.
pub fn skip(plan: &Plan<'_>, out: &Outputs, record: &Record, now_ms: i64) -> Option<Exit> {
    let window = plan.once_per?;
    let lock = plan.order[0];
    let window_ms = millis(window.0);
    let retry = plan.retry_after;
    let retry_ms = millis(retry.0);
    out.facts
        .last_success(record::reported_success(record, now_ms, window_ms));
    let skip = |skip: Skip, why: std::fmt::Arguments<'_>| {
        out.emit(Event::Skipped { lock, skip, why });
        Some(plan.conflict)
    };
    match record::decide(record, now_ms, window_ms, retry_ms) {
        Verdict::Skip { last, ago_ms } => skip(
            Skip::Recent,
            format_args!(
                "last ran successfully {}, {}; --once-per {window}",
                when(ago_ms),
                run_text(&last),
            ),
        ),
        Verdict::Retry { failed, ago_ms } => skip(
            Skip::Failed,
            format_args!(
                "last ran {}, {}, and failed (exit status {}); --retry-after {retry}: \
             next try at the first firing after {}",
                when(ago_ms),
                run_text(&failed),
                failed.exit_status,
                rfc3339(
                    server_time(failed.start_ms.saturating_add(retry_ms)),
                    Millis
                ),
            ),
        ),
        _ => None,
    }
}

fn millis(duration: Duration) -> i64 {
    duration.as_millis().min(i64::MAX as u128) as i64
}

/// When a recorded run started, `ago_ms` before now on the server's clock
/// (negative: after).
fn when(ago_ms: i64) -> String {
    let age = human_duration(Duration::from_millis(ago_ms.unsigned_abs()));
    match ago_ms >= 0 {
        true => format!("{age} ago"),
        false => format!("{age} in the future by the server's clock"),
    }
}

impl Pending {
    /// Records the run that ended with `exit`; call it before releasing
    /// the lock. A failure to record is reported, never changes the exit.
    pub async fn finish(self, plan: &Plan<'_>, client: &zk::client::Client, exit: Exit) {
        let end_ms = self.start_ms + self.started.elapsed().as_millis() as i64;
        let run = RunRecord {
            start_ms: self.start_ms,
            start: rfc3339(server_time(self.start_ms), Millis),
            end_ms,
            end: rfc3339(server_time(end_ms), Millis),
            host: plan.own.host.clone().unwrap_or_default(),
            user: plan.own.user.clone(),
            exit_status: exit.code(),
            fencing_token: self.token,
        };
        match record::record(client, &self.lock, self.known, &run, &plan.acls).await {
            Ok(Recorded::Done) if exit == Exit::Command(0) => {
                self.facts.last_success(Some(run.start_ms));
            }
            Ok(Recorded::Done) => {}
            Ok(Recorded::Superseded(later)) => plan.report.error(format_args!(
                "this run is not recorded: {}'s record already has a later run, {}",
                self.lock,
                run_text(&later)
            )),
            Err(err) => plan
                .report
                .error(format_args!("this run is not recorded: {err:#}")),
        }
    }
}
