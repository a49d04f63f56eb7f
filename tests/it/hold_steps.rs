//! A hold's steps never run beside another holder's command, under the
//! faults a hold meets (docs/design.md, "Holds"): its node deleted
//! (`zklock break`), `--max-hold` passing, the holder killed (-9) or
//! stopped (SIGSTOP), a partition at the fault proxy. The steps are real
//! child processes of the script (two in a row in the foreground, one in
//! the background with `wait`) that log their start, a heartbeat every
//! 50 ms and their end; the other holder is a `zklock run` that logs the
//! same. The oracle compares intervals in the log's order (each line one
//! O_APPEND write), not messages: a step's interval lasts from its first
//! line to its last, so a step killed without an end still counts until
//! its last heartbeat.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::harness::{
    FaultProxy, KillOnDrop, Mode, TempDir, ZkServer, run_bounded, shared_server, signal, wait_until,
};
use crate::hold::{LONG, Place};

/// A step: `STEP NAME` logs `start`, beats for `$SECONDS_` s, `end`.
pub(crate) const STEP: &str = r#"step() {
    sh -c 'echo "start $1 $$" >> "$LOG"; i=0
        while [ $i -lt 60 ]; do echo "beat $1 $$" >> "$LOG"; sleep 0.05; i=$((i+1)); done
        echo "end $1 $$" >> "$LOG"' step "$1"
}"#;

/// A step as [`STEP`] that traps TERM to clean up, beating 3 s more (past
/// the kill-after of a 4 s session, 1.64 s) before its `end`.
pub(crate) const GRACEFUL_STEP: &str = r#"step() {
    sh -c 'trap "j=0; while [ \$j -lt 60 ]; do echo \"beat \$0 \$\$\" >> \"\$LOG\"
            sleep 0.05; j=\$((j+1)); done; echo \"end \$0 \$\$\" >> \"\$LOG\"; exit 0" TERM
        echo "start $0 $$" >> "$LOG"; i=0
        while [ $i -lt 60 ]; do echo "beat $0 $$" >> "$LOG"; sleep 0.05; i=$((i+1)); done
        echo "end $0 $$" >> "$LOG"' "$1"
}"#;

/// The other holder's command, logging as the steps do.
const RUN: &str = r#"echo "start run $$" >> "$LOG"; i=0
    while [ $i -lt 10 ]; do echo "beat run $$" >> "$LOG"; sleep 0.05; i=$((i+1)); done
    echo "end run $$" >> "$LOG""#;

/// Each process's interval in the log: (who, first line, last line), where
/// who is `run` or `hold`.
fn intervals(log: &str) -> Vec<(String, usize, usize)> {
    let mut seen: HashMap<String, (String, usize, usize)> = HashMap::new();
    for (at, line) in log.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [_, name, pid] = words[..] else {
            panic!("malformed line {line:?}")
        };
        let who = if name == "run" { "run" } else { "hold" };
        seen.entry(pid.to_owned())
            .and_modify(|(_, _, last)| *last = at)
            .or_insert((who.to_owned(), at, at));
    }
    seen.into_values().collect()
}

/// Pairs of a hold's step and a run's command whose intervals overlap.
pub(crate) fn overlaps(log: &str) -> Vec<String> {
    let all = intervals(log);
    let mut found = Vec::new();
    for (a_who, a_first, a_last) in &all {
        for (b_who, b_first, b_last) in &all {
            if a_who == "hold" && b_who == "run" && a_first <= b_last && b_first <= a_last {
                found.push(format!(
                    "step lines {a_first}-{a_last} and run lines {b_first}-{b_last}"
                ));
            }
        }
    }
    found
}

/// The fault a scenario throws at the hold once its first step runs.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Fault {
    Break,
    MaxHold,
    KillHolder,
    StopHolder,
    Partition,
    /// ZooKeeper down past the lease deadline, then back.
    Restart,
}

/// The scenario: a script holds the lock (bound to it, 4 s sessions) and
/// runs its steps; the fault comes once the first step beats; a `zklock
/// run` then waits for the lock and runs. No step may overlap the run.
fn scenario(fault: Fault, own_group: bool) {
    scenario_of(fault, own_group, STEP)
}

