//! Supervising the command: the signal policy of docs/design.md, "The
//! command and signals", in one function, [`supervise`], and the lease's
//! rule for when a lost lock's command is killed.

use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use zklock::zk::clock::{self, Moment};

use crate::command::child::{Child, running_members};
use crate::command::keeper::Keeper;
use crate::command::signals::{Signals, is_terminating};
use crate::exit::Exit;
use crate::report::Report;
use crate::values::human_duration;

/// How often to look for stragglers in the command's process group after the
/// command itself exited; there is no event for "the group is empty".
const GROUP_POLL: Duration = Duration::from_millis(20);

/// Supervises the command until it and its whole process group are gone,
/// by the policy of docs/design.md, "The command and signals", which is
/// implemented here and nowhere else, and hands the keeper the lease
/// `deadline` (the lock's, as the lease moves it) for when zklock cannot
/// act. Returns the command's status, or [`Exit::LockLost`] or
/// [`Exit::TimedOut`], and the group's keeper, for
/// [`Keeper::end_with_zklock`] once the lock is released. `lock_lost` is
/// told why, once, as the command is stopped for a lost lock.
pub async fn supervise(
    mut child: Child,
    signals: &mut Signals,
    mut lost: Pin<&mut dyn Future<Output = String>>,
    mut deadline: watch::Receiver<Moment>,
    limits: Limits,
    report: &Report,
    lock_lost_because: &dyn Fn(std::fmt::Arguments<'_>),
) -> (Exit, Keeper) {
    let mut time_up = limits.max_runtime.map(|limit| Instant::now() + limit);
    let mut timed_out = false;
    let mut kill_at: Option<Moment> = None;
    let mut lock_lost = false;
    let mut group_check: Option<Instant> = None;
    let mut told_waiting = false;
    let far_future = || Instant::now() + Duration::from_secs(86400 * 365);
    // TERM now and KILL at `kill` (at once if that has passed), or earlier
    // if a KILL is due already.
    let terminate = |child: &Child, kill_at: &mut Option<Moment>, kill: Moment| {
        if kill > Moment::now() {
            child.signal_group(libc::SIGTERM);
            // A stopped process acts on TERM only once continued.
            child.signal_group(libc::SIGCONT);
        }
        *kill_at = Some(kill_at.map_or(kill, |at| at.min(kill)));
    };
    // The lock is lost: TERM, and KILL by the lease's rule; the keeper
    // KILLs then too, should zklock be frozen by then.
    let give_up = |child: &mut Child, kill_at: &mut Option<Moment>, deadline: Moment| {
        let kill = kill_time(deadline, Moment::now(), limits.kill_after);
        terminate(child, kill_at, kill);
        child.keeper.kill_at(kill);
    };
    let mut watching = true;
    child
        .keeper
        .stop_at(*deadline.borrow_and_update(), limits.kill_after);
    let status = loop {
        if let Some(status) = child.status {
            if !child.group_alive() {
                break status;
            }
            if !told_waiting {
                told_waiting = true;
                let others = running_members(child.pgid, child.keeper.pid());
                let ended = match status.signal() {
                    Some(signal) => format!("was killed by signal {signal}"),
                    None => format!("exited with status {}", status.code().unwrap_or(0)),
                };
                report.info(format_args!(
                    "the command {ended}; waiting for the {others} other process{} of its group",
                    if others == 1 { "" } else { "es" }
                ));
            }
            group_check = Some(Instant::now() + GROUP_POLL);
        }
        tokio::select! {
            signal = signals.recv() => {
                if signal == libc::SIGCHLD {
                    if let Some(stop) = child.reap() {
                        child.stop_with_command(stop);
                    }
                    continue;
                }
                if signal == libc::SIGCONT {
                    let stopped = child.continued().filter(|time| *time >= limits.stop_limit);
                    if let Some(stopped) = stopped.filter(|_| !lock_lost) {
                        (lock_lost, watching) = (true, false);
                        // Stopped first, said after: the words may block
                        // on a full pipe.
                        give_up(&mut child, &mut kill_at, *deadline.borrow());
                        lock_lost_because(format_args!(
                            "zklock was stopped for {}, longer than its session \
                             can be kept without it; terminating the command",
                            human_duration(stopped)
                        ));
                    }
                } else if is_terminating(signal) {
                    if kill_at.is_some() {
                        child.signal_group(libc::SIGKILL);
                    } else {
                        kill_at = Some(Moment::now() + limits.kill_after);
                    }
                }
                child.signal_group(signal);
            }
            reason = &mut lost, if !lock_lost => {
                (lock_lost, watching) = (true, false);
                give_up(&mut child, &mut kill_at, *deadline.borrow());
                lock_lost_because(format_args!("{reason}; terminating the command"));
            }
            changed = deadline.changed(), if watching => match changed {
                Ok(()) => child
                    .keeper
                    .stop_at(*deadline.borrow_and_update(), limits.kill_after),
                Err(_) => watching = false,
            },
            () = sleep_until(time_up.unwrap_or_else(far_future)), if time_up.is_some() => {
                time_up = None;
                timed_out = true;
                terminate(&child, &mut kill_at, Moment::now() + limits.kill_after);
            }
            () = clock::sleep_until(kill_at.unwrap_or_else(Moment::now)), if kill_at.is_some() => {
                child.signal_group(libc::SIGKILL);
                kill_at = None;
            }
            () = sleep_until(group_check.unwrap_or_else(far_future)), if group_check.is_some() => {
                group_check = None;
                child.reap();
            }
        }
    };
    if !lock_lost && Moment::now() >= *deadline.borrow() {
        // Found ended only past the deadline: zklock could not act in time
        // (it was stopped). The keeper stopped the command, or it ended by
        // itself, before or after the deadline: nobody saw when.
        lock_lost = true;
        let ended = match status.signal() {
            Some(libc::SIGTERM | libc::SIGKILL) => "the keeper stopped the command",
            _ => "the command ended meanwhile, maybe after it",
        };
        lock_lost_because(format_args!(
            "no answer from ZooKeeper past the lease deadline (zklock was stopped); {ended}"
        ));
    }
    // The group is empty.
    child.keeper.stand_down();
    let exit = if lock_lost {
        Exit::LockLost
    } else if timed_out {
        Exit::TimedOut
    } else if let Some(signal) = status.signal() {
        Exit::Signal(signal)
    } else {
        Exit::Command(status.code().unwrap_or(0) as u8)
    };
    (exit, child.keeper)
}

/// When to KILL the group after losing the lock at `now`, with the lease
/// deadline at `deadline` (docs/design.md, "Session and lease rules"): K
/// after the TERM sent now, and no later than K after the deadline. A zklock
/// that wakes up past the deadline (it was stopped) has no grace left and
/// less of K: none once K past it, when it kills at once.
pub fn kill_time(deadline: Moment, now: Moment, kill_after: Duration) -> Moment {
    now.min(deadline) + kill_after
}

/// The times [`supervise`] keeps to.
pub struct Limits {
    /// From a terminating signal or the lock's loss to SIGKILL.
    pub kill_after: Duration,
    /// The command's `--max-runtime`, if any.
    pub max_runtime: Option<Duration>,
    /// How long zklock may be stopped before it counts the lock as lost.
    pub stop_limit: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_comes_k_after_the_deadline_at_the_latest() {
        let deadline = Moment::now() + Duration::from_secs(60);
        let k = Duration::from_secs(5);
        // Lost before the deadline (a node deleted): K after the TERM.
        let now = deadline - Duration::from_secs(3);
        assert_eq!(kill_time(deadline, now, k), now + k);
        // Woken 2s past the deadline: what is left of K.
        let now = deadline + Duration::from_secs(2);
        assert_eq!(kill_time(deadline, now, k) - now, Duration::from_secs(3));
        // Woken K or more past it: no grace left, KILL at once.
        let now = deadline + Duration::from_secs(7);
        assert!(kill_time(deadline, now, k) <= now);
    }
}
