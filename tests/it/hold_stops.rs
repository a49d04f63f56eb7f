//! How a hold's steps are stopped before the lock passes on (docs/design.md,
//! "Holds", "The steps"): a step that ignores TERM is KILLed `--kill-after`
//! later (a hold takes the default for its session) and the next holder
//! starts only once it is gone; a signal to the holder stops the steps and
//! releases the lock once they are gone. The steps and the next holder log
//! as in `hold_steps`, whose oracle says whether they overlapped.

use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::harness::{KillOnDrop, shared_server, signal, wait_until};
use crate::hold::{LONG, Place, read};
use crate::hold_steps::{holder_pid, overlaps, the_next_holder};

/// The next holder (waiting for the lock from now) and when its command
/// started, as time since `from`; once it ended, with its status.
fn next_holder_starts_after(place: &Place, log: &Path, from: Instant) -> (Duration, ExitStatus) {
    let mut run = KillOnDrop(
        the_next_holder(shared_server(), place, log)
            .spawn()
            .unwrap(),
    );
    wait_until(LONG, "the next holder starts", || {
        read(log).contains("start run")
    });
    let started = from.elapsed();
    (started, run.0.wait().unwrap())
}

/// Asserts that no step overlapped the next holder's command in `log`.
fn assert_apart(log: &Path) {
    let contents = read(log);
    let found = overlaps(&contents);
    assert!(
        found.is_empty(),
        "steps ran beside the next holder: {found:?}\n{contents}"
    );
}

/// A step that ignores TERM outlives `--max-hold` by the kill-after (1.64 s,
/// the default of a 4 s session) and no longer: the lock passes on once it
/// is KILLed, not at the TERM nor never. The script does not lead its
/// group, so the step is its shell's child (the `true` after it keeps bash
/// from exec'ing it), reparented when TERM ends the shell.
#[test]
fn a_step_that_ignores_term_is_killed_before_the_lock_passes_on() {
    const MAX_HOLD: Duration = Duration::from_secs(1);
    const KILL_AFTER: Duration = Duration::from_millis(1640);
    let place = Place::new("hold-deaf-step");
    let log = place.file("log");
    std::fs::write(&log, "").unwrap();
    let mut script = place.bash(
        r#"eval "$("$ZKLOCK" hold --session-timeout 4s --max-hold 1s -z "$ZK" "$P")" || exit
        echo held > "$OUT/held"
        sh -c 'trap "" TERM; echo "start deaf $$" >> "$LOG"
            while :; do echo "beat deaf $$" >> "$LOG"; sleep 0.05; done'
        true"#,
    );
    let mut script = KillOnDrop(script.env("LOG", &log).spawn().unwrap());
    wait_until(LONG, "held", || place.file("held").exists());
    // No later than --max-hold's start, which came before the file.
    let held = Instant::now();
    let (started, run) = next_holder_starts_after(&place, &log, held);
    assert!(run.success(), "the next holder: {run:?}");
    let _ = script.0.wait();
    assert_apart(&log);
    // The lower bound allows for the file being seen up to 0.3 s after
    // the hold began; the upper for the run's connection and waiting.
    let killed = MAX_HOLD + KILL_AFTER;
    assert!(
        started + Duration::from_millis(300) >= killed,
        "the next holder started {started:?} after the hold: before the KILL due at {killed:?}"
    );
    assert!(
        started <= killed + Duration::from_secs(2),
        "the next holder started {started:?} after the hold: the deaf step was not KILLed at {killed:?}"
    );
    place.assert_clean(place.zk());
}

/// SIGTERM to the holder while a step runs: the step gets it too (its trap
/// logs `term`, takes a second, logs `end`), and the lock is released only
/// once the step is gone.
#[test]
fn a_signal_to_the_holder_stops_the_steps_before_the_lock_is_released() {
    let place = Place::new("hold-signalled");
    let log = place.file("log");
    std::fs::write(&log, "").unwrap();
    let mut script = place.bash(
        r#"eval "$("$ZKLOCK" hold -z "$ZK" "$P")" || exit
        echo "$ZKLOCK_HOLD" > "$OUT/socket"
        sh -c 'echo "start slow $$" >> "$LOG"
            trap "echo \"term slow \$\$\" >> \"\$LOG\"; i=0
                while [ \$i -lt 20 ]; do
                    echo \"beat slow \$\$\" >> \"\$LOG\"; sleep 0.05; i=\$((i+1))
                done
                echo \"end slow \$\$\" >> \"\$LOG\"; exit 143" TERM
            while :; do echo "beat slow $$" >> "$LOG"; sleep 0.05; done'"#,
    );
    let mut script = KillOnDrop(script.env("LOG", &log).spawn().unwrap());
    wait_until(LONG, "the step beats", || read(&log).contains("beat slow"));
    signal(holder_pid(&place), libc::SIGTERM);
    let (_, run) = next_holder_starts_after(&place, &log, Instant::now());
    assert!(run.success(), "the next holder: {run:?}");
    let _ = script.0.wait();
    let contents = read(&log);
    // The step was stopped by the signal, and ended by its own trap.
    let term = contents.find("term slow").expect("the step got no TERM");
    let end = contents.find("end slow").expect("the step did not end");
    let run_start = contents.find("start run").unwrap();
    assert!(term < end && end < run_start, "{contents}");
    assert_apart(&log);
    place.assert_clean(place.zk());
}
