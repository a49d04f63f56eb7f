//! Nested runs (issue 9, item 9): a `zklock run` inside a command that already
//! holds the same lock runs at once under the enclosing lock, with its fencing token,
//! creating and deleting nothing; an upgrade (exclusive inside shared) is refused at
//! once; a stale environment takes the usual path; and the nested run ends with 76
//! when the enclosing run's node goes.
//!
//! Nested runs use `-w`, so that on code without reentry they give up (75) instead of
//! waiting for their own ancestor forever.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{
    Holder, Inspector, KillOnDrop, LockLog, Scene, TempDir, assert_no_lock_nodes, ephemerals,
    is_dead, read_pid_file, run_bounded, shared_server, unique_path, wait_for_exit, wait_until,
    zklock_run,
};

const LONG: Duration = Duration::from_secs(30);
/// The nested run's `-w`: long enough for a loaded machine, short enough that old
/// code fails the test instead of hanging it.
const NESTED_WAIT: &str = "8s";

/// Prints each `ZKLOCK_*` variable to `<dir>/<prefix>_<NAME>`.
fn record_env(dir: &Path, prefix: &str) -> String {
    ["PATH", "NODE", "FENCING_TOKEN", "SESSION_ID"]
        .iter()
        .map(|name| {
            format!(
                "printf '%s' \"$ZKLOCK_{name}\" > '{}/{prefix}_{name}'\n",
                dir.display()
            )
        })
        .collect()
}

/// An outer `zklock run` whose command runs a nested `zklock run` on the same path.
/// The nested command records its environment, says it started, and waits for the
/// test to let it go; the outer command then records the nested run's exit status.
struct Nested {
    dir: TempDir,
    outer: KillOnDrop,
}

impl Nested {
    fn start(connect: &str, path: &str, outer_opts: &[&str], inner_opts: &[&str]) -> Nested {
        let dir = TempDir::new();
        let d = dir.path();
        let inner = format!(
            "{}: > '{d}/inner_started'\n\
             while [ ! -e '{d}/go' ]; do sleep 0.02; done\n",
            record_env(d, "inner"),
            d = d.display()
        );
        std::fs::write(d.join("inner.sh"), inner).unwrap();
        let outer = format!(
            "{}\"$NESTED_ZKLOCK\" run -z '{connect}' -w {NESTED_WAIT} {} '{path}' \
             -- sh '{d}/inner.sh' 2> '{d}/inner_stderr'\n\
             echo $? > '{d}/inner_exit'\n",
            record_env(d, "outer"),
            inner_opts.join(" "),
            d = d.display()
        );
        let outer = zklock_run(connect, path)
            .args(outer_opts)
            .args(["--", "sh", "-c", &outer])
            .env("NESTED_ZKLOCK", env!("CARGO_BIN_EXE_zklock"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("outer_stderr")).unwrap())
            .spawn()
            .expect("spawn zklock");
        Nested {
            dir,
            outer: KillOnDrop(outer),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name)).unwrap_or_else(|e| panic!("read {name}: {e}"))
    }

    /// Waits until the nested command runs; panics with both stderrs if the nested
    /// run ends first.
    fn wait_inner_started(&self) {
        wait_until(
            LONG,
            "the nested command starts (or the nested run ends)",
            || self.file("inner_started").exists() || self.file("inner_exit").exists(),
        );
        assert!(
            self.file("inner_started").exists(),
            "the nested run exited {} without running its command; its stderr:\n{}",
            self.read("inner_exit").trim(),
            self.read("inner_stderr")
        );
    }

    /// Lets the nested command end, and expects both runs to exit 0.
    fn finish(&mut self) {
        std::fs::write(self.file("go"), "").unwrap();
        let status = wait_for_exit(&mut self.outer, LONG).expect("the outer run ends");
        assert_eq!(
            (status.code(), self.read("inner_exit").trim()),
            (Some(0), "0"),
            "outer stderr:\n{}\nnested stderr:\n{}",
            self.read("outer_stderr"),
            self.read("inner_stderr")
        );
    }
}

/// The nested command ran under the outer lock: no node of its own while it ran, the
/// same `ZKLOCK_*` values, and nothing left behind afterwards.
fn assert_reentered(outer_opts: &[&str], inner_opts: &[&str]) {
    let s = Scene::new("reentrant");
    let mut nested = Nested::start(&s.connect, &s.path, outer_opts, inner_opts);
    nested.wait_inner_started();
    let nodes = ephemerals(s.zk(), &s.path);
    assert_eq!(
        nodes,
        [nested.read("outer_NODE")],
        "the nested run created a node of its own"
    );
    nested.finish();
    for name in ["PATH", "NODE", "FENCING_TOKEN", "SESSION_ID"] {
        assert_eq!(
            nested.read(&format!("inner_{name}")),
            nested.read(&format!("outer_{name}")),
            "ZKLOCK_{name}"
        );
    }
    assert_eq!(
        nested.read("inner_stderr"),
        "",
        "the nested run said something"
    );
    s.assert_no_lock_nodes();
}

#[test]
fn exclusive_inside_exclusive_reenters() {
    assert_reentered(&[], &[]);
}

#[test]
fn shared_inside_exclusive_reenters() {
    assert_reentered(&[], &["-s"]);
}

#[test]
fn shared_inside_shared_reenters() {
    // Readers share anyway; re-entering shows as the outer token and no new node.
    assert_reentered(&["-s"], &["-s"]);
}

#[test]
fn write_inside_exclusive_reenters() {
    assert_reentered(&["-x"], &["--write"]);
}

