//! What a holder stores in its node (issue 9, items 3 and 4): a bounded
//! command line or a `--label`, the command's pid and the server time the
//! lock was taken; and a request the server refuses ends zklock at once.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use crate::faults_util::watchers_of;
use crate::harness::{
    Holder, Inspector, KillOnDrop, Scene, ServerOptions, TempDir, ZkServer, assert_no_lock_nodes,
    contenders, run_bounded, shared_server, wait_for_contenders, wait_for_exit, wait_until,
};

const LONG: Duration = Duration::from_secs(30);

/// The JSON object stored in `node`.
fn fields(zk: &Inspector, node: &str) -> Map<String, Value> {
    let (data, _) = zk
        .get_data(node)
        .unwrap_or_else(|| panic!("{node} is gone"));
    match serde_json::from_slice(&data) {
        Ok(Value::Object(fields)) => fields,
        other => panic!("{node}: not a JSON object: {other:?}"),
    }
}

/// Waits until the holder of `node` has written that its command runs.
fn wait_acquired(zk: &Inspector, node: &str) -> Map<String, Value> {
    let mut found = Map::new();
    wait_until(LONG, &format!("{node} marked acquired"), || {
        found = fields(zk, node);
        found.get("acquired") == Some(&Value::Bool(true))
    });
    found
}

/// A `zklock run` (options given) of `sh -c SCRIPT sh ARGS...`, where SCRIPT
/// writes `$$` and `$ZKLOCK_NODE` to files in `dir` and holds the lock until
/// its stdin closes; zklock's stderr goes to `dir/stderr`.
fn spawn_holding(mut cmd: Command, dir: &Path, args: &[String]) -> KillOnDrop {
    let d = dir.display();
    let script = format!(
        "echo $$ > '{d}/pid.tmp'; printf %s \"$ZKLOCK_NODE\" > '{d}/node.tmp'\n\
         mv '{d}/pid.tmp' '{d}/pid'; mv '{d}/node.tmp' '{d}/node'\n\
         exec cat > /dev/null"
    );
    cmd.arg("--")
        .arg("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args);
    let stderr = File::create(dir.join("stderr")).expect("create stderr file");
    KillOnDrop(
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn zklock"),
    )
}

/// Waits until the command of [`spawn_holding`] runs; panics with zklock's
/// stderr if zklock exits first. Returns the command's node.
fn wait_holding(child: &mut KillOnDrop, dir: &Path) -> String {
    let node = dir.join("node");
    let mut exited = None;
    wait_until(LONG, "the locked command runs", || {
        exited = child.try_wait().expect("try_wait");
        node.exists() || exited.is_some()
    });
    if !node.exists() {
        panic!(
            "zklock exited with {exited:?} before running the command; stderr:\n{}",
            std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
        );
    }
    std::fs::read_to_string(node).expect("read node file")
}

fn release(mut child: KillOnDrop, dir: &Path) {
    drop(child.stdin.take());
    let status = wait_for_exit(&mut child, LONG).expect("zklock exits after its command");
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
    );
}