/// [`scenario`], with the steps `step` defines.
fn scenario_of(fault: Fault, own_group: bool, step: &str) {
    let mut ground = Ground::for_fault(fault);
    let connect = match fault {
        Fault::Partition => ground.proxy.connect_string(),
        _ => ground.server().connect_string(),
    };
    let place = Place::at(&connect, "hold-steps");
    let logs = TempDir::new();
    let log = logs.path().join("log");
    std::fs::write(&log, "").unwrap();
    let max_hold = match fault {
        Fault::MaxHold => "--max-hold 1s",
        _ => "",
    };
    let script = format!(
        r#"{step}
        eval "$("$ZKLOCK" hold --session-timeout 4s {max_hold} -z "$ZK" "$P")" || exit
        echo "$ZKLOCK_HOLD" > "$OUT/socket"
        step first
        step second
        step background &
        step third
        wait"#
    );
    let mut cmd = place.bash(&script);
    cmd.env("LOG", &log);
    if own_group {
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    }
    let mut script = KillOnDrop(cmd.spawn().unwrap());
    ground.once_beating("first", fault, &place, &log);
    let _ = script.0.wait();
    let contents = std::fs::read_to_string(&log).unwrap();
    let found = overlaps(&contents);
    assert!(
        found.is_empty(),
        "{fault:?}: steps ran beside the next holder: {found:?}\n{contents}"
    );
    if let Fault::KillHolder = fault {
        // The hold ended without a release: lost (76), and its socket,
        // which nobody listens on, goes with that release.
        let release = r#"ZKLOCK_HOLD=$(cat "$OUT/socket") "$ZKLOCK" release"#;
        let out = place.run(release);
        out.assert_code(76);
        assert!(out.one_error_line().contains("killed?"), "{}", out.stderr);
        place.run(release).assert_code(64);
    }
    place.assert_clean(place.zk());
}

/// Where a scenario's hold runs: the shared server, or one of its own for
/// a restart; a fault proxy in front of it for a partition.
pub(crate) struct Ground {
    own: Option<ZkServer>,
    pub(crate) proxy: FaultProxy,
}

impl Ground {
    pub(crate) fn for_fault(fault: Fault) -> Ground {
        let own = matches!(fault, Fault::Restart).then(ZkServer::start);
        let server = own.as_ref().unwrap_or_else(|| shared_server());
        let proxy = FaultProxy::start(server.addr());
        Ground { own, proxy }
    }

    pub(crate) fn server(&self) -> &ZkServer {
        self.own.as_ref().unwrap_or_else(|| shared_server())
    }

    /// Once step `name` beats in `log`: throws `fault` at the hold of
    /// `place`, lets the next holder run, and ends what is left of the
    /// fault.
    pub(crate) fn once_beating(&mut self, name: &str, fault: Fault, place: &Place, log: &Path) {
        wait_until(LONG, &format!("step {name} beats"), || {
            std::fs::read_to_string(log)
                .unwrap()
                .contains(&format!("beat {name}"))
        });
        let holder = holder_pid(place);
        self.throw(fault, place, log, holder);
        the_next_holder_runs(self.server(), place, log);
        self.recover(fault, holder);
    }

    /// Throws `fault` at the hold of `place` (whose holder is `holder`,
    /// whose steps log to `log`).
    fn throw(&mut self, fault: Fault, place: &Place, log: &Path, holder: i32) {
        match fault {
            Fault::Break => {
                let out = run_bounded(
                    zklock()
                        .args(["break", "--yes", "-z", &self.server().connect_string()])
                        .arg(&place.path),
                    LONG,
                );
                out.assert_code(0);
                // A break frees the lock at once, and a waiter may start
                // before the holder hears of it (docs/design.md, "Operator
                // commands"): what is checked is that the steps stop within
                // moments.
                std::thread::sleep(Duration::from_secs(1));
                let before = std::fs::read_to_string(log).unwrap();
                std::thread::sleep(Duration::from_millis(500));
                assert_eq!(
                    std::fs::read_to_string(log).unwrap(),
                    before,
                    "steps ran on after the break"
                );
            }
            Fault::MaxHold => {}
            Fault::KillHolder => signal(holder, libc::SIGKILL),
            Fault::StopHolder => signal(holder, libc::SIGSTOP),
            Fault::Partition => self.proxy.set_mode(Mode::Blackhole),
            Fault::Restart => {
                let server = self.own.as_mut().unwrap();
                server.stop();
                std::thread::sleep(Duration::from_secs(5));
                server.start_again();
            }
        }
    }

