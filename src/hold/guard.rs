//! The guard of a hold's steps (docs/design.md, "Holds"): while a hold is
//! bound to a process, its steps (`command::steps`) run under the lock, so
//! they are stopped before the lock can pass to another holder, as `run`
//! stops its command: when the lock is lost or `--max-hold` passes (TERM,
//! KILL after K, by the lease's rule), and by a keeper of their own when
//! the holder is frozen (at the lease deadline) or killed (at once). The
//! node is kept until the steps are gone.

use std::time::Duration;

use anyhow::{Context, Result};
use rustix::process::Signal;
use zklock::zk::clock::{Moment, sleep_until};

use super::bound::Bound;
use crate::command::keeper::Keeper;
use crate::command::steps::Steps;

/// How often to look for steps still running; there is no event for it.
pub(super) const POLL: Duration = Duration::from_millis(20);

/// Dropped without [`Guard::stand_down`], it leaves the keeper to kill the
/// steps when the holder ends: the lock ends with the holder.
pub(super) struct Guard {
    steps: Steps,
    keeper: Option<Keeper>,
    kill_after: Duration,
}

impl Guard {
    /// Starts the keeper of `bound`'s steps; call it before the steps can
    /// run under the lock (before the variables are handed over).
    pub(super) fn start(bound: &Bound, kill_after: Duration) -> Result<Guard> {
        let steps = Steps::of(bound.pid);
        let mut keeper = Keeper::for_steps(&steps).context("starting the keeper of the steps")?;
        keeper
            .wait_ready()
            .context("starting the keeper of the steps")?;
        // The keeper took its pidfd by pid: the process is still the one we
        // are bound to if it is still running now.
        if bound.has_exited() {
            keeper.stand_down();
        }
        Ok(Guard {
            steps,
            keeper: Some(keeper),
            kill_after,
        })
    }

    /// Has the keeper stop the steps at the lease `deadline`, should the
    /// holder be frozen then.
    pub(super) fn follow(&mut self, deadline: Moment) {
        if let Some(keeper) = &mut self.keeper {
            keeper.stop_at(deadline, self.kill_after);
        }
    }

    /// The steps still running (the bound process among them while it is).
    pub(super) fn running(&self, bound: &Bound) -> usize {
        self.steps.scan(!bound.has_exited(), &[]).len()
    }

    /// Sends `signal` to the steps, KILLs them at `kill` (K after now, or
    /// sooner by the lease's rule), and returns once none is left.
    pub(super) async fn stop(&mut self, bound: &Bound, signal: Signal, kill: Moment) {
        if let Some(keeper) = &mut self.keeper {
            keeper.kill_at(kill);
        }
        self.steps.signal(signal, !bound.has_exited(), &[]);
        let mut killed = false;
        while self.running(bound) > 0 {
            if !killed && Moment::now() >= kill {
                killed = true;
                self.steps.signal(Signal::KILL, !bound.has_exited(), &[]);
            }
            let next = if killed {
                Moment::now() + POLL
            } else {
                kill.min(Moment::now() + POLL)
            };
            sleep_until(next).await;
        }
    }

    /// The steps need the lock no more (a release, or none left): the
    /// holder's end no longer kills them.
    pub(super) fn stand_down(mut self) {
        if let Some(keeper) = &mut self.keeper {
            keeper.stand_down();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Not killed: it ends with the holder, as it was last told.
        if let Some(keeper) = self.keeper.take() {
            keeper.end_with_zklock();
        }
    }
}
