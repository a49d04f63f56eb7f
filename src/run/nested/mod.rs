//! A nested run on locks its enclosing run holds (docs/design.md, "Nested
//! runs"): when ZooKeeper confirms every node the enclosing run's `ZKLOCK_*`
//! variables name, the command runs at once under them, creating nothing,
//! while this zklock watches those nodes as a lease watches our own (the
//! command's group is not the one the enclosing run would kill).

mod claims;
pub(crate) mod follow;

use anyhow::{Context, Result};
use zklock::zk;
use zklock::zk::burst::Burst;

use self::claims::{Claim, Decision, Held, Inherited, Observed};
use super::acquire::{Taken, connect, settle};
use super::hold::{HeldLock, command_environment, run_command};
use super::plan::Plan;
use super::{Event, Outputs};
use crate::command::child::Child;
use crate::command::keeper::Keeper;
use crate::command::signals::Signals;
use crate::exit::{Failure, Step};
use crate::lock::queue::Node;
use crate::lock::recipe;
use crate::session::{Closed, Session, retrying};

/// Runs the command under the enclosing run's locks if it holds them all
/// (and ends with its exit), refuses if that cannot work, or goes on to the
/// usual path. Connects only when the environment claims a requested path.
/// A command run here takes `keeper`, if the run started one early.
pub async fn reenter(
    plan: &Plan<'_>,
    out: &Outputs,
    signals: &mut Signals,
    keeper: &mut Option<Keeper>,
) -> Result<Step<()>> {
    let command = async |session: &Session, signals: &mut Signals, taken: Taken| {
        let Taken {
            held,
            policy,
            owner,
            ..
        } = taken;
        // The same values the enclosing run gave, so a run nested deeper
        // re-enters too.
        let env = command_environment(&plan.paths, &plan.paths, &held, owner, &plan.connect);
        let lock = HeldLock {
            nodes: held.into_iter().map(|node| node.path).collect(),
            watches: Vec::new(),
            owner,
            policy,
            ours: false,
            record: None,
        };
        let prepared = Child::prepare(&plan.argv, keeper.take())?;
        // Under a hold, whose lease may end before our session sees its
        // nodes go (its holder frozen, killed, cut off): followed too.
        let hold = std::env::var_os("ZKLOCK_HOLD").filter(|socket| !socket.is_empty());
        let enclosing = match hold {
            Some(socket) => {
                follow::Follower::ask(std::path::Path::new(&socket), owner, plan.conflict)?
            }
            None => None,
        };
        run_command(plan, out, signals, session, lock, &env, prepared, enclosing).await
    };
    match enter(plan, out, signals, command).await? {
        Reentry::Not(_) => Ok(Step::Go(())),
        Reentry::Done(Step::End(exit)) => Ok(Step::End(exit)),
        Reentry::Done(Step::Go((ran, _closed))) => ran.map(Step::End),
    }
}

/// Whether the enclosing locks were entered (see [`enter`]).
pub(crate) enum Reentry<F, T> {
    /// Not under them: `then`, given back, for the usual path.
    Not(F),
    /// `then`'s value under them and how the session ended, or how zklock
    /// ends instead.
    Done(Step<(T, Closed)>),
}

/// Runs `then` under the enclosing run's (or hold's) locks when the
/// environment claims a requested path and ZooKeeper confirms every one,
/// in a session of our own that watches them and creates nothing; or
/// refuses; or gives `then` back for the usual path. Connects only when
/// the environment claims a requested path.
pub(crate) async fn enter<F, T>(
    plan: &Plan<'_>,
    out: &Outputs,
    signals: &mut Signals,
    then: F,
) -> Result<Reentry<F, T>>
where
    F: AsyncFnOnce(&Session, &mut Signals, Taken) -> T,
{
    let claims = claims::claims(&Inherited::from_env(), &plan.paths);
    let Some(owner) = claims.iter().flatten().map(|claim| claim.session).next() else {
        return Ok(Reentry::Not(then));
    };
    let session = match connect(plan, out, signals, Burst::default(), None).await? {
        Step::Go(session) => session,
        Step::End(exit) => return Ok(Reentry::Done(Step::End(exit))),
    };
    let entering = async |session: &Session| -> Result<Result<T, F>> {
        let policy = settle(plan, session).await?;
        let mut verdicts = Vec::new();
        for claim in &claims {
            verdicts.push(match claim {
                Some(claim) => {
                    let observed = observe(session.client(), claim).await?;
                    Some(claims::verdict(claim, plan.kind, &observed))
                }
                None => None,
            });
        }
        let held = match claims::decide(&plan.paths, plan.kind, &verdicts) {
            Decision::Normal => return Ok(Err(then)),
            Decision::Refuse(message) => return Err(Failure::usage(message)),
            Decision::Reenter(_) if plan.once_per.is_some() => {
                return Err(Failure::usage(
                    "--once-per cannot run under the enclosing zklock run's lock",
                ));
            }
            Decision::Reenter(held) => held,
        };
        let held: Vec<Node> = held
            .into_iter()
            .map(|(path, czxid)| Node { path, czxid })
            .collect();
        for (path, node) in plan.paths.iter().zip(&held) {
            out.emit(Event::Reentered { path, node });
        }
        let taken = Taken {
            held,
            watches: Vec::new(),
            policy,
            owner,
        };
        Ok(Ok(then(session, signals, taken).await))
    };
    let (entered, closed) = session.scope(entering).await;
    Ok(match entered? {
        Ok(value) => Reentry::Done(Step::Go((value, closed))),
        Err(then) => Reentry::Not(then),
    })
}

/// Reads what decides a claim, after a sync: a new session may be served
/// by a member that has not yet seen the enclosing run's node.
async fn observe(client: &zk::client::Client, claim: &Claim) -> Result<Observed> {
    let dir = claim.dir();
    match retrying(|| client.call(|b| b.sync(dir))).await {
        Ok(_) | Err(zk::records::Error::NoNode) => {}
        Err(err) => return Err(err).context(format!("syncing {dir}")),
    }
    let stat = match retrying(|| client.call(|b| b.get_data(&claim.node, false)))
        .await
        .map(|d| (d.data, d.stat))
    {
        Ok((_, stat)) => (stat.ephemeral_owner, stat.czxid),
        Err(zk::records::Error::NoNode) => return Ok(Observed::default()),
        Err(err) => return Err(err).context(format!("reading {}", claim.node)),
    };
    let children = match retrying(|| client.call(|b| b.get_children(dir, false)))
        .await
        .map(|c| c.children)
    {
        Ok(children) => children,
        Err(zk::records::Error::NoNode) => Vec::new(),
        Err(err) => return Err(err).context(format!("listing {dir}")),
    };
    let limit = match claim.held {
        Held::Lease => match retrying(|| client.call(|b| b.get_data(&claim.path, false)))
            .await
            .map(|d| (d.data, d.stat))
        {
            Ok((data, _)) => recipe::decode_limit(&data),
            Err(zk::records::Error::NoNode) => None,
            Err(err) => return Err(err).context(format!("reading {}", claim.path)),
        },
        Held::Writer | Held::Reader => None,
    };
    Ok(Observed {
        stat: Some(stat),
        children,
        limit,
    })
}
