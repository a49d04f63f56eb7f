//! `--once-per` in a fleet (docs/design.md, "The run record"): a host that
//! fires while another runs the job waits for that run's outcome on the
//! record, not in the queue, and ends as soon as the record shows it
//! succeeded; one that fires after a success ends on the record alone. Only
//! a host that finds no run going on lists the queue, and a host already in
//! the queue ends too once the record shows the success.

use std::time::Duration;

use anyhow::{Context, Result};
use zklock::zk::burst::{Data, Pending};
use zklock::zk::client::Client;
use zklock::zk::records::Error;
use zklock::zk::watches::Watch;

use super::plan::Plan;
use super::wait::WaitReport;
use crate::lock::queue::Node;
use crate::lock::recipe;
use crate::lock::record::{self, Record, Verdict};
use crate::session::{is_connection_loss, retrying};

/// How long each place between a failed run's node and ours delays our
/// look at the queue: the next host looks at once and announces its run
/// on the record before the others look, and they wait for it again.
const STAGGER: Duration = Duration::from_millis(50);

/// At most this many places of [`STAGGER`].
const STAGGER_PLACES: u64 = 100;

/// The record as a host read it, the server's time it is judged at, and
/// the watch on it.
pub struct Read {
    pub record: Record,
    pub now_ms: i64,
    watch: Option<Watch>,
}

/// What the record says to a host that fired.
pub enum Gate {
    /// The run is not for us (recorded or going on, then succeeded): skip.
    Skip(Read),
    /// Queue (list the queue, wait for the lock), until the record shows
    /// a success ([`until_recorded`]).
    Queue(Read),
}

/// Our node, created without listing the queue, as the record was read in
/// the same burst: when we fired, on the server's clock (its ctime).
pub async fn fired_at(client: &Client, node: &Node) -> Result<i64> {
    let found = retrying(|| client.call(|b| b.exists(&node.path, false))).await;
    let found = found.context("reading our node")?;
    Ok(found.stat.map_or(0, |stat| stat.ctime))
}

/// Waits out a run going on (the record's `running`, while its node is
/// there), from `first` (the record as read with our node's create).
/// `observer` hears of it once it waits: the record was its first look
/// (`--timeout` may end the wait from then on), and that run holds the lock.
pub async fn wait_out(
    plan: &Plan<'_>,
    client: &Client,
    node: &Node,
    fired_ms: i64,
    first: Pending<Data>,
    observer: &mut WaitReport<'_>,
) -> Result<Gate> {
    let mut first = Some(first);
    let mut waited_on = None;
    loop {
        let read = read(plan, client, fired_ms, first.take()).await?;
        if skips(plan, &read) {
            return Ok(Gate::Skip(read));
        }
        // Not waiting (--no-wait): the queue says the lock is taken.
        let runner = (read.record.running.as_ref()).filter(|r| r.node != node.path && plan.wait);
        if let Some(runner) = runner {
            let alive = retrying(|| client.call(|b| b.exists(&runner.node, true))).await;
            let alive = alive.context("looking for the run going on")?;
            if alive.stat.is_some() {
                observer.waiting_on_run(&runner.node);
                waited_on = Some(runner.node.clone());
                first_of(read.watch, alive.watch).await;
                continue;
            }
        }
        // The run we waited for ended without a success: the host after it
        // looks first.
        if let Some(runner) = waited_on.take() {
            let marker = crate::lock::marker(plan.kind).unwrap_or_default();
            tokio::time::sleep(stagger(&node.path, &runner, marker)).await;
            continue;
        }
        return Ok(Gate::Queue(read));
    }
}

/// Resolves once the record shows a run that skips ours, from `read`
/// (with its watch); never otherwise.
pub async fn until_recorded(
    plan: &Plan<'_>,
    client: &Client,
    fired_ms: i64,
    mut read: Read,
) -> Result<Read> {
    loop {
        if skips(plan, &read) {
            return Ok(read);
        }
        first_of(read.watch.take(), None).await;
        read = self::read(plan, client, fired_ms, None).await?;
    }
}

/// The record, with a watch, judged at the later of our firing and its
/// last write (both at or before the server's now).
async fn read(
    plan: &Plan<'_>,
    client: &Client,
    fired_ms: i64,
    mut first: Option<Pending<Data>>,
) -> Result<Read> {
    let path = record::record_path(plan.order[0]);
    loop {
        let answer = match first.take() {
            Some(sent) => sent.await,
            None => client.call(|b| b.get_data(&path, true)).await,
        };
        let (record, mtime, watch) = match answer {
            Ok(data) => (Record::parse(&data.data), data.stat.mtime, data.watch),
            // No record yet: watch for its creation (by the first run's
            // stamp), which a read does not set.
            Err(Error::NoNode) => match client.call(|b| b.exists(&path, true)).await {
                Ok(found) if found.stat.is_none() => (Record::default(), 0, found.watch),
                Ok(_) => continue,
                Err(err) if is_connection_loss(&err) => continue,
                Err(err) => return Err(err).with_context(|| format!("reading {path}")),
            },
            Err(err) if is_connection_loss(&err) => continue,
            Err(err) => return Err(err).with_context(|| format!("reading {path}")),
        };
        let now_ms = fired_ms.max(mtime);
        return Ok(Read {
            record,
            now_ms,
            watch,
        });
    }
}

/// Whether the record skips a run at its time (a recent success, or a
/// failure within --retry-after).
fn skips(plan: &Plan<'_>, read: &Read) -> bool {
    let millis = |d: Duration| d.as_millis().min(i64::MAX as u128) as i64;
    let window = plan.once_per.map_or(0, |w| millis(w.0));
    let retry = millis(plan.retry_after.0);
    matches!(
        record::decide(&read.record, read.now_ms, window, retry),
        Verdict::Skip { .. } | Verdict::Retry { .. }
    )
}

/// The first of two watches to fire (None: never).
async fn first_of(a: Option<Watch>, b: Option<Watch>) {
    let fired = |watch: Option<Watch>| async move {
        match watch {
            Some(watch) => drop(watch.await),
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = fired(a) => {}
        () = fired(b) => {}
    }
}

/// How long the host at `mine` waits before it queues after the run at
/// `runner` (both full paths) ended without a success: [`STAGGER`] for
/// each place between them.
fn stagger(mine: &str, runner: &str, marker: &str) -> Duration {
    let sequence = |path: &str| {
        let name = path.rsplit('/').next()?;
        recipe::sequence_after(name, marker)?.parse::<u64>().ok()
    };
    match (sequence(mine), sequence(runner)) {
        (Some(mine), Some(runner)) if mine > runner => {
            STAGGER * (mine - runner - 1).min(STAGGER_PLACES) as u32
        }
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_after_a_failed_run_looks_first_the_others_in_turn() {
        let node = |seq: u32| format!("/locks/x/_c_5f2e-lock-{seq:010}");
        let at = |mine, runner| stagger(&node(mine), &node(runner), "-lock-");
        assert_eq!(at(8, 7), Duration::ZERO);
        assert_eq!(at(10, 7), STAGGER * 2);
        assert_eq!(at(100_000, 7), STAGGER * STAGGER_PLACES as u32);
        assert_eq!(at(7, 9), Duration::ZERO, "ahead of it: no wait");
        let foreign = stagger("/locks/x/other", &node(7), "-lock-");
        assert_eq!(foreign, Duration::ZERO);
    }
}
