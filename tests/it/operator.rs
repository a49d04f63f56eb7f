//! The operator commands: `zklock status`, `list` and `break`, against real locks
//! held by zklock, Curator-named and kazoo clients.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{
    Holder, Inspector, KazooKind, KazooLock, KillOnDrop, LockLog, Pty, Scene, shared_server,
    unique_path, wait_for_contenders, wait_for_exit, wait_until, zklock, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

fn op(connect: &str, args: &[&str]) -> Output {
    zklock()
        .args(&args[..1])
        .args(["-z", connect])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .expect("run zklock")
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A `zklock run` waiting for PATH (it gives up after a minute at most).
fn waiter(connect: &str, path: &str, args: &[&str]) -> KillOnDrop {
    KillOnDrop(
        zklock_run(connect, path)
            .args(args)
            .args(["-w", "60s", "--", "true"])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn waiter"),
    )
}

#[test]
fn status_of_a_free_path() {
    let s = Scene::new("status-free");
    let path = &s.path;
    let text = op(&s.connect, &["status", path]);
    assert_eq!(text.status.code(), Some(0), "{text:?}");
    assert_eq!(stdout(&text).trim(), format!("{path}: free"));
    let doc = json(&op(&s.connect, &["status", "--json", path]));
    let lock = &doc["locks"][0];
    assert_eq!(lock["path"], path.as_str());
    assert_eq!(lock["kind"], "free");
    assert_eq!(lock["held"], false);
    assert_eq!(lock["holders"], Value::Array(Vec::new()));
    assert_eq!(lock["waiting"], Value::Array(Vec::new()));
}

#[test]
fn status_of_an_exclusive_lock_with_three_waiters() {
    let s = Scene::new("status-excl");
    let path = &s.path;
    let mut holder = Holder::start(s.run().args(["--label", "nightly backup"]), &s.log);
    let _waiters: Vec<KillOnDrop> = (0..3).map(|_| waiter(&s.connect, path, &[])).collect();
    wait_for_contenders(s.zk(), path, "-lock-", 4);
    // The holder records its command's pid just after starting it.
    wait_until(LONG, "the holder's acquired write", || {
        s.zk()
            .get_data(&holder.node())
            .is_some_and(|(data, _)| String::from_utf8_lossy(&data).contains("\"acquired\""))
    });

    let output = op(&s.connect, &["status", "--json", path]);
    assert_eq!(output.status.code(), Some(1), "held means 1: {output:?}");
    let doc = json(&output);
    let lock = &doc["locks"][0];
    assert_eq!(lock["kind"], "exclusive");
    assert_eq!(lock["held"], true);
    let holders = lock["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1);
    let h = &holders[0];
    assert_eq!(h["node"], holder.node().rsplit('/').next().unwrap());
    assert_eq!(h["kind"], "lock");
    assert_eq!(h["position"], 1);
    assert_eq!(h["client"], "zklock");
    assert_eq!(h["fencing_token"], holder.tokens()[0]);
    assert_eq!(h["session_id"], holder.env("ZKLOCK_SESSION_ID"));
    assert!(h["since"].as_str().unwrap().ends_with('Z'), "{h}");
    assert!(h["held_seconds"].as_f64().unwrap() >= 0.0, "{h}");
    assert_eq!(h["holder"]["label"], "nightly backup");
    assert!(h["holder"].get("command").is_none(), "{h}");
    // Written once the command runs: its pid, and the acquisition time.
    assert_eq!(h["holder"]["acquired"], true, "{h}");
    assert_eq!(h["holder"]["pid"], holder.shell_pid(), "{h}");
    assert!(h["holder"]["host"].is_string(), "{h}");
    let waiting = lock["waiting"].as_array().unwrap();
    assert_eq!(waiting.len(), 3);
    for (i, w) in waiting.iter().enumerate() {
        assert_eq!(w["position"], i + 2);
        assert!(w["waited_seconds"].as_f64().is_some(), "{w}");
        assert!(w.get("held_seconds").is_none(), "{w}");
    }
    let tokens: Vec<i64> = waiting
        .iter()
        .map(|w| w["fencing_token"].as_i64().unwrap())
        .collect();
    assert!(
        tokens.windows(2).all(|t| t[0] < t[1]),
        "queue order: {tokens:?}"
    );

    let text = stdout(&op(&s.connect, &["status", path]));
    assert!(
        text.starts_with(&format!("{path}: exclusive, held, 3 waiting\n")),
        "{text}"
    );
    assert!(text.contains(": nightly backup"), "{text}");
    holder.release();
}

#[test]
fn status_of_a_shared_lock_and_a_semaphore() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let log = LockLog::new();

    let shared = unique_path("status-shared");
    let mut readers: Vec<Holder> = (0..2)
        .map(|_| Holder::start(zklock_run(&connect, &shared).arg("-s"), &log))
        .collect();
    let _writer = waiter(&connect, &shared, &["--write"]);
    wait_for_contenders(&zk, &shared, "__WRIT__", 1);
    let doc = json(&op(&connect, &["status", "--json", &shared]));
    let lock = &doc["locks"][0];
    assert_eq!(lock["kind"], "shared");
    let holders = lock["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2);
    assert!(holders.iter().all(|h| h["kind"] == "read"), "{lock}");
    assert_eq!(lock["waiting"][0]["kind"], "write");

    let sem = unique_path("status-sem");
    let log2 = LockLog::new();
    let mut permits: Vec<Holder> = (0..2)
        .map(|_| Holder::start(zklock_run(&connect, &sem).args(["--limit", "2"]), &log2))
        .collect();
    let _third = waiter(&connect, &sem, &["--limit", "2"]);
    wait_for_contenders(&zk, &format!("{sem}/leases"), "-lease-", 3);
    let doc = json(&op(&connect, &["status", "--json", &sem]));
    let lock = &doc["locks"][0];
    assert_eq!(lock["kind"], "semaphore");
    assert_eq!(lock["limit"], 2);
    assert_eq!(lock["permits_used"], 2);
    assert_eq!(lock["holders"].as_array().unwrap().len(), 2, "{lock}");
    assert!(lock["holders"][0]["kind"] == "lease", "{lock}");
    assert_eq!(lock["waiting"].as_array().unwrap().len(), 1, "{lock}");
    let text = stdout(&op(&connect, &["status", &sem]));
    assert!(text.contains("semaphore of 2 (2 used)"), "{text}");

    for holder in readers.iter_mut().chain(permits.iter_mut()) {
        holder.release();
    }
}

#[test]
fn status_shows_curator_kazoo_and_foreign_data() {
    let s = Scene::new("status-foreign");
    let path = &s.path;
    s.zk().create_all(path);
    // A Curator InterProcessMutex node: Curator stores the client's address.
    s.zk().create_ephemeral_sequential(
        &format!("{path}/_c_3c4f1a52-6a4e-4a5e-9f55-0c7a3c1c1a11-lock-"),
        b"10.0.0.7",
    );
    let kazoo = KazooLock::spawn(KazooKind::Lock, &s.connect, path, None, None);
    wait_for_contenders(s.zk(), path, "__lock__", 1);
    // Binary data that is not zklock's JSON is not fatal either.
    s.zk().create_ephemeral_sequential(
        &format!("{path}/_c_0b9d2e11-1111-4222-8333-944455556666-lock-"),
        &[0xff, 0x00, 0x1b],
    );
    let output = op(&s.connect, &["status", "--json", path]);
    let doc = json(&output);
    let lock = &doc["locks"][0];
    assert_eq!(lock["holders"][0]["client"], "curator", "{lock}");
    assert_eq!(lock["holders"][0]["data"], "10.0.0.7", "{lock}");
    assert_eq!(lock["waiting"][0]["client"], "kazoo", "{lock}");
    assert_eq!(lock["waiting"][1]["client"], "curator", "{lock}");
    assert!(lock["waiting"][1].get("data").is_none(), "{lock}");
    let text = stdout(&op(&s.connect, &["status", path]));
    assert!(
        text.contains("(curator)") && text.contains("(kazoo)"),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "escape codes must not pass: {text}"
    );
    drop(kazoo);
}

#[test]
fn status_and_list_through_a_chroot() {
    let server = shared_server();
    let root = unique_path("chroot");
    let zk = Inspector::connect(&server.connect_string());
    zk.create_all(&root);
    let chrooted = format!("{}{root}", server.connect_string());
    let log = LockLog::new();
    let mut holder = Holder::start(&mut zklock_run(&chrooted, "/jobs/a"), &log);
    let doc = json(&op(&chrooted, &["status", "--json", "/jobs/a"]));
    assert_eq!(doc["locks"][0]["held"], true, "{doc}");
    let listed = json(&op(&chrooted, &["list", "--json"]));
    let paths: Vec<&str> = listed["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/jobs/a"]);
    holder.release();
}

#[test]
fn list_finds_every_lock_under_a_prefix() {
    let connect = shared_server().connect_string();
    let prefix = unique_path("list");
    let zk = Inspector::connect(&connect);
    let log = LockLog::new();
    let mut a = Holder::start(&mut zklock_run(&connect, &format!("{prefix}/a")), &log);
    let log2 = LockLog::new();
    let mut b = Holder::start(
        zklock_run(&connect, &format!("{prefix}/deep/b")).args(["--limit", "3"]),
        &log2,
    );
    let _w = waiter(&connect, &format!("{prefix}/a"), &[]);
    wait_for_contenders(&zk, &format!("{prefix}/a"), "-lock-", 2);
    let output = op(&connect, &["list", "--json", &prefix]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let doc = json(&output);
    let locks = doc["locks"].as_array().unwrap();
    assert_eq!(locks.len(), 2, "{doc}");
    assert_eq!(locks[0]["path"], format!("{prefix}/a"));
    assert_eq!(locks[0]["kind"], "exclusive");
    assert_eq!(locks[0]["holders"], 1);
    assert_eq!(locks[0]["waiting"], 1);
    assert!(locks[0]["oldest_held_seconds"].as_f64().is_some(), "{doc}");
    assert_eq!(locks[1]["path"], format!("{prefix}/deep/b"));
    assert_eq!(locks[1]["kind"], "semaphore");
    assert_eq!(locks[1]["limit"], 3);
    // A trailing slash names the same prefix.
    let slashed = op(&connect, &["list", "--json", &format!("{prefix}/")]);
    assert_eq!(slashed.status.code(), Some(0), "{slashed:?}");
    let paths = |doc: &Value| -> Vec<Value> {
        doc["locks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["path"].clone())
            .collect()
    };
    assert_eq!(paths(&json(&slashed)), paths(&doc));
    let text = stdout(&op(&connect, &["list", &prefix]));
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.starts_with(&format!(
            "{prefix}/a  exclusive, 1 holding, 1 waiting, held "
        )),
        "{text}"
    );
    a.release();
    b.release();
}

#[test]
fn break_deletes_the_holder_and_the_live_holder_stops_with_76() {
    let s = Scene::new("break");
    let mut holder = s.hold();
    let next = KillOnDrop(
        s.run()
            .args(["-w", "60s", "--", "sh", "-c"])
            .arg(s.log.shell_body("true"))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn waiter"),
    );
    wait_for_contenders(s.zk(), &s.path, "-lock-", 2);

    // Off a terminal, --yes is required.
    let refused = op(&s.connect, &["break", &s.path]);
    assert_eq!(refused.status.code(), Some(64), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--yes"), "{stderr}");

    let broken = op(&s.connect, &["break", "--yes", &s.path]);
    assert_eq!(broken.status.code(), Some(0), "{broken:?}");
    assert_eq!(stdout(&broken).trim(), format!("deleted {}", holder.node()));
    holder.assert_exit(76, LONG);
    let mut next = next;
    let status = wait_for_exit(&mut next, LONG).expect("next waiter runs");
    assert_eq!(status.code(), Some(0));
    // The next waiter starts as soon as the node is gone, while the old
    // holder's zklock is still stopping its command: the documented window
    // (docs/design.md, "Operator commands") in which the two may overlap, and no more.
    s.log.assert_max_concurrency(2);
    assert_eq!(s.log.starts(), 2);
    let free = op(&s.connect, &["break", "--yes", &s.path]);
    assert_eq!(free.status.code(), Some(1), "{free:?}");
}

/// `--node` takes the full path zklock prints as well as the name, and
/// deleting a zklock waiter's node says that it queues again, as it does.
#[test]
fn break_node_takes_a_full_path_and_says_a_waiter_queues_again() {
    let s = Scene::new("break-waiter");
    let mut holder = s.hold();
    let mut waiting = waiter(&s.connect, &s.path, &[]);
    let queued = wait_for_contenders(s.zk(), &s.path, "-lock-", 2);
    let node = queued
        .into_iter()
        .find(|n| *n != holder.node())
        .expect("the waiter's node");

    let elsewhere = format!("/elsewhere/{}", node.rsplit('/').next().unwrap());
    let refused = op(
        &s.connect,
        &["break", "--yes", "--node", &elsewhere, &s.path],
    );
    assert_eq!(refused.status.code(), Some(64), "{refused:?}");
    assert!(s.zk().exists(&node));

    let broken = op(&s.connect, &["break", "--yes", "--node", &node, &s.path]);
    assert_eq!(broken.status.code(), Some(0), "{broken:?}");
    assert_eq!(
        stdout(&broken).trim(),
        format!("deleted waiter node {node}; that zklock run queues again at the end of the queue")
    );
    assert!(!s.zk().exists(&node));
    // It does: a new node, while the holder holds on.
    let requeued = wait_for_contenders(s.zk(), &s.path, "-lock-", 2);
    assert!(!requeued.contains(&node), "{requeued:?}");
    holder.release();
    let status = wait_for_exit(&mut waiting.0, LONG).expect("the waiter runs");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn break_asks_at_a_terminal_and_never_deletes_a_changed_holder() {
    let s = Scene::new("break-tty");
    let mut first = s.hold();

    let ask = |answer: &[u8]| {
        let mut pty = Pty::open();
        let mut cmd: Command = zklock();
        cmd.args(["break", "-z", &s.connect, &s.path]);
        let mut child = pty.spawn(cmd);
        pty.read_until("? [y/N] ", LONG);
        pty.write(answer);
        let status = wait_for_exit(&mut child, LONG).expect("break ends");
        (status.code(), pty.read_to_end(LONG))
    };
    let (code, shown) = ask(b"n\n");
    assert_eq!(code, Some(1), "{shown}");
    assert!(shown.contains(&first.node()), "shows the holder: {shown}");
    assert!(s.zk().exists(&first.node()), "answered no: {shown}");

    // The holder changes between the prompt and the answer.
    let mut pty = Pty::open();
    let mut cmd: Command = zklock();
    cmd.args(["break", "-z", &s.connect, &s.path]);
    let mut child = pty.spawn(cmd);
    pty.read_until("? [y/N] ", LONG);
    let shown_node = first.node();
    first.release();
    let second = s.hold();
    pty.write(b"y\n");
    let status = wait_for_exit(&mut child, LONG).expect("break ends");
    let out = pty.read_to_end(LONG);
    assert_eq!(status.code(), Some(75), "{out}");
    assert!(out.contains("holder changed"), "{out}");
    assert!(s.zk().exists(&second.node()), "the new holder is untouched");
    assert!(!s.zk().exists(&shown_node));
    drop(second);
}

#[test]
fn operator_commands_refuse_bad_input_with_one_line() {
    let connect = shared_server().connect_string();
    for args in [
        vec!["status", "relative/path"],
        vec!["status"],
        vec!["list", "no-slash"],
        vec!["break", "/a/"],
        vec!["break", "/x", "--node"],
        vec!["status", "--bogus", "/x"],
    ] {
        let output = op(&connect, &args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("zklock: "), "{args:?}: {stderr}");
    }
}