    /// Ends what is left of `fault` once the next holder ran: a stopped
    /// holder goes on, a partition heals.
    fn recover(&self, fault: Fault, holder: i32) {
        if let Fault::StopHolder = fault {
            signal(holder, libc::SIGCONT);
        }
        self.proxy.set_mode(Mode::Pass);
    }
}

/// The next holder runs: see [`the_next_holder`].
pub(crate) fn the_next_holder_runs(server: &ZkServer, place: &Place, log: &Path) {
    run_bounded(&mut the_next_holder(server, place, log), LONG).assert_code(0);
}

/// The next holder: a `zklock run` straight to the server, waiting up to
/// 30 s, logging to `log` as the steps do.
pub(crate) fn the_next_holder(server: &ZkServer, place: &Place, log: &Path) -> Command {
    let mut run = zklock();
    run.args(["run", "-w", "30s", "-z", &server.connect_string()])
        .arg(&place.path)
        .args(["--", "sh", "-c", RUN])
        .env("LOG", log);
    run
}

pub(crate) fn zklock() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zklock"))
}

/// An `--until-released` hold of `place` with `flags`, as a CI job's first
/// step takes it: its variables (its socket also in `$OUT/socket`, for
/// [`holder_pid`]).
pub(crate) fn hold_until_released(place: &Place, flags: &str) -> HashMap<String, String> {
    let hold = place.run(&format!(
        r#""$ZKLOCK" hold --until-released {flags} --format json -z "$ZK" "$P""#
    ));
    hold.assert_code(0);
    let vars: HashMap<String, String> = serde_json::from_str(&hold.stdout).unwrap();
    std::fs::write(place.file("socket"), &vars["ZKLOCK_HOLD"]).unwrap();
    vars
}

/// The holder's pid: its socket is `hold-PID.sock`.
pub(crate) fn holder_pid(place: &Place) -> i32 {
    let socket = std::fs::read_to_string(place.file("socket")).unwrap();
    let name = socket.trim().rsplit('/').next().unwrap();
    name.trim_start_matches("hold-")
        .trim_end_matches(".sock")
        .parse()
        .unwrap()
}

#[test]
fn steps_stop_when_the_node_is_deleted() {
    scenario(Fault::Break, false);
}

#[test]
fn steps_stop_when_max_hold_passes() {
    scenario(Fault::MaxHold, true);
}

#[test]
fn steps_stop_when_the_holder_is_killed() {
    scenario(Fault::KillHolder, false);
}

#[test]
fn steps_stop_when_the_holder_is_stopped() {
    scenario(Fault::StopHolder, true);
}

#[test]
fn steps_stop_when_the_holder_is_cut_off() {
    scenario(Fault::Partition, false);
}

#[test]
fn steps_stop_when_zookeeper_is_down_past_the_lease() {
    scenario(Fault::Restart, true);
}

/// A step that traps TERM to clean up outlives the script's shell, which the
/// same TERM ends when the script does not lead its group: orphaned, it is
/// still a step, KILLed at the kill-after, and the lock waits for it.
#[test]
fn an_orphaned_step_cleaning_up_is_killed_when_max_hold_passes() {
    scenario_of(Fault::MaxHold, false, GRACEFUL_STEP);
}

/// The same when the stopped holder's keeper TERMs the steps at the lease
/// deadline: its KILL still finds the orphaned step.
#[test]
fn an_orphaned_step_cleaning_up_is_killed_when_the_holder_is_stopped() {
    scenario_of(Fault::StopHolder, false, GRACEFUL_STEP);
}

#[test]
fn the_oracle_sees_an_overlap() {
    let log = "start first 10\nbeat first 10\nstart run 20\nbeat first 10\nend run 20\n";
    assert_eq!(overlaps(log).len(), 1);
    let apart = "start first 10\nbeat first 10\nstart run 20\nend run 20\n";
    assert!(overlaps(apart).is_empty());
}

