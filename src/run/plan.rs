//! Everything `zklock run` decides from its command line before it talks
//! to ZooKeeper, and the lease rule for the session it is granted.

use std::cell::Cell;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::cli::{LockArgs, RunArgs};
use crate::exit::{Exit, Failure};
use crate::lock::holder::HolderData;
use crate::lock::lease::{LeasePolicy, OnDisconnect};
use crate::lock::recipe::{LockKind, acquisition_order};
use crate::report::Report;
use crate::session::{Settings, connection_timeout_for};
use crate::values::Seconds;

/// Everything decided from the command line before talking to ZooKeeper:
/// the whole command line, resolved once (nothing after it reads
/// `RunArgs`).
pub(crate) struct Plan<'a> {
    pub(crate) argv: Vec<OsString>,
    /// The lock paths as given (for the environment) and in the order they
    /// are taken.
    pub(crate) paths: Vec<&'a str>,
    pub(crate) order: Vec<&'a str>,
    pub(crate) kind: LockKind,
    pub(crate) connect: Settings,
    /// The ACL of every node we create.
    pub(crate) acls: Vec<zklock::zk::records::Acl>,
    /// How long to wait for the lock (`--timeout`; None: for ever), and
    /// whether to wait at all (not with `--no-wait` nor `--timeout 0`).
    pub(crate) wait_limit: Option<Duration>,
    pub(crate) wait: bool,
    /// `--max-waiting`.
    pub(crate) max_waiting: Option<u32>,
    /// `--supersede`.
    pub(crate) supersede: bool,
    /// The exit of a run that does not get the lock, or skips its command
    /// (`-E`).
    pub(crate) conflict: Exit,
    /// `--kill-after` as given (None: chosen to fit the session).
    pub(crate) kill_after: Option<Duration>,
    pub(crate) on_disconnect: OnDisconnect,
    /// `--max-runtime`, unless 0 (no limit).
    pub(crate) max_runtime: Option<Seconds>,
    /// `--once-per` and its `--retry-after` (0 unless given).
    pub(crate) once_per: Option<Seconds>,
    pub(crate) retry_after: Seconds,
    /// The outputs (run::Outputs): `--metrics-file`, `--ping`,
    /// `--ping-skipped`.
    pub(crate) metrics_file: Option<&'a Path>,
    pub(crate) ping: Option<&'a str>,
    pub(crate) ping_skipped: bool,
    /// What our nodes say about us (holder.rs), less what a wait learns.
    pub(crate) own: HolderData,
    /// With `--supersede`, once a node was created: the czxid of the first,
    /// which every node created after it carries (holder.rs).
    pub(crate) first_queued: Cell<Option<i64>>,
    /// `-v`/`-q`: the run's report (also its `Outputs`').
    pub(crate) report: Report,
}

impl<'a> Plan<'a> {
    /// The plan of `zklock run`. Whether the command can run is checked
    /// later, once the metrics file is known (docs/design.md, "Lifecycle of
    /// `zklock run`").
    pub(crate) fn new(args: &'a RunArgs) -> Result<Plan<'a>> {
        let argv = args.command_line().map_err(Failure::usage)?;
        let mut plan = Plan::resolve(&args.lock, argv, args.kill_after)?;
        plan.max_runtime = args.max_runtime.filter(|limit| !limit.0.is_zero());
        Ok(plan)
    }

    /// The plan of a holder that runs no command (`zklock hold`): `what`
    /// stands for it in our nodes (docs/design.md, "Holds").
    pub(crate) fn holding(
        lock: &'a LockArgs,
        what: Vec<OsString>,
        kill_after: Option<Seconds>,
    ) -> Result<Plan<'a>> {
        Plan::resolve(lock, what, kill_after)
    }

    /// The options that take a lock, resolved, for a command `argv` (or a
    /// hold's steps) stopped `kill_after` after their TERM; refused (64)
    /// if they cannot go together.
    fn resolve(
        args: &'a LockArgs,
        argv: Vec<OsString>,
        kill_after: Option<Seconds>,
    ) -> Result<Plan<'a>> {
        let paths = args.lock_paths().map_err(Failure::usage)?;
        let connect = args.connection.settings()?;
        let mut own = HolderData::ours(&argv, args.label.as_deref());
        // Read by newer --supersede runs: only such waiters may be removed.
        own.supersede = args.supersede.then_some(true);
        let wait_limit = args.wait_limit();
        let plan = Plan {
            own,
            first_queued: Cell::new(None),
            argv,
            order: acquisition_order(&paths),
            paths,
            kind: args.lock_kind(),
            acls: connect.acl.to_zk(),
            connect,
            wait_limit,
            wait: wait_limit != Some(Duration::ZERO),
            max_waiting: args.max_waiting,
            supersede: args.supersede,
            conflict: Exit::Conflict(args.conflict_exit_code),
            kill_after: kill_after.map(|kill_after| kill_after.0),
            on_disconnect: args.on_disconnect,
            max_runtime: None,
            once_per: args.once_per,
            retry_after: args.retry_after.unwrap_or(Seconds(Duration::ZERO)),
            metrics_file: args.metrics_file.as_deref(),
            ping: args.ping.as_deref(),
            ping_skipped: args.ping_skipped,
            report: Report::new(args.verbosity()),
        };
        // A --kill-after given must fit the session asked for (and, once
        // connected, the one granted); an unset one is chosen to fit.
        if plan.kill_after.is_some() {
            plan.policy(plan.connect.session_timeout)
                .map_err(Failure::usage)?;
        }
        plan.refuse()?;
        Ok(plan)
    }

    /// Refuses what cannot go together (see [`refuse_once_per`]).
    fn refuse(&self) -> Result<()> {
        refuse_once_per(self)?;
        refuse_supersede(self)
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
            kill_after: self.kill_after.unwrap_or(Duration::ZERO),
            on_disconnect: self.on_disconnect,
        };
        match self.kill_after {
            Some(_) => policy.check().map(|()| policy),
            None => policy.with_default_kill_after(),
        }
    }
}

/// Why `--once-per` cannot go with the rest of the command line, if so.
fn refuse_once_per(plan: &Plan<'_>) -> Result<()> {
    if plan.once_per.is_none() {
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
    if !plan.supersede {
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
