//! After a hold's lock is lost (docs/design.md, "Holds"): what the holder
//! says of it, and how it lingers, answering `zklock release` with why and
//! ending its session as soon as a member takes it again.

use std::pin::pin;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};
use zklock::zk::client::{Link, State};
use zklock::zk::clock::Moment;

use super::bound::Binding;
use super::control::{Asker, Control, Released, Request};
use crate::command::signals::Signals;
use crate::lock::lease;
use crate::run::acquire::abort_signal;
use crate::run::nested::follow::Told;
use crate::session::Session;

/// How long, at least, an unbound holder answers `zklock release` after the
/// lock was lost (docs/design.md, "Holds").
const LINGER: Duration = Duration::from_secs(600);

/// How late past the lease deadline the holder may hear of a loss before
/// it counts as having been stopped (or starved) meanwhile.
const LATE: Duration = Duration::from_millis(500);

/// Why the lock was lost, as the holder says it: a holder that learns of
/// it only well past its lease deadline was stopped (SIGSTOP, a debugger),
/// suspended with its host, or starved, and its keeper stopped the steps;
/// the lease's own words ("no answer") would blame ZooKeeper.
pub(super) fn woken_late(reason: lease::LossReason, deadline: Moment) -> lease::LossReason {
    let late = Moment::now().saturating_duration_since(deadline);
    match late > LATE {
        true => format!(
            "the holder was stopped, or its host suspended, past its lease deadline \
             (for {} more), so the lock was no longer kept ({reason})",
            crate::values::human_duration(late)
        ),
        false => reason,
    }
}

/// Tells a nested run that asks to follow a hold whose lock is lost so.
pub(super) fn refuse_follower(asker: Asker, owner: i64, why: &str) {
    let follower = asker.following();
    let _ = follower.tell(&Told::Owner(owner)) && follower.tell(&Told::Lost(why.to_owned()));
}

/// After a lost lock: answers `zklock release` with why (76), until the
/// bound process exits, or, unbound, for as long as --max-hold again and at
/// least [`LINGER`] (a forgotten release ends).
pub(super) async fn linger(
    control: &Control,
    binding: &Binding,
    signals: &mut Signals,
    reason: &str,
    paths: &[&str],
    owner: i64,
    session: &Session,
) {
    // Our deletes and closeSession go as soon as a member takes the
    // session again (at once when connected): after an outage our nodes go
    // when a member is back, not a session timeout later. The scope's end
    // makes them again should that connection fail too.
    let mut link = session.client().link();
    let mut over = pin!(async move {
        let back = |link: &Link| link.state == State::Connected || link.state.is_over();
        let _ = link.wait_for(back).await;
        session.release();
        let _ = link.wait_for(|link| link.state.is_over()).await;
    });
    let (mut ended, mut bound_gone) = (false, false);
    let mut until = Instant::now() + binding.max_hold.unwrap_or_default().max(LINGER);
    loop {
        if ended && bound_gone {
            return;
        }
        tokio::select! {
            () = &mut over, if !ended => ended = true,
            () = binding.bound_exit(), if !bound_gone && binding.bound().is_some() => {
                bound_gone = true;
                // Nobody is left to ask: only the session's end, for as
                // long as the session might last.
                until = Instant::now() + session.timeout() * 2;
            }
            () = sleep_until(until), if binding.bound().is_none() || bound_gone => return,
            _ = abort_signal(signals) => return,
            (request, asker) = control.next() => match request {
                Request::Paths => asker.paths(paths),
                Request::Lease => refuse_follower(asker, owner, reason),
                Request::Release => {
                    asker.released(&Released::Lost(reason.to_owned()));
                    return;
                }
            },
        }
    }
}
