//! Runs and holds nested in a hold (docs/design.md, "Holds", "Nested"):
//! they hold at once under it. A CI step in a shell of its own under an
//! `--until-released` hold runs its command under `zklock run` of the same
//! path, which follows the hold's lease, so it stops before the next holder
//! starts whatever ends the hold, as a bound script's steps do (see
//! `hold_steps`); and a nested run whose holder is gone runs nothing.

use crate::harness::{KillOnDrop, TempDir, run_bounded, signal};
use crate::hold::{LONG, Place};
use crate::hold_steps::{
    Fault, GRACEFUL_STEP, Ground, STEP, hold_until_released, holder_pid, overlaps, zklock,
};

#[test]
fn a_run_nested_in_a_hold_runs_at_once_under_it() {
    let place = Place::new("hold-nested");
    let zk = place.zk();
    let out = place.run(
        r#"set -e
        eval "$("$ZKLOCK" hold -z "$ZK" "$P")"
        echo "$ZKLOCK_FENCING_TOKEN"
        "$ZKLOCK" run -n -z "$ZK" "$P" -- sh -c 'echo "$ZKLOCK_FENCING_TOKEN"'
        "$ZKLOCK" release"#,
    );
    out.assert_code(0);
    let tokens: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(tokens.len(), 2, "{}", out.stdout);
    assert_eq!(tokens[0], tokens[1]);
    place.assert_clean(zk);
}

#[test]
fn a_hold_nested_in_a_hold_or_a_run_holds_at_once_under_it() {
    let place = Place::new("hold-nested-hold");
    let zk = place.zk();
    let out = place.run(
        r#"set -e
        eval "$("$ZKLOCK" hold -z "$ZK" "$P")"
        outer=$ZKLOCK_HOLD
        echo "$ZKLOCK_FENCING_TOKEN"
        (
            eval "$("$ZKLOCK" hold -n -z "$ZK" "$P")"
            echo "$ZKLOCK_FENCING_TOKEN"
            test "$ZKLOCK_HOLD" != "$outer"
            "$ZKLOCK" release
        )
        # The inner release left the outer hold in place.
        if "$ZKLOCK" status -z "$ZK" "$P" > /dev/null; then echo free; fi
        "$ZKLOCK" release
        "$ZKLOCK" run -z "$ZK" "$P" -- bash -c '
            echo "$ZKLOCK_FENCING_TOKEN"
            eval "$("$ZKLOCK" hold -n -z "$ZK" "$P")"
            echo "$ZKLOCK_FENCING_TOKEN"
            "$ZKLOCK" release'"#,
    );
    out.assert_code(0);
    let tokens: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(tokens.len(), 4, "{}", out.stdout);
    assert_eq!(tokens[0], tokens[1]);
    assert_eq!(tokens[2], tokens[3]);
    place.assert_clean(zk);
}

/// The scenario: the hold is taken (4 s sessions, through the fault proxy)
/// by a first step; a second runs its command under a nested `zklock run`
/// straight to the server; the fault comes once that command beats; a
/// `zklock run` then waits for the lock and runs. The command may not
/// overlap that run, and its zklock says the lock was lost.
fn nested_scenario(fault: Fault) {
    nested_scenario_of(fault, STEP, "")
}

