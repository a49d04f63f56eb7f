//! `--supersede` across lost places and sessions: a run knows when it first
//! queued, so a run that was frozen or cut off never removes a newer run, and
//! never runs after one (docs/design.md, "Superseding waiters").

use std::process::Command;
use std::time::Duration;

use crate::harness::{
    FaultProxy, Gated, Inspector, LockLog, Mode, assert_no_lock_nodes, contenders, run_bounded,
    shared_server, signal, unique_path, wait_for_contenders, wait_until, zklock, zklock_run,
};
use crate::supersede::{Run, assert_superseded};

const LONG: Duration = Duration::from_secs(30);

/// How the older run is stalled: its zklock frozen, or its connection cut.
#[derive(Clone, Copy)]
enum Stall {
    Stop,
    Blackhole,
}

/// The older run's view of the server: direct, or through a proxy to cut.
struct Line {
    stall: Stall,
    proxy: FaultProxy,
}

impl Line {
    fn new(stall: Stall) -> Line {
        Line {
            stall,
            proxy: FaultProxy::start(shared_server().addr()),
        }
    }

    fn connect_string(&self) -> String {
        match self.stall {
            Stall::Stop => shared_server().connect_string(),
            Stall::Blackhole => self.proxy.connect_string(),
        }
    }

    fn begin(&self, run: &Run) {
        match self.stall {
            Stall::Stop => signal(run.pid(), libc::SIGSTOP),
            Stall::Blackhole => self.proxy.set_mode(Mode::Blackhole),
        }
    }

    fn end(&self, run: &Run) {
        match self.stall {
            Stall::Stop => signal(run.pid(), libc::SIGCONT),
            Stall::Blackhole => self.proxy.set_mode(Mode::Pass),
        }
    }
}

/// The lock nodes under `path`, in queue order.
fn queue(zk: &Inspector, path: &str) -> Vec<String> {
    let mut nodes = contenders(zk, path, "-lock-");
    nodes.sort_by_key(|node| node.rsplit("-lock-").next().map(str::to_owned));
    nodes
}

/// `zklock run -z CONNECT --supersede --label LABEL OPTIONS PATH -- <logged true>`.
fn superseding(connect: &str, path: &str, label: &str, options: &[&str], log: &LockLog) -> Command {
    let mut cmd = zklock_run(connect, path);
    cmd.args(["--supersede", "--label", label])
        .args(options)
        .args(["--", "sh", "-c"])
        .arg(log.shell_body("true"));
    cmd
}

/// A lock held by a gated command, and an older `--supersede` run
/// (`job-old`) waiting behind it on a line that can be stalled.
struct Scene {
    zk: Inspector,
    line: Line,
    path: String,
    log: LockLog,
    holder: Gated,
    old_node: String,
}

impl Scene {
    /// The scene, and the older run started with `options`.
    fn start(stall: Stall, tag: &str, options: &[&str]) -> (Scene, Run) {
        let zk = Inspector::connect(&shared_server().connect_string());
        let line = Line::new(stall);
        let path = unique_path(tag);
        let log = LockLog::new();
        let holder = Gated::start(zklock_run(&shared_server().connect_string(), &path));
        let old = superseding(&line.connect_string(), &path, "job-old", options, &log);
        let old = Run::spawn(old);
        wait_for_contenders(&zk, &path, "-lock-", 2);
        let old_node = queue(&zk, &path).remove(1);
        let scene = Scene {
            zk,
            line,
            path,
            log,
            holder,
            old_node,
        };
        (scene, old)
    }

    /// Starts the newer run, `job-new`, directly connected.
    fn newer_run(&self) -> Run {
        let connect = shared_server().connect_string();
        Run::spawn(superseding(&connect, &self.path, "job-new", &[], &self.log))
    }

    /// The holder's command ends; then the newer run takes the lock, runs
    /// and exits 0.
    fn newer_run_runs(&mut self, new: Run) {
        self.holder.release();
        assert!(self.holder.wait(LONG).success());
        let (code, stderr) = new.exit();
        assert_eq!(code, 0, "{stderr}");
    }

    /// Only the newer run ran, and no lock node is left.
    fn assert_only_the_newer_run_ran(&self) {
        let log = &self.log;
        assert_eq!(log.starts(), 1, "only job-new ran:\n{}", log.contents());
        assert_no_lock_nodes(&self.zk, &self.path);
    }
}