/// A step left in the background when the script exits keeps a hold whose
/// script leads its process group (its own job), as `run` keeps the lock
/// for what its command leaves running.
#[test]
fn a_step_left_running_keeps_the_hold_of_a_script_that_leads_its_group() {
    let place = Place::new("hold-straggler");
    let mut cmd = place.bash(
        r#"eval "$("$ZKLOCK" hold -z "$ZK" "$P")" || exit
        (sleep 1.5; echo done > "$OUT/straggler") > /dev/null 2>&1 &
        exit 0"#,
    );
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let out = run_bounded(&mut cmd, LONG);
    out.assert_code(0);
    assert!(!place.is_free(place.zk()), "the straggler holds the lock");
    wait_until(LONG, "the straggler ends", || {
        place.file("straggler").exists()
    });
    place.assert_clean(place.zk());
}

/// A holder stopped (SIGSTOP) past its lease deadline says so when asked,
/// rather than blaming ZooKeeper: `release` exits 76 naming the stop.
#[test]
fn a_holder_stopped_past_its_lease_says_so() {
    let place = Place::new("hold-stopped");
    hold_until_released(&place, "--max-hold 1m --session-timeout 4s");
    let holder = holder_pid(&place);
    signal(holder, libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(5));
    signal(holder, libc::SIGCONT);
    let release = place.run(r#""$ZKLOCK" release "$P""#);
    release.assert_code(76);
    assert!(
        release.one_error_line().contains("holder was stopped"),
        "{}",
        release.stderr
    );
    place.assert_clean(place.zk());
}

/// A terminating signal to an `--until-released` holder ends the hold as a
/// loss does, and its holder stays to tell `release` so (76, the signal):
/// the job's last step learns that its steps were not covered to the end.
#[test]
fn a_signalled_holder_tells_release_why() {
    let place = Place::new("hold-signalled-release");
    hold_until_released(&place, "--max-hold 1m --session-timeout 4s");
    signal(holder_pid(&place), libc::SIGTERM);
    wait_until(LONG, "the lock is free", || place.is_free(place.zk()));
    let release = place.run(r#""$ZKLOCK" release "$P""#);
    release.assert_code(76);
    assert!(
        release
            .one_error_line()
            .contains("the holder got signal 15"),
        "{}",
        release.stderr
    );
    place.run(r#""$ZKLOCK" release "$P""#).assert_code(64);
    place.assert_clean(place.zk());
}

/// A hold lost while ZooKeeper is down deletes its node as soon as the
/// server is back, not when its session expires there: with 20 s
/// sessions, the lock is free well within the session timeout of the
/// server's return.
#[test]
fn a_hold_lost_in_an_outage_frees_the_lock_once_the_server_is_back() {
    let mut server = ZkServer::start();
    let place = Place::at(&server.connect_string(), "hold-outage");
    let mut script = place.spawn(
        r#"eval "$("$ZKLOCK" hold --session-timeout 20s --max-hold 2s -z "$ZK" "$P")" || exit
        echo held > "$OUT/held"
        sleep 60"#,
    );
    wait_until(LONG, "held", || place.file("held").exists());
    server.stop();
    // --max-hold passes meanwhile: the step is stopped, the hold lost.
    let _ = script.0.wait();
    std::thread::sleep(Duration::from_secs(1));
    server.start_again();
    let back = std::time::Instant::now();
    let zk = crate::harness::Inspector::connect(&server.connect_string());
    wait_until(LONG, "the lock is free", || zk.tree(&place.path).is_empty());
    assert!(
        back.elapsed() < Duration::from_secs(10),
        "the node stayed {:?} after the server came back (sessions of 20 s)",
        back.elapsed()
    );
    place.assert_clean(&zk);
}

/// A waiting `hold` gives up when its caller is gone (a CI job cancelled
/// while it waits): it never takes the lock later for nobody.
#[test]
fn a_waiting_hold_gives_up_when_its_caller_is_gone() {
    let place = Place::new("hold-orphan");
    let zk = place.zk();
    let holder = place.held_by_a_shell();
    let mut job = place.spawn(
        r#"eval "$("$ZKLOCK" hold --until-released --max-hold 1h -z "$ZK" "$P")" || exit
        echo held > "$OUT/orphan-held""#,
    );
    wait_until(LONG, "the hold waits", || {
        zk.children(&place.path).len() == 2
    });
    // The job's shell is killed, as a runner cancelling the job kills it.
    signal(job.0.id() as i32, libc::SIGKILL);
    let _ = job.0.wait();
    wait_until(LONG, "the orphaned wait ends", || {
        zk.children(&place.path).len() == 1
    });
    drop(holder);
    place.assert_clean(zk);
    assert!(!place.file("orphan-held").exists());
}
