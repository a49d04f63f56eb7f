//! Nodes never left behind: each early way out of `zklock run` that closes the
//! session without running the command leaves no node of its own once zklock has
//! exited. Ways out covered elsewhere: an error after acquisition
//! (`run_basics::command_not_found_is_127`, `command_not_executable_is_126`),
//! superseded (`supersede::the_newest_waiter_replaces_the_older_ones_and_the_holder_stays`),
//! a nested run (`reentrant::*`), a signal while waiting
//! (`signals::signal_while_waiting_leaves_no_node_and_exits_128_plus_n`).

use std::time::Duration;

use zklock::zk::burst::Burst;
use zklock::zk::ops::CreateMode;
use zklock::zk::records::perms;

use crate::harness::{Scene, acl, ephemerals, run_bounded};
use crate::hold::Place;

const LONG: Duration = Duration::from_secs(30);

/// Runs `zklock run OPTIONS -- true` while another run holds the lock, expects
/// exit 75, and checks that the holder's node is the only one left.
fn refused_while_held(tag: &str, options: &[&str]) {
    let s = Scene::new(tag);
    let mut holder = s.hold();
    let out = run_bounded(s.run().args(options).args(["--", "true"]), LONG);
    out.assert_code(75);
    assert_eq!(
        ephemerals(s.zk(), &s.path),
        holder.nodes(),
        "only the holder's node is left after the refused run"
    );
    holder.finish();
    s.assert_nothing_left();
}

#[test]
fn no_wait_refusal_leaves_no_node() {
    refused_while_held("close-no-wait", &["--no-wait"]);
}

#[test]
fn give_up_at_timeout_leaves_no_node() {
    refused_while_held("close-timeout", &["--timeout", "1s"]);
}

#[test]
fn max_waiting_refusal_leaves_no_node() {
    refused_while_held("close-max-waiting", &["--max-waiting", "0"]);
}

#[test]
fn once_per_skip_leaves_no_lock_node() {
    let s = Scene::new("close-once-per");
    run_bounded(s.run().args(["--once-per", "1h", "--", "true"]), LONG).assert_code(0);
    let skipped = run_bounded(s.run().args(["--once-per", "1h", "--", "true"]), LONG);
    skipped.assert_code(75);
    // The record of the last run stays on purpose; no lock node does.
    s.assert_no_lock_nodes();
}

/// `--once-per` cannot stamp its run record (its ACL lets nobody write):
/// zklock fails after taking the lock, the command does not run, and no
/// lock node is left.
#[test]
fn once_per_check_failing_leaves_no_lock_node() {
    let s = Scene::new("close-once-per-denied");
    s.zk().create_all(&s.path);
    let record = format!("{}/zklock.record", s.path);
    let read_only = [acl(perms::READ, "world", "anyone")];
    let create = |b: &mut Burst| b.create(&record, b"", &read_only, CreateMode::Persistent);
    s.zk()
        .run(s.zk().client().call(create))
        .expect("creating a read-only run record");
    let ran = s.log.path().with_extension("ran");
    let touch = format!("touch {}", ran.display());
    let out = run_bounded(
        s.run().args(["--once-per", "1h", "--", "sh", "-c", &touch]),
        LONG,
    );
    assert_ne!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("zklock.record"), "{}", out.stderr);
    assert!(!ran.exists(), "the command ran");
    s.assert_no_lock_nodes();
    assert!(s.zk().delete(&record));
}

/// A `--kill-after` the granted session leaves no room for is refused (64)
/// once connected, after our first node's create went out with the
/// handshake: that node is not left behind.
#[test]
fn kill_after_refused_once_connected_leaves_no_node() {
    let s = Scene::new("close-kill-after");
    let out = run_bounded(s.run().args(["--kill-after", "1h", "--", "true"]), LONG);
    out.assert_code(64);
    assert!(out.stderr.contains("session"), "{}", out.stderr);
    s.assert_no_lock_nodes();
}

/// `zklock hold --once-per` skipped (a run within the window): the holder
/// exits 75 before handing anything over, and leaves no lock node.
#[test]
fn hold_once_per_skip_leaves_no_lock_node() {
    let place = Place::new("close-hold-once-per");
    let mut first = place.scene.run();
    first.args(["--once-per", "1h", "--", "true"]);
    run_bounded(&mut first, LONG).assert_code(0);
    let out = place.run(r#""$ZKLOCK" hold -z "$ZK" --once-per 1h "$P""#);
    out.assert_code(75);
    assert!(out.stderr.contains("not running"), "{}", out.stderr);
    assert_eq!(out.stdout, "(exit 75)\n");
    place.assert_no_lock_nodes();
}
