//! The holder's life once started (docs/design.md, "Holds"): it waits as
//! `zklock run` does, hands the variables over, keeps the lock until the
//! bound process exits, a release, --max-hold, a signal or a loss, and
//! after a loss answers `zklock release` with why.

use std::io::Write;
use std::pin::pin;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use tokio::time::{Instant, sleep_until};

use super::bound::{Binding, dev_null};
use super::control::{Control, Released, Request};
use crate::cli::OnLost;
use crate::command::signals::Signals;
use crate::exit::{Exit, Step};
use crate::lock::holder::HoldBinding;
use crate::lock::lease;
use crate::run::acquire::{Taken, abort_signal, take_locks};
use crate::run::hold::{HeldLock, command_environment, lease_watch};
use crate::run::nested::{Reentry, enter};
use crate::run::plan::Plan;
use crate::run::{Event, Outputs, first_token, once};
use crate::session::Session;
use crate::values::{Precision, rfc3339};

/// How long, at least, an unbound holder answers `zklock release` after the
/// lock was lost (docs/design.md, "Holds").
const LINGER: Duration = Duration::from_secs(600);

pub(super) async fn lifecycle(
    mut plan: Plan<'_>,
    binding: Binding,
    outputs: &Outputs,
) -> Result<Exit> {
    let mut signals = Signals::install()?;
    // `until` is known once held: --max-hold counts from then.
    plan.own.hold = Some(HoldBinding {
        bound_pid: binding.bound.as_ref().map(|b| b.pid as u32),
        bound_name: binding.bound.as_ref().and_then(|b| b.name.clone()),
        until: None,
    });
    let plan = plan;
    let started = Instant::now();
    outputs.emit(Event::Connecting { order: &plan.order });
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
        let (deadline, _handed) = lease::deadline(session.client(), policy);
        let max_hold = binding.max_hold.map(|max| Instant::now() + max);
        let mut holder = plan.holder();
        if let Some(hold) = &mut holder.hold {
            let until = binding.max_hold.map(|max| SystemTime::now() + max);
            hold.until = until.map(|at| rfc3339(at, Precision::Seconds));
        }
        let acquired = holder.acquired(std::process::id()).to_bytes();
        let ended = {
            let watches = std::mem::take(&mut lock.watches);
            let mut lost = pin!(lease_watch(
                &plan, outputs, session, &lock, watches, &deadline, acquired
            ));
            loop {
                tokio::select! {
                    reason = &mut lost => break Ended::Lost(reason),
                    () = bound_exit(&binding) => break Ended::BoundExited,
                    () = sleep_until(max_hold.unwrap_or_else(Instant::now)), if max_hold.is_some() => {
                        break Ended::Lost(format!(
                            "held for --max-hold {}",
                            humantime::format_duration(binding.max_hold.unwrap_or_default())
                        ));
                    }
                    signal = abort_signal(signals) => break Ended::Signal(signal),
                    (request, asker) = control.next() => match request {
                        Request::Paths => asker.paths(&plan.paths),
                        Request::Release => break Ended::Release(asker, None),
                    },
                }
            }
        };
        // A release asks ZooKeeper first (see `lease::lost_now`).
        let ended = match ended {
            Ended::Release(asker, None) => {
                let lost = lease::lost_now(session.client(), &lock.nodes, owner).await;
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
        if let (Ended::Lost(_), Some(bound), OnLost::Term) =
            (&ended, &binding.bound, binding.on_lost)
        {
            bound.terminate();
        }
        outputs.emit(Event::Ended {
            exit,
            max_runtime: None,
        });
        if let Some(record) = lock.record.take() {
            record.finish(&plan, session.client(), exit).await;
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
    let (exit, ended, control) = match held? {
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
        Ended::Lost(reason) => {
            // The outcome now, not when the lingering ends.
            outputs.finish(&Ok(exit));
            linger(&control, &binding, &mut signals, &reason, &plan.paths).await;
        }
        Ended::BoundExited | Ended::Signal(_) => {}
    }
    Ok(exit)
}

/// Why the hold ended.
enum Ended {
    Lost(lease::LossReason),
    BoundExited,
    Signal(i32),
    /// Asked by `zklock release`; with why the lock was found lost then.
    Release(super::control::Asker, Option<lease::LossReason>),
}

async fn bound_exit(binding: &Binding) {
    match &binding.bound {
        Some(bound) => bound.exited().await,
        None => std::future::pending().await,
    }
}

/// After a lost lock: answers `zklock release` with why (76), until the
/// bound process exits, or, unbound, for as long as --max-hold again and at
/// least [`LINGER`] (a forgotten release ends).
async fn linger(
    control: &Control,
    binding: &Binding,
    signals: &mut Signals,
    reason: &str,
    paths: &[&str],
) {
    let until = Instant::now() + binding.max_hold.unwrap_or_default().max(LINGER);
    loop {
        tokio::select! {
            () = bound_exit(binding) => return,
            () = sleep_until(until), if binding.bound.is_none() => return,
            _ = abort_signal(signals) => return,
            (request, asker) = control.next() => match request {
                Request::Paths => asker.paths(paths),
                Request::Release => {
                    asker.released(&Released::Lost(reason.to_owned()));
                    return;
                }
            },
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
