//! The holder's life once started (docs/design.md, "Holds"): it waits as
//! `zklock run` does, hands the variables over, keeps the lock until the
//! bound process exits, a release, --max-hold, a signal or a loss, and
//! after a loss answers `zklock release` with why.

use std::io::Write;
use std::pin::pin;
use std::time::SystemTime;

use anyhow::{Context, Result};
use rustix::process::Signal;
use tokio::time::{Instant, sleep, sleep_until};
use zklock::zk::clock::Moment;

use super::bound::{Binding, Bound, dev_null};
use super::control::{Asker, Control, Following, Released, Request};
use super::guard::{Guard, POLL};
use super::linger::{linger, refuse_follower, woken_late};
use crate::cli::OnLost;
use crate::command::signals::Signals;
use crate::command::supervise::kill_time;
use crate::exit::{Exit, Step};
use crate::lock::holder::HoldBinding;
use crate::lock::lease;
use crate::run::acquire::{Taken, abort_signal, take_locks};
use crate::run::hold::{HeldLock, command_environment, lease_watch};
use crate::run::nested::follow::Told;
use crate::run::nested::{Reentry, enter};
use crate::run::plan::Plan;
use crate::run::{Event, Outputs, first_token, once};
use crate::session::Session;
use crate::values::{Precision, rfc3339};

