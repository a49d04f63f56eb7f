//! The lifecycle of `zklock run`, in order (docs/design.md, "Lifecycle of
//! `zklock run`"):
//! signals, connect, acquire, spawn, supervise, reap, release, exit.

pub(crate) mod acquire;
mod events;
mod fleet;
mod give_up;
pub(crate) mod hold;
pub(crate) mod metrics;
pub(crate) mod nested;
mod notify;
pub(crate) mod once;
pub(crate) mod ping;
pub(crate) mod plan;
mod wait;

use std::future::Future;
use std::rc::Rc;

use anyhow::{Context, Result};
use tokio::time::Instant;

use self::acquire::{Taken, take_locks};
pub(crate) use self::events::{Event, Outputs};
use self::hold::{HeldLock, command_environment, run_command};
use self::plan::Plan;
use crate::cli::RunArgs;
use crate::command::child::{self, Child};
use crate::command::keeper::Keeper;
use crate::command::signals::Signals;
use crate::exit::{Exit, Step};
use crate::lock::queue::Node;
use crate::session::Session;

/// `zklock run`; `keeper`, the command's keeper if started as zklock
/// started (`Keeper::early`).
pub fn run(args: RunArgs, keeper: Option<Keeper>) -> Result<Exit> {
    let plan = Plan::new(&args)?;
    let outputs = Outputs::new(&plan)?;
    drive(outputs, |outputs| lifecycle(plan, outputs, keeper))
}

/// Runs `lifecycle` on a current-thread runtime with the run's `outputs`,
/// and gives them the outcome once it is known (the metrics file and the
/// final ping, docs/design.md, "Metrics file"). Shared with `zklock
/// hold`'s holder, whose hold is its "command".
pub(crate) fn drive<F, Fut>(outputs: Outputs, lifecycle: F) -> Result<Exit>
where
    F: FnOnce(Rc<Outputs>) -> Fut,
    Fut: Future<Output = Result<Exit>>,
{
    // Before the runtime starts any thread: they inherit this mask.
    child::block_terminal_stops();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let outputs = Rc::new(outputs);
    let result = runtime.block_on(lifecycle(Rc::clone(&outputs)));
    // Do not wait for a DNS lookup that is still running (see
    // session::diagnose): its answer no longer matters.
    runtime.shutdown_background();
    outputs.finish(&result);
    result
}

async fn lifecycle(
    plan: Plan<'_>,
    outputs: Rc<Outputs>,
    mut keeper: Option<Keeper>,
) -> Result<Exit> {
    let out = &*outputs;
    let mut signals = Signals::install()?;
    // A typo in the command must not wait for the lock first; checked once
    // the metrics file is, so that it says so too.
    child::check_runnable(&plan.argv)?;
    if let Step::End(exit) = nested::reenter(&plan, out, &mut signals, &mut keeper).await? {
        return Ok(exit);
    }
    // Dropped on every way out without the command (which kills its keeper).
    // A --once-per fleet's hosts mostly end on the record without running
    // the command: their keeper starts only once the lock is taken (the one
    // host that runs pays its start then; the others never do).
    let prepared = match plan.once_per {
        None => Some(Child::prepare(&plan.argv, keeper)?),
        Some(_) => None,
    };
    let started = Instant::now();
    out.emit(Event::Connecting { order: &plan.order });
    // Go: the command ran, with this exit; End: it was skipped.
    let command = async |session: &Session, signals: &mut Signals, taken: Taken| {
        let held = &taken.held;
        let owner = taken.owner;
        let env = command_environment(&plan.paths, &plan.order, held, owner, &plan.connect);
        out.emit(Event::Acquired {
            held,
            token: first_token(&plan.paths, &plan.order, held),
            after: Some(started.elapsed()),
        });
        let record = match once::check(&plan, session.client(), held, out).await? {
            Step::Go(record) => record,
            Step::End(skipped) => return Ok(Step::End(skipped)),
        };
        let lock = HeldLock {
            nodes: held.iter().map(|node| node.path.clone()).collect(),
            watches: taken.watches,
            owner,
            policy: taken.policy,
            ours: true,
            record,
        };
        let prepared = match prepared {
            Some(prepared) => prepared,
            None => Child::prepare(&plan.argv, None)?,
        };
        let exit = run_command(&plan, out, signals, session, lock, &env, prepared, None).await?;
        anyhow::Ok(Step::Go(exit))
    };
    let (ran, closed) = match take_locks(&plan, out, &mut signals, command).await? {
        Step::Go(done) => done,
        Step::End(exit) => return Ok(exit),
    };
    let mut exit = match ran? {
        Step::Go(exit) => exit,
        Step::End(skipped) => return Ok(skipped),
    };
    // The command may have ended after another holder's start: a lock
    // found lost at the release is a lost run, whatever the command said.
    if let Some(why) = closed.lost.as_deref().filter(|_| exit != Exit::LockLost) {
        out.emit(Event::Lost {
            why: format_args!("{why} (found after the command ended: it may have run without it)"),
        });
        exit = Exit::LockLost;
    }
    out.emit(Event::Released {
        order: &plan.order,
        confirmed: closed.confirmed,
        timeout: closed.timeout,
    });
    Ok(exit)
}

/// The fencing token of the first path given (for the metrics file), of
/// `held` in `order`.
pub(crate) fn first_token(paths: &[&str], order: &[&str], held: &[Node]) -> i64 {
    let first = order.iter().position(|p| *p == paths[0]);
    first.and_then(|i| held.get(i)).map_or(0, |node| node.czxid)
}
