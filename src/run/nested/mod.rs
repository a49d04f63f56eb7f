//! A nested run on locks its enclosing run holds (docs/design.md, "Nested
//! runs"): when ZooKeeper confirms every node the enclosing run's `ZKLOCK_*`
//! variables name, the command runs at once under them, creating nothing,
//! while this zklock watches those nodes as a lease watches our own (the
//! command's group is not the one the enclosing run would kill).

mod claims;

use anyhow::{Context, Result};
use zklock::zk;
use zklock::zk::burst::Burst;

use self::claims::{Claim, Decision, Held, Inherited, Observed};
use super::Outputs;
use super::acquire::connect;
use super::hold::{HeldLock, command_environment, run_command};
use super::plan::Plan;
use crate::command::child::Child;
use crate::command::signals::Signals;
use crate::exit::{Failure, Step};
use crate::lock::lease::LeasePolicy;
use crate::lock::queue::Node;
use crate::lock::recipe;
use crate::session::{Session, retrying};

/// Runs the command under the enclosing run's locks if it holds them all
/// (and ends with its exit), refuses if that cannot work, or goes on to the
/// usual path. Connects only when the environment claims a requested path.
pub async fn reenter(plan: &Plan<'_>, out: &Outputs, signals: &mut Signals) -> Result<Step<()>> {
    let Entered {
        session,
        policy,
        owner,
        held,
    } = match enter(plan, signals).await? {
        Step::Go(Some(entered)) => entered,
        Step::Go(None) => return Ok(Step::Go(())),
        Step::End(exit) => return Ok(Step::End(exit)),
    };
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
    let prepared = Child::prepare(&plan.argv)?;
    match run_command(plan, out, signals, &session, lock, &env, prepared).await {
        Ok((exit, release)) => {
            session.close_after(release).await;
            Ok(Step::End(exit))
        }
        Err(err) => {
            session.close(&[]).await;
            Err(err)
        }
    }
}

/// The enclosing run's (or hold's) locks, confirmed held, and a session of
/// our own that watches them.
pub(crate) struct Entered {
    pub(crate) session: Session,
    pub(crate) policy: LeasePolicy,
    /// The enclosing session, which owns `held`.
    pub(crate) owner: i64,
    /// Its nodes, in the order the paths were given.
    pub(crate) held: Vec<Node>,
}

/// The enclosing locks when the environment claims a requested path and
/// ZooKeeper confirms every one (None: go on to the usual path), or a
/// refusal. Connects only when the environment claims a requested path.
pub(crate) async fn enter(plan: &Plan<'_>, signals: &mut Signals) -> Result<Step<Option<Entered>>> {
    let claims = claims::claims(&Inherited::from_env(), &plan.paths);
    let Some(owner) = claims.iter().flatten().map(|claim| claim.session).next() else {
        return Ok(Step::Go(None));
    };
    let (session, policy) = match connect(plan, signals, Burst::default()).await? {
        Step::Go(connected) => connected,
        Step::End(exit) => return Ok(Step::End(exit)),
    };
    let decided = async {
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
        match claims::decide(&plan.paths, plan.kind, &verdicts) {
            Decision::Normal => Ok(None),
            Decision::Refuse(message) => Err(Failure::usage(message)),
            Decision::Reenter(_) if plan.once_per.is_some() => Err(Failure::usage(
                "--once-per cannot run under the enclosing zklock run's lock",
            )),
            Decision::Reenter(held) => Ok(Some(held)),
        }
    };
    let held = match decided.await {
        Ok(Some(held)) => held,
        other => {
            session.close(&[]).await;
            return other.map(|_| Step::Go(None));
        }
    };
    let held: Vec<Node> = held
        .into_iter()
        .map(|(path, czxid)| Node { path, czxid })
        .collect();
    for (path, node) in plan.paths.iter().zip(&held) {
        plan.report.info(format_args!(
            "{path} is held by the enclosing zklock run ({}, fencing token {}): running under it",
            node.path, node.czxid
        ));
    }
    Ok(Step::Go(Some(Entered {
        session,
        policy,
        owner,
        held,
    })))
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