pub(super) async fn lifecycle(
    mut plan: Plan<'_>,
    binding: Binding,
    outputs: &Outputs,
) -> Result<Exit> {
    let mut signals = Signals::install()?;
    // `until` is known once held: --max-hold counts from then.
    plan.own.hold = Some(HoldBinding {
        bound_pid: binding.bound().map(|b| b.pid as u32),
        bound_name: binding.bound().and_then(|b| b.name.clone()),
        until: None,
    });
    let plan = plan;
    let started = Instant::now();
    outputs.emit(Event::Connecting { order: &plan.order });
    // Until held: a caller gone ends the wait, as a signal would.
    let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(give_up_with(binding.caller.duplicate()?, held_rx));
    let mut held_tx = Some(held_tx);
    let hold = async |session: &Session, signals: &mut Signals, taken: Taken| {
        let Taken {
            held,
            watches,
            policy,
            owner,
        } = taken;
        let ours = owner == session.id();
        // The order `held` is in.
        let order: &[&str] = match ours {
            true => &plan.order,
            false => &plan.paths,
        };
        let env = command_environment(&plan.paths, order, &held, owner, &plan.connect);
        outputs.emit(Event::Acquired {
            held: &held,
            token: first_token(&plan.paths, order, &held),
            // Under an enclosing run's locks `enter` said so.
            after: ours.then(|| started.elapsed()),
        });
        let record = match once::check(&plan, session.client(), &held, outputs).await? {
            Step::Go(record) => record,
            Step::End(skipped) => return Ok(Step::End(skipped)),
        };
        let control = Control::bind(binding.owner.clone())?;
        let mut vars = vec![(
            "ZKLOCK_HOLD".to_owned(),
            control.path().to_string_lossy().into_owned(),
        )];
        vars.extend(
            env.iter()
                .map(|(name, value)| ((*name).to_owned(), value.clone())),
        );
        let (deadline, mut handed) = lease::deadline(session.client(), policy);
        // The steps' keeper is ready before they can run under the lock.
        let mut guard = match binding.bound() {
            Some(bound) => {
                let mut guard = Guard::start(bound, policy.kill_after)?;
                guard.follow(*handed.borrow_and_update());
                Some(guard)
            }
            None => None,
        };
        if let Some(held) = held_tx.take() {
            let _ = held.send(());
        }
        hand_over(&vars)?;
        outputs.emit(Event::Running);
        outputs.emit(Event::Started { env: &env });
        let mut lock = HeldLock {
            nodes: held.iter().map(|node| node.path.clone()).collect(),
            watches,
            owner,
            policy,
            ours,
            record,
        };
        let max_hold = binding.max_hold.map(|max| Instant::now() + max);
        let mut holder = plan.holder();
        if let Some(hold) = &mut holder.hold {
            let until = binding.max_hold.map(|max| SystemTime::now() + max);
            hold.until = until.map(|at| rfc3339(at, Precision::Seconds));
        }
        let acquired = holder.acquired(std::process::id()).to_bytes();
        let mut followers: Vec<Following> = Vec::new();
        let ended = {
            let watches = std::mem::take(&mut lock.watches);
            let mut lost = pin!(lease_watch(
                &plan, outputs, session, &lock, watches, &deadline, acquired
            ));
            // The bound process has exited; its group's stragglers hold on.
            let mut draining = false;
            // The lease hands new deadlines until the lock is lost.
            let mut following = true;
            // Nested runs in other shells, told each deadline.
            loop {
                tokio::select! {
                    reason = &mut lost => break Ended::Lost(woken_late(reason, *handed.borrow())),
                    () = binding.bound_exit(), if !draining => {
                        draining = true;
                    }
                    () = sleep(POLL), if draining => {}
                    () = sleep_until(max_hold.unwrap_or_else(Instant::now)), if max_hold.is_some() => {
                        break Ended::Lost(format!(
                            "held for --max-hold {}",
                            humantime::format_duration(binding.max_hold.unwrap_or_default())
                        ));
                    }
                    signal = abort_signal(signals) => break Ended::Signal(signal),
                    changed = handed.changed(), if following => {
                        following = changed.is_ok();
                        if following {
                            let deadline = *handed.borrow_and_update();
                            if let Some(guard) = &mut guard {
                                guard.follow(deadline);
                            }
                            followers.retain(|f| f.tell(&Told::Deadline(deadline)));
                        }
                    }
                    (request, asker) = control.next() => match request {
                        Request::Paths => asker.paths(&plan.paths),
                        Request::Release => break Ended::Release(asker, None),
                        Request::Lease => {
                            let follower = asker.following();
                            let told = follower.tell(&Told::Owner(owner))
                                && follower.tell(&Told::KillAfter(policy.kill_after))
                                && follower.tell(&Told::Deadline(*handed.borrow()));
                            if told {
                                followers.push(follower);
                            }
                        }
                    },
                }
                let bound = &binding.caller;
                if draining && guard.as_ref().is_none_or(|guard| guard.running(bound) == 0) {
                    break Ended::BoundExited;
                }
            }
        };
        // A release asks the leader first (see `lease::lost_at_leader`): a
        // member cut off from it could still show our nodes.
        let ended = match ended {
            Ended::Release(asker, None) => {
                let lost = lease::lost_at_leader(session.client(), &lock.nodes, owner).await;
                Ended::Release(asker, lost)
            }
            ended => ended,
        };
        let exit = match &ended {
            Ended::Lost(_) | Ended::Release(_, Some(_)) => Exit::LockLost,
            Ended::Signal(signal) => Exit::Signal(*signal),
            Ended::BoundExited | Ended::Release(_, None) => Exit::Command(0),
        };
        if let Ended::Lost(reason) = &ended {
            outputs.emit(Event::Lost {
                why: format_args!("{reason}"),
            });
        }
        // The steps still running stop before the lock can pass on: our
        // nodes stay until they are gone (the session's scope deletes them
        // after this).
        if let Some(mut guard) = guard.take() {
            let bound = &binding.caller;
            let kill_by = *handed.borrow() + policy.kill_after;
            let (signal, kill, why) = match &ended {
                Ended::Lost(reason) if binding.on_lost == OnLost::Term => (
                    Signal::TERM,
                    kill_time(*handed.borrow(), Moment::now(), policy.kill_after),
                    reason.to_string(),
                ),
                Ended::Signal(signal) => (
                    Signal::from_named_raw(*signal).unwrap_or(Signal::TERM),
                    (Moment::now() + policy.kill_after).min(kill_by),
                    ended.why().unwrap_or_default(),
                ),
                _ => (Signal::CONT, Moment::now(), String::new()),
            };
            if !why.is_empty() {
                // A step's trap may ask for a release meanwhile: answered.
                let mut stopped = pin!(guard.stop(bound, signal, kill));
                loop {
                    tokio::select! {
                        () = &mut stopped => break,
                        (request, asker) = control.next() => match request {
                            Request::Paths => asker.paths(&plan.paths),
                            Request::Release => asker.released(&Released::Lost(why.clone())),
                            Request::Lease => refuse_follower(asker, owner, &why),
                        },
                    }
                }
            }
            guard.stand_down();
        }
        if !followers.is_empty() {
            let why = (ended.why()).unwrap_or_else(|| "the hold was released".to_owned());
            // They stop by the lease's rule; their nodes stay until then.
            let kill_by = kill_time(*handed.borrow(), Moment::now(), policy.kill_after);
            followers.retain(|f| f.tell(&Told::Lost(why.clone())));
            let all_gone = futures::future::join_all(followers.iter().map(Following::hung_up));
            let _ = tokio::time::timeout_at((kill_by + POLL * 5).to_instant(), all_gone).await;
        }
        outputs.emit(Event::Ended {
            exit,
            max_runtime: None,
        });
        if let Some(record) = lock.record.take() {
            record.finish(&plan, session.client(), exit).await;
        }
        // Ended without a release: the holder stays to tell `release` why
        // (76), a signal's end as a loss's.
        if let Some(reason) = ended.why() {
            // The outcome now, not once the session's end is confirmed.
            outputs.finish(&Ok(exit));
            linger(
                &control,
                &binding,
                signals,
                &reason,
                &plan.paths,
                owner,
                session,
            )
            .await;
        }
        anyhow::Ok(Step::Go((exit, ended, control)))
    };
    // Under an enclosing run or hold of the same paths: at once, under its
    // nodes, which are not ours (docs/design.md, "Nested runs"). Every way
    // out, before the hold is handed over or after, ends the session with
    // our nodes deleted (`Opened::scope`).
    let (held, closed) = match enter(&plan, outputs, &mut signals, hold).await? {
        Reentry::Done(Step::Go(done)) => done,
        Reentry::Done(Step::End(exit)) => return Ok(exit),
        Reentry::Not(hold) => match take_locks(&plan, outputs, &mut signals, hold).await? {
            Step::Go(done) => done,
            Step::End(exit) => return Ok(exit),
        },
    };
    // The socket goes last, with `control`.
    let (exit, ended, _control) = match held? {
        Step::Go(held) => held,
        Step::End(skipped) => return Ok(skipped),
    };
    let confirmed = closed.confirmed;
    match ended {
        Ended::Release(asker, lost) => {
            let released = match (lost, confirmed) {
                (Some(reason), _) => Released::Lost(reason),
                (None, true) => Released::Confirmed,
                (None, false) => Released::Unconfirmed(
                    "could not reach ZooKeeper to confirm the release: it is released when \
                     the session expires"
                        .into(),
                ),
            };
            asker.released(&released);
        }
        Ended::Lost(_) | Ended::BoundExited | Ended::Signal(_) => {}
    }
    Ok(exit)
}

