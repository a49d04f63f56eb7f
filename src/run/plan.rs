//! Everything `zklock run` decides from its command line before it talks
//! to ZooKeeper, and the lease rule for the session it is granted.

use std::cell::Cell;
use std::ffi::OsString;
use std::time::Duration;

use anyhow::Result;

use crate::cli::RunArgs;
use crate::command::child::{self};
use crate::exit::Failure;
use crate::lock::holder::HolderData;
use crate::lock::lease::LeasePolicy;
use crate::lock::recipe::{LockKind, acquisition_order};
use crate::report::Report;
use crate::session::{Settings, connection_timeout_for};

/// Everything decided from the command line before talking to ZooKeeper.
pub(crate) struct Plan<'a> {
    pub(crate) args: &'a RunArgs,
    pub(crate) argv: Vec<OsString>,
    /// The lock paths as given (for the environment) and in the order they
    /// are taken.
    pub(crate) paths: Vec<&'a str>,
    pub(crate) order: Vec<&'a str>,
    pub(crate) kind: LockKind,
    pub(crate) connect: Settings,
    /// The ACL of every node we create.
    pub(crate) acls: Vec<zklock::zk::records::Acl>,
    pub(crate) wait: bool,
    /// What our nodes say about us (holder.rs), less what a wait learns.
    pub(crate) own: HolderData,
    /// With `--supersede`, once a node was created: the czxid of the first,
    /// which every node created after it carries (holder.rs).
    pub(crate) first_queued: Cell<Option<i64>>,
    pub(crate) report: Report,
}

impl<'a> Plan<'a> {
    /// `report` is the run's (its `Outputs`').
    pub(crate) fn new(args: &'a RunArgs, report: Report) -> Result<Plan<'a>> {
        let argv = args.command_line().map_err(Failure::usage)?;
        // A typo in the command must not wait for the lock first.
        child::check_runnable(&argv)?;
        Plan::holding(args, argv, report)
    }

    /// The plan of a holder that runs no command (`zklock hold`): `what`
    /// stands for it in our nodes (docs/design.md, "Holds").
    pub(crate) fn holding(
        args: &'a RunArgs,
        what: Vec<OsString>,
        report: Report,
    ) -> Result<Plan<'a>> {
        let argv = what;
        let paths = args.lock_paths().map_err(Failure::usage)?;
        let connect = args.connection.settings()?;
        let mut own = HolderData::ours(&argv, args.label.as_deref());
        // Read by newer --supersede runs: only such waiters may be removed.
        own.supersede = args.supersede.then_some(true);
        let plan = Plan {
            args,
            own,
            first_queued: Cell::new(None),
            argv,
            order: acquisition_order(&paths),
            paths,
            kind: args.lock_kind(),
            acls: connect.acl.to_zk(),
            connect,
            wait: args.wait_limit() != Some(Duration::ZERO),
            report,
        };
        // A --kill-after given must fit the session asked for (and, once
        // connected, the one granted); an unset one is chosen to fit.
        if args.kill_after.is_some() {
            plan.policy(plan.connect.session_timeout)
                .map_err(Failure::usage)?;
        }
        refuse_once_per(&plan)?;
        refuse_supersede(&plan)?;
        Ok(plan)
    }

    /// What our nodes say about us now (holder.rs).
    pub(crate) fn holder(&self) -> HolderData {
        HolderData {
            first_czxid: self.first_queued.get(),
            ..self.own.clone()
        }
    }

    /// The lease rule for a (requested or granted) session timeout, with
    /// `--kill-after` as given (refused if it does not fit) or, if unset,
    /// the largest that fits.
    pub(crate) fn policy(&self, session_timeout: Duration) -> Result<LeasePolicy, String> {
        let policy = LeasePolicy {
            session_timeout,
            connection_timeout: connection_timeout_for(session_timeout),
            kill_after: self.args.kill_after.map_or(Duration::ZERO, |k| k.0),
            on_disconnect: self.args.on_disconnect,
        };
        match self.args.kill_after {
            Some(_) => policy.check().map(|()| policy),
            None => policy.with_default_kill_after(),
        }
    }
}

/// Why `--once-per` cannot go with the rest of the command line, if so.
fn refuse_once_per(plan: &Plan<'_>) -> Result<()> {
    if plan.args.once_per.is_none() {
        return Ok(());
    }
    let why = match (plan.kind, plan.paths.len()) {
        (LockKind::Semaphore(_), _) => {
            "--once-per cannot be combined with --limit: a window has exactly one run"
        }
        (LockKind::Read, _) => {
            "--once-per needs an exclusive lock: shared holders could all decide to run"
        }
        (_, n) if n > 1 => "--once-per takes exactly one PATH (the record lives beside its lock)",
        _ => return Ok(()),
    };
    Err(Failure::usage(why))
}

/// Why `--supersede` cannot go with the rest of the command line, if so:
/// "the newest run goes next" has an obvious meaning only for one queue of
/// runs that each exclude all others.
fn refuse_supersede(plan: &Plan<'_>) -> Result<()> {
    if !plan.args.supersede {
        return Ok(());
    }
    let why = match (plan.kind, plan.paths.len()) {
        (LockKind::Semaphore(_), _) => {
            "--supersede cannot be combined with --limit: it needs an exclusive lock"
        }
        (LockKind::Read, _) => {
            "--supersede needs an exclusive lock (-x or --write): shared waiters do not replace one another"
        }
        (_, n) if n > 1 => "--supersede takes exactly one PATH",
        _ => return Ok(()),
    };
    Err(Failure::usage(why))
}