#[test]
fn semaphore_lease_reenters() {
    // With one permit, a nested run that queued normally would wait for itself.
    assert_reentered(&["--limit", "1"], &["--limit", "1"]);
}

#[test]
fn exclusive_inside_shared_is_refused_at_once() {
    let s = Scene::new("reentrant-upgrade");
    let mut nested = Nested::start(&s.connect, &s.path, &["-s"], &["-x"]);
    let started = Instant::now();
    wait_until(LONG, "the nested run ends", || {
        nested.file("inner_exit").exists()
    });
    let took = started.elapsed();
    let status = wait_for_exit(&mut nested.outer, LONG).expect("the outer run ends");
    assert_eq!(status.code(), Some(0), "{}", nested.read("outer_stderr"));
    let stderr = nested.read("inner_stderr");
    assert_eq!(
        nested.read("inner_exit").trim(),
        "64",
        "nested stderr:\n{stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines.len() == 1
            && lines[0].starts_with("zklock: cannot take ")
            && lines[0].contains("holds it shared"),
        "one line expected, got {stderr:?}"
    );
    assert!(!nested.file("inner_started").exists(), "the command ran");
    // "At once": well before the nested run's own -w could have expired.
    assert!(took < Duration::from_secs(6), "refused only after {took:?}");
    s.assert_no_lock_nodes();
}

/// A nested run with a holder's `ZKLOCK_*` variables, as if its command had started it.
fn nested_with_env(connect: &str, path: &str, env: &[(&str, String)]) -> Command {
    let mut cmd = zklock_run(connect, path);
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd
}

fn holder_env(holder: &Holder) -> Vec<(&'static str, String)> {
    [
        "ZKLOCK_PATH",
        "ZKLOCK_NODE",
        "ZKLOCK_SESSION_ID",
        "ZKLOCK_FENCING_TOKEN",
    ]
    .into_iter()
    .map(|name| (name, holder.env(name)))
    .collect()
}

#[test]
fn stale_environment_takes_the_usual_path() {
    let s = Scene::new("reentrant-stale");

    // The enclosing run is gone: its node no longer exists.
    let mut gone = s.hold();
    let stale = holder_env(&gone);
    gone.finish();
    let scratch = TempDir::new();
    let script = record_env(scratch.path(), "inner");
    let out = run_bounded(
        nested_with_env(&s.connect, &s.path, &stale).args([
            "-w",
            NESTED_WAIT,
            "--",
            "sh",
            "-c",
            &script,
        ]),
        LONG,
    );
    out.assert_code(0);
    let read = |name: &str| std::fs::read_to_string(scratch.path().join(name)).unwrap();
    assert_ne!(read("inner_NODE"), stale[1].1, "ran under a deleted node");
    let old: i64 = stale[3].1.parse().unwrap();
    let new: i64 = read("inner_FENCING_TOKEN").parse().unwrap();
    assert!(new > old, "token {new} after {old}");

    // The named node exists and holds, but belongs to another session than the
    // environment says: not the enclosing run's lock, so queue behind it.
    let mut other = s.hold();
    let mut forged = holder_env(&other);
    forged[2].1 = format!("{:#x}", s.zk().session_id());
    let out = run_bounded(
        nested_with_env(&s.connect, &s.path, &forged).args(["-n", "--", "true"]),
        LONG,
    );
    out.assert_code(75);
    other.finish();
    s.assert_no_lock_nodes();
}

#[test]
fn nested_run_is_lock_lost_when_the_enclosing_node_goes() {
    let s = Scene::new("reentrant-lost");
    let mut outer = s.hold();
    let scratch = TempDir::new();
    let d = scratch.path().display();
    // The nested command runs in its own process group, which the enclosing run's
    // kill of its group would not reach: the nested zklock must end it itself.
    let mut nested = KillOnDrop(
        nested_with_env(&s.connect, &s.path, &holder_env(&outer))
            .args(["-w", NESTED_WAIT, "--kill-after", "2s", "--", "sh", "-c"])
            .arg(format!("echo $$ > '{d}/pid'; exec sleep 60"))
            .stderr(std::fs::File::create(scratch.path().join("stderr")).unwrap())
            .spawn()
            .expect("spawn nested zklock"),
    );
    let pid = read_pid_file(&scratch.path().join("pid"), LONG);
    assert!(s.zk().delete(&outer.node()), "the enclosing node exists");
    let status = wait_for_exit(&mut nested, LONG).expect("the nested run ends");
    let stderr = std::fs::read_to_string(scratch.path().join("stderr")).unwrap();
    assert_eq!(status.code(), Some(76), "stderr:\n{stderr}");
    assert!(stderr.contains("lock lost"), "{stderr}");
    assert!(is_dead(pid as u32), "the nested command still runs");
    outer.assert_exit(76, LONG);
    s.assert_no_lock_nodes();
}

#[test]
fn only_some_paths_held_is_refused() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let base = unique_path("reentrant-partial");
    let (a, b) = (format!("{base}/a"), format!("{base}/b"));
    let log = LockLog::new();
    let mut outer = Holder::start(&mut zklock_run(&connect, &a), &log);
    let out = run_bounded(
        nested_with_env(&connect, &b, &holder_env(&outer))
            .arg(&a)
            .args(["-w", NESTED_WAIT, "--", "true"]),
        LONG,
    );
    out.assert_code(64);
    let line = out.one_error_line();
    assert!(
        line.contains(&format!(
            "{a} is held by the enclosing zklock run but {b} is not"
        )),
        "{line}"
    );
    assert!(ephemerals(&zk, &b).is_empty(), "took {b}");
    outer.finish();
    assert_no_lock_nodes(&zk, &base);
}