/// [`nested_scenario`], with the step `step` defines and the nested run
/// given `run_flags`.
fn nested_scenario_of(fault: Fault, step: &str, run_flags: &str) {
    let mut ground = Ground::for_fault(fault);
    let place = Place::at(&ground.proxy.connect_string(), "hold-nested-step");
    let logs = TempDir::new();
    let log = logs.path().join("log");
    std::fs::write(&log, "").unwrap();
    // Passing while the command beats (it beats for 3 s or more).
    let max_hold = match fault {
        Fault::MaxHold => "2s",
        _ => "1m",
    };
    let vars = hold_until_released(
        &place,
        &format!("--max-hold {max_hold} --session-timeout 4s"),
    );
    let step_body = step.to_owned() + "\nstep nested";
    let mut step = place.bash(&format!(
        r#""$ZKLOCK" run {run_flags} -z "$ZK" "$P" -- sh -c "$BODY""#
    ));
    // Straight to the server: the step is cut off from nothing.
    step.env("LOG", &log)
        .env("BODY", &step_body)
        .envs(&vars)
        .env("ZK", ground.server().connect_string());
    let mut step = KillOnDrop(step.spawn().unwrap());
    ground.once_beating("nested", fault, &place, &log);
    let status = step.0.wait().unwrap();
    // Not 0: the fault came while the command ran, not after it.
    assert_eq!(
        status.code(),
        Some(76),
        "{fault:?}: the nested step lost the lock"
    );
    let contents = std::fs::read_to_string(&log).unwrap();
    let found = overlaps(&contents);
    assert!(
        found.is_empty(),
        "{fault:?}: a nested step ran beside the next holder: {found:?}\n{contents}"
    );
    let _ = place.run(r#""$ZKLOCK" release "$P""#);
    place.assert_clean(place.zk());
}

#[test]
fn a_nested_step_stops_when_the_node_is_deleted() {
    nested_scenario(Fault::Break);
}

#[test]
fn a_nested_step_stops_when_max_hold_passes() {
    nested_scenario(Fault::MaxHold);
}

/// A nested command that traps TERM to clean up: the nested run keeps
/// following the hold (the holder keeps its nodes) until the command is
/// gone, not only until it learns of the loss.
#[test]
fn a_nested_step_cleaning_up_keeps_the_hold_until_it_is_gone() {
    nested_scenario_of(Fault::MaxHold, GRACEFUL_STEP, "--session-timeout 4s");
}

/// The same with the nested run's own, longer kill-after (5 s, a 10 s
/// session's default): it KILLs within the hold's (1.64 s), as long as the
/// hold keeps its nodes past a loss.
#[test]
fn a_nested_step_cleaning_up_is_killed_within_the_holds_kill_after() {
    nested_scenario_of(Fault::MaxHold, GRACEFUL_STEP, "");
}

#[test]
fn a_nested_step_stops_when_the_holder_is_killed() {
    nested_scenario(Fault::KillHolder);
}

#[test]
fn a_nested_step_stops_when_the_holder_is_stopped() {
    nested_scenario(Fault::StopHolder);
}

#[test]
fn a_nested_step_stops_when_the_holder_is_cut_off() {
    nested_scenario(Fault::Partition);
}

#[test]
fn a_nested_step_stops_when_zookeeper_is_down_past_the_lease() {
    nested_scenario(Fault::Restart);
}

/// A nested run under a hold whose holder was killed (its node still
/// there until its session expires) runs nothing and ends as a lock not
/// acquired, as under a hold found lost: whether the socket is left
/// (refused) or gone (removed by a `release`).
#[test]
fn a_nested_run_under_a_killed_holder_runs_nothing() {
    let place = Place::new("hold-nested-gone");
    let zk = place.zk();
    // The session outlives the test's nested runs: they find the node
    // theirs, so only the holder's absence can refuse them.
    let vars = hold_until_released(&place, "--max-hold 1m --session-timeout 30s");
    signal(holder_pid(&place), libc::SIGKILL);
    let nested = |flags: &str, code: i32| {
        let mut run = place.bash(&format!(
            r#""$ZKLOCK" run {flags} -z "$ZK" "$P" -- sh -c 'echo ran >> "$OUT/ran"'"#
        ));
        let out = run_bounded(run.envs(&vars), LONG);
        out.assert_code(code);
        let said = out.one_error_line();
        assert!(
            said.contains("holder of the enclosing hold is gone"),
            "{said}"
        );
    };
    nested("", 75);
    nested("-E 3", 3);
    // Its socket, which nobody listens on, goes with a release (76: the
    // hold ended without one).
    let release = place
        .bash(r#""$ZKLOCK" release"#)
        .envs(&vars)
        .output()
        .unwrap();
    assert_eq!(release.status.code(), Some(76), "{release:?}");
    let socket = std::path::Path::new(&vars["ZKLOCK_HOLD"]);
    assert!(!socket.exists(), "the release left {}", socket.display());
    nested("", 75);
    assert!(!place.file("ran").exists(), "a nested command ran");
    assert!(!place.is_free(zk), "the session outlived the nested runs");
    // Rather than wait 30 s for the session to expire.
    run_bounded(
        zklock()
            .args(["break", "--yes", "-z", &place.connect])
            .arg(&place.path),
        LONG,
    )
    .assert_code(0);
    place.assert_clean(zk);
}

/// A nested run under a stopped holder (SIGSTOP) runs nothing: the holder
/// cannot tell it its lease, so nothing would stop the step in time. It
/// ends as a lock not acquired, saying why, once its question goes
/// unanswered.
#[test]
fn a_nested_run_under_a_stopped_holder_runs_nothing() {
    let place = Place::new("hold-nested-stopped");
    let zk = place.zk();
    let vars = hold_until_released(&place, "--max-hold 1m --session-timeout 30s");
    let holder = holder_pid(&place);
    signal(holder, libc::SIGSTOP);
    let mut run = place.bash(r#""$ZKLOCK" run -z "$ZK" "$P" -- sh -c 'echo ran >> "$OUT/ran"'"#);
    let out = run_bounded(run.envs(&vars), LONG);
    signal(holder, libc::SIGCONT);
    out.assert_code(75);
    assert!(
        out.one_error_line().contains("does not answer (stopped?)"),
        "{}",
        out.stderr
    );
    assert!(!place.file("ran").exists(), "the nested command ran");
    let release = place
        .bash(r#""$ZKLOCK" release"#)
        .envs(&vars)
        .output()
        .unwrap();
    assert_eq!(release.status.code(), Some(0), "{release:?}");
    place.assert_clean(zk);
}