/// A waiting run whose session expires while it is stalled, and a newer run
/// that queues meanwhile: the older one, back, ends with 75 naming the newer
/// one, which stays queued and runs.
fn session_expired_while_a_newer_run_queued(stall: Stall) {
    let short = ["--session-timeout", "3s", "--kill-after", "0.5s"];
    let (mut scene, old) = Scene::start(stall, "supersede-expired", &short);
    let Scene { zk, path, .. } = &scene;

    scene.line.begin(&old);
    wait_until(LONG, "the older run's session expired", || {
        !zk.exists(&scene.old_node)
    });
    let new = scene.newer_run();
    wait_for_contenders(zk, path, "-lock-", 2);
    let newer_node = queue(zk, path).remove(1);
    scene.line.end(&old);

    assert_superseded(old, "job-new");
    assert!(zk.exists(&newer_node), "the newer run was removed");
    scene.newer_run_runs(new);
    scene.assert_only_the_newer_run_ran();
}

#[test]
fn frozen_past_its_session_an_older_run_never_removes_a_newer_one() {
    session_expired_while_a_newer_run_queued(Stall::Stop);
}

#[test]
fn cut_off_past_its_session_an_older_run_never_removes_a_newer_one() {
    session_expired_while_a_newer_run_queued(Stall::Blackhole);
}

/// A waiting run superseded while it is stalled, back after the newer run
/// held the lock and released it: it ends with 75 naming the newer run,
/// instead of queueing again and running after it.
fn superseded_while_stalled_and_back_after_the_newer_run(stall: Stall) {
    // A session long enough to outlast the stall.
    let long = ["--session-timeout", "10s"];
    let (mut scene, old) = Scene::start(stall, "supersede-stalled", &long);

    scene.line.begin(&old);
    let new = scene.newer_run();
    wait_until(LONG, "the newer run removed the older one", || {
        let Scene { zk, path, .. } = &scene;
        !zk.exists(&scene.old_node) && contenders(zk, path, "-lock-").len() == 2
    });
    scene.newer_run_runs(new);
    scene.line.end(&old);

    assert_superseded(old, "job-new");
    scene.assert_only_the_newer_run_ran();
}

#[test]
fn frozen_while_superseded_an_older_run_never_runs_after_the_newer_one() {
    superseded_while_stalled_and_back_after_the_newer_run(Stall::Stop);
}

#[test]
fn cut_off_while_superseded_an_older_run_never_runs_after_the_newer_one() {
    superseded_while_stalled_and_back_after_the_newer_run(Stall::Blackhole);
}

/// An operator deletes a waiter's node while a run that first queued before
/// it (and queued again, behind it) waits: that is no supersede. The waiter
/// queues again, removes the older run, and runs.
#[test]
fn an_operators_delete_is_not_a_supersede() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let path = unique_path("supersede-broken");
    let log = LockLog::new();
    let holder = Gated::start(zklock_run(&connect, &path));
    let waiter = Run::spawn(superseding(&connect, &path, "job-waiter", &[], &log));
    wait_for_contenders(&zk, &path, "-lock-", 2);
    let queued = queue(&zk, &path);
    let (_, waiter_node) = queued[1].rsplit_once('/').unwrap();
    // As an older --supersede run's node would be, queued again in a new
    // session: its age is its first node's czxid, before the waiter's.
    let (_, holder_stat) = zk.get_data(&queued[0]).unwrap();
    let older = serde_json::json!({
        "host": "elsewhere",
        "zklock_pid": 1,
        "label": "job-older",
        "supersede": true,
        "first_czxid": holder_stat.czxid,
    });
    let (older_node, _) = zk.create_ephemeral_sequential(
        &format!("{path}/_c_0ld3r-lock-"),
        older.to_string().as_bytes(),
    );

    let mut broken = zklock();
    broken.args([
        "break",
        "-z",
        &connect,
        "--yes",
        "--node",
        waiter_node,
        &path,
    ]);
    run_bounded(&mut broken, LONG).assert_code(0);
    wait_until(LONG, "the waiter removed the older run", || {
        !zk.exists(&older_node)
    });
    assert!(holder.finish().success());
    let (code, stderr) = waiter.exit();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(log.starts(), 1, "{}", log.contents());
    assert_no_lock_nodes(&zk, &path);
}
