//! A lock taken after a wait has its whole lease (docs/design.md, "Session
//! and lease rules"): the first deadline counts from when the lock was found
//! ours, not from the waiter's last answer before it. A waiter whose turn
//! comes through the node ahead's deletion alone has asked nothing since
//! its last ping (up to T/3 before); counted from then, with a 4 s session
//! the lease (2 s) ended about a second into the command, which was stopped
//! with 76 while the lock was sound.

use std::time::Duration;

use crate::harness::{Gated, Scene, run_bounded, wait_until, zklock_run};
use crate::hold::Place;

const LONG: Duration = Duration::from_secs(30);

/// How long the waiter waits: past half its lease (2 s of a 4 s session),
/// short of its first ping (T/3 of quiet, 1.33 s).
const WAIT: Duration = Duration::from_millis(1100);

/// Waits until `scene`'s lock has `n` nodes (a holder and its waiters).
fn queued(scene: &Scene, n: usize) {
    wait_until(LONG, &format!("{n} nodes queued"), || {
        scene.zk().children(&scene.path).len() == n
    });
}

#[test]
fn a_run_that_waited_keeps_its_lock_for_a_whole_lease() {
    let scene = Scene::new("waiter-lease");
    let holder = Gated::start(scene.run());
    let mut waiter = scene.run();
    waiter.args(["--session-timeout", "4s", "--", "sleep", "2.5"]);
    let waiter = std::thread::spawn(move || run_bounded(&mut waiter, LONG));
    queued(&scene, 2);
    std::thread::sleep(WAIT);
    assert!(holder.finish().success());
    let out = waiter.join().unwrap();
    out.assert_code(0);
    assert!(!out.stderr.contains("lock lost"), "{}", out.stderr);
}

#[test]
fn a_hold_that_waited_keeps_its_lock_for_a_whole_lease() {
    let place = Place::new("waiter-lease-hold");
    let holder = Gated::start(zklock_run(&place.connect, &place.path));
    let hold = place.spawn(
        r#"eval "$("$ZKLOCK" hold --session-timeout 4s -z "$ZK" "$P")" || exit
        sleep 2.5
        "$ZKLOCK" release; echo $? > "$OUT/released""#,
    );
    queued(&place, 2);
    std::thread::sleep(WAIT);
    assert!(holder.finish().success());
    let released = place.file("released");
    let said = "the script's release (none: the script was stopped, the hold lost its lock)";
    wait_until(LONG, said, || {
        std::fs::read_to_string(&released).is_ok_and(|s| s.ends_with('\n'))
    });
    drop(hold);
    assert_eq!(std::fs::read_to_string(&released).unwrap().trim(), "0");
    place.assert_clean(place.zk());
}