/// About 1.1 MB of arguments, more than the server's default request limit:
/// zklock used to reconnect forever (the server dropped every create). Now
/// the stored command is cut to a few KiB and the lock is taken at once.
#[test]
fn a_huge_command_line_is_stored_cut_and_the_lock_taken() {
    let s = Scene::new("huge-argv");
    let dir = TempDir::new();
    // Each argument stays below Linux's 128 KiB limit for one argument; all
    // together below ARG_MAX (2 MiB).
    let args: Vec<String> = (0..11).map(|_| "x".repeat(100_000)).collect();
    let mut cmd = s.run();
    cmd.args(["-w", "20s"]);
    let mut child = spawn_holding(cmd, dir.path(), &args);
    let node = wait_holding(&mut child, dir.path());

    let zk = Inspector::connect(&s.connect);
    let (data, _) = zk.get_data(&node).expect("our node");
    assert!(data.len() < 8192, "{} bytes stored", data.len());
    let fields = fields(&zk, &node);
    let command = fields["command"].as_str().expect("a command string");
    let (kept, rest) = command
        .rsplit_once('…')
        .unwrap_or_else(|| panic!("not visibly cut: ...{}", &command[command.len() - 40..]));
    assert!(kept.starts_with("sh -c "), "{}", &kept[..40]);
    let left_out: usize = rest
        .strip_prefix("[+")
        .and_then(|r| r.strip_suffix(" bytes]"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("bad cut marker {rest:?}"));
    let script_len = {
        let script_line = kept.strip_prefix("sh -c ").unwrap();
        script_line
            .find(" sh xxx")
            .expect("the arguments follow the script")
    };
    let full = "sh -c ".len() + script_len + " sh".len() + args.len() * 100_001;
    assert_eq!(kept.len() + left_out, full);
    release(child, dir.path());
    assert_no_lock_nodes(&zk, &s.path);
}

/// A request the server refuses (here a label larger than a small
/// `jute.maxbuffer`): the server drops the connection without an answer and
/// the session stays alive. zklock used to retry until its deadline (then
/// exit 75, "timed out") or forever; now it gives up at once with 70 and a
/// line naming the request and the likely cause.
#[test]
fn a_request_the_server_refuses_is_a_clear_error() {
    let server = ZkServer::start_with(ServerOptions {
        jute_max_buffer: Some(2048),
        container_check_interval: Some(Duration::from_millis(200)),
        ..ServerOptions::default()
    });
    let s = Scene::on(server.connect_string(), "refused");
    let path = &s.path;
    let scratch = TempDir::new();
    let ran = scratch.path().join("ran");
    let label = "y".repeat(3000);
    let mut cmd = s.run();
    cmd.args(["-w", "30s", "--label", &label, "--", "touch"])
        .arg(&ran);
    let out = run_bounded(&mut cmd, Duration::from_secs(60));
    out.assert_code(70);
    let line = out.one_error_line();
    assert!(
        line.contains(&format!("creating a lock node under {path}"))
            && line.contains("jute.maxbuffer"),
        "{line}"
    );
    // A handful of reconnects, not a wait for the 30 s deadline.
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
    assert!(!ran.exists(), "the command ran");
    let zk = Inspector::connect(&s.connect);
    assert_no_lock_nodes(&zk, path);
    wait_until(LONG, "the lock's container reaped", || !zk.exists(path));
}

/// "held by ... since T" gave the time the holder queued and zklock's pid.
/// After a 2 s queue, a `--no-wait` run must name the command's pid and the
/// time the lock was taken (server clock: the same host here).
#[test]
fn no_wait_names_the_commands_pid_and_when_the_lock_was_taken() {
    let s = Scene::new("acquired-time");
    let mut first = s.hold();
    let mut second = Holder::spawn(&mut s.run(), &s.log);
    wait_for_contenders(s.zk(), &s.path, "-lock-", 2);
    // The scenario itself: the second holder queues for 2 s. Not a
    // synchronisation, which is done by conditions only.
    std::thread::sleep(Duration::from_secs(2));
    // To the second, as the message prints times.
    let released = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    first.finish();
    second.wait_started(LONG);
    wait_acquired(s.zk(), &second.node());

    let mut cmd = s.run();
    cmd.args(["-n", "--", "true"]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(75);
    let line = out.one_error_line();
    let expected = format!(
        "held by pid {} (zklock {}) on ",
        second.shell_pid(),
        second.pid()
    );
    assert!(line.contains(&expected), "{expected:?} not in {line:?}");
    let since = line
        .split_once(" since ")
        .and_then(|(_, rest)| rest.split_once(": "))
        .map(|(time, _)| time)
        .unwrap_or_else(|| panic!("no time in {line:?}"));
    let shown = humantime::parse_rfc3339(since)
        .unwrap_or_else(|e| panic!("{since:?}: {e}"))
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        shown >= released,
        "shows {since}, before the lock was released ({released} s): {line}"
    );
    assert!(!line.contains("queued since"), "{line}");
    second.finish();
    s.assert_no_lock_nodes();
}

/// `--label` is stored instead of the command line, and shown instead of it;
/// a secret in the arguments reaches no node, queued or holding.
#[test]
fn a_label_replaces_the_command_line_everywhere() {
    let s = Scene::new("label");
    let secret = "--password=hunter2".to_string();
    let label = "nightly backup (https://ci.example/job/42)";

    let holder_dir = TempDir::new();
    let mut cmd = s.run();
    cmd.args(["--label", label]);
    let mut holder = spawn_holding(cmd, holder_dir.path(), std::slice::from_ref(&secret));
    let node = wait_holding(&mut holder, holder_dir.path());
    let held = wait_acquired(s.zk(), &node);

    let waiter_dir = TempDir::new();
    let mut cmd = s.run();
    cmd.args(["--label", label]);
    let mut waiter = spawn_holding(cmd, waiter_dir.path(), std::slice::from_ref(&secret));
    let queued_node = wait_for_contenders(s.zk(), &s.path, "-lock-", 2)
        .into_iter()
        .find(|n| *n != node)
        .expect("the waiter's node");
    let queued = fields(s.zk(), &queued_node);

    for (what, fields) in [("holding", &held), ("queued", &queued)] {
        assert_eq!(fields["label"], label, "{what}: {fields:?}");
        assert!(!fields.contains_key("command"), "{what}: {fields:?}");
        assert!(
            !Value::Object(fields.clone())
                .to_string()
                .contains("hunter2"),
            "{what}: the secret is stored: {fields:?}"
        );
    }

    let mut cmd = s.run();
    cmd.args(["-n", "--", "true"]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(75);
    let line = out.one_error_line();
    assert!(line.ends_with(&format!(": {label}")), "{line}");
    assert!(!line.contains("hunter2"), "{line}");

    // -v names the first in the queue the same way.
    let mut cmd = s.run();
    cmd.args(["-v", "-w", "0.3", "--", "true"]);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(75);
    let first = out
        .stderr
        .lines()
        .find(|l| l.contains("first is"))
        .unwrap_or_else(|| panic!("no `first is` line: {}", out.stderr));
    assert!(first.ends_with(&format!(": {label})")), "{first}");
    assert!(!out.stderr.contains("hunter2"), "{}", out.stderr);

    release(holder, holder_dir.path());
    wait_holding(&mut waiter, waiter_dir.path());
    release(waiter, waiter_dir.path());
    s.assert_no_lock_nodes();
}

/// The holder's own write fires the data watch its lease keeps on its node:
/// that is no loss. The lease watches again (seen on the server after the
/// write) and still notices a real deletion.
#[test]
fn the_holders_own_write_is_not_a_loss() {
    let server = shared_server();
    let s = Scene::on(server.connect_string(), "own-write");
    // Queued first, so the watch set while waiting is the one the write fires.
    let mut first = s.hold();
    let mut holder = Holder::spawn(&mut s.run(), &s.log);
    wait_for_contenders(s.zk(), &s.path, "-lock-", 2);
    first.finish();
    holder.wait_started(LONG);
    let node = holder.node();
    let session = s
        .zk()
        .stat(&node)
        .expect("the holder's node")
        .ephemeral_owner;
    wait_acquired(s.zk(), &node);
    // The write consumed every data watch on the node; one set again by the
    // holder's session can only come from a lease that took the write for
    // what it is.
    wait_until(LONG, "the holder watching its node again", || {
        watchers_of(&server.four_letter("wchp"), &node).contains(&session)
    });
    assert!(
        holder.stderr().is_empty() && contenders(s.zk(), &s.path, "-lock-") == [node.clone()],
        "{}",
        holder.stderr()
    );
    assert!(s.zk().delete(&node));
    holder.assert_exit(76, LONG);
    assert!(
        holder.stderr().contains(&format!("{node} was deleted")),
        "{}",
        holder.stderr()
    );
    s.assert_no_lock_nodes();
}