/// Ends the wait with SIGTERM, as a signal from the caller would, when
/// `caller` exits before `held` says the lock is held (docs/design.md,
/// "Holds": nobody is left to use the hold).
async fn give_up_with(caller: Bound, held: tokio::sync::oneshot::Receiver<()>) {
    tokio::select! {
        () = caller.exited() => {
            crate::report::say(format_args!(
                "the process that called zklock hold (pid {}) has exited: giving up the wait",
                caller.pid
            ));
            let _ = rustix::process::kill_process(rustix::process::getpid(), Signal::TERM);
        }
        _ = held => {}
    }
}

/// Why the hold ended.
enum Ended {
    Lost(lease::LossReason),
    BoundExited,
    Signal(i32),
    /// Asked by `zklock release`; with why the lock was found lost then.
    Release(Asker, Option<lease::LossReason>),
}

impl Ended {
    /// Why the hold ended other than by a release or its bound process's
    /// exit, as `release` and nested runs are told.
    fn why(&self) -> Option<String> {
        match self {
            Ended::Lost(reason) => Some(reason.to_string()),
            Ended::Signal(signal) => Some(format!("the holder got signal {signal}")),
            Ended::BoundExited | Ended::Release(..) => None,
        }
    }
}

/// Gives the variables to the waiting `zklock hold` (one JSON line on our
/// stdout), then leaves its stdout and stderr: nothing of ours reaches the
/// caller's terminal or pipes after it returned.
fn hand_over(vars: &[(String, String)]) -> Result<()> {
    // Before the caller can exit: its end must not end us now.
    rustix::process::set_parent_process_death_signal(None)
        .context("clearing the parent-death signal")?;
    let line = format!("{}\n", serde_json::json!(vars));
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(line.as_bytes())
        .and_then(|()| stdout.flush())
        .context("handing the hold over to `zklock hold`")?;
    drop(stdout);
    let null = dev_null()?;
    rustix::stdio::dup2_stdout(&null)?;
    rustix::stdio::dup2_stderr(&null)?;
    Ok(())
}
