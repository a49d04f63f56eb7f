//! A holder's zklock stopped (SIGSTOP) while its command runs (docs/design.md,
//! "Session and lease rules" and "The keeper"): the command must be stopped
//! before the next holder starts, whether zklock wakes up in time to do it or
//! the keeper does it for the frozen zklock.
//!
//! The holder's command appends `beat` lines to a file and the next holder's
//! appends `next` to the same file: O_APPEND orders them as they happened, so
//! "the last heartbeat comes before the next start" needs no clock.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::faults_util::{LONG, Locker, wait_children};
use crate::harness::{
    FaultProxy, Inspector, KillOnDrop, LockLog, Mode, TempDir, shared_server, signal, unique_path,
    wait_for_exit, zklock_run,
};

/// T = 4s, K = 0.5s: C = 1s, m = 0.35s, the lease 3.15s after the last answer.
const T4: [&str; 4] = ["--session-timeout", "4s", "--kill-after", "0.5s"];

/// A command body appending `beat` to `events` every 20 ms until stopped;
/// `stubborn`: one that ignores TERM, which only KILL stops.
fn heartbeat(events: &Path, stubborn: bool) -> String {
    format!(
        "{}while :; do echo beat >> '{}'; sleep 0.02; done",
        if stubborn { "trap '' TERM\n" } else { "" },
        events.display()
    )
}

/// Panics unless some `beat` and the `next` line were written, every `beat`
/// before `next`.
fn assert_beats_end_before_next(events: &Path) {
    let text = std::fs::read_to_string(events).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let next = lines.iter().position(|l| *l == "next");
    let last_beat = lines.iter().rposition(|l| *l == "beat");
    let (Some(next), Some(last_beat)) = (next, last_beat) else {
        panic!("no heartbeat or no next start:\n{text}");
    };
    let after = lines[next..].iter().filter(|l| **l == "beat").count();
    assert!(
        last_beat < next,
        "the stopped holder's command beat {after} times after the next holder started"
    );
}

/// Sleeps until `until`: how long a fault lasts, not a wait for a condition.
fn last_until(until: Instant) {
    std::thread::sleep(until.saturating_duration_since(Instant::now()));
}

/// A holder and a queued waiter on one path, the holder through `proxy`
/// (direct when None); returns them once the waiter's node is queued.
fn holder_and_waiter(
    name: &str,
    proxy: Option<&FaultProxy>,
    body: &str,
    events: &Path,
    log: &LockLog,
) -> (Locker, Locker) {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let path = unique_path(name);
    let direct = server.connect_string();
    let holder_connect = proxy.map_or(direct.clone(), FaultProxy::connect_string);
    let mut args = T4.to_vec();
    args.push("-v");
    let mut holder = Locker::spawn("holder", &holder_connect, &path, &args, log, body);
    holder.wait_info(LONG);
    let next = format!("echo next >> '{}'", events.display());
    let waiter = Locker::spawn("waiter", &direct, &path, &T4, log, &next);
    wait_children(&zk, &path, 2, LONG);
    (holder, waiter)
}

/// Stopped for less than the session, the network cut while it was stopped
/// and still cut when it resumes: the lease counts from the last answer
/// zklock had, not from its waking up, so the command is stopped before the
/// server expires the session and the next holder starts.
#[test]
fn stopped_briefly_while_cut_off_stops_the_command_before_the_next_holder() {
    let dir = TempDir::new();
    let events = dir.path().join("events");
    let log = LockLog::new();
    let proxy = FaultProxy::start(shared_server().addr());
    let body = heartbeat(&events, false);
    let (mut holder, mut waiter) =
        holder_and_waiter("frozen-brief", Some(&proxy), &body, &events, &log);

    signal(holder.pid() as i32, libc::SIGSTOP);
    let stopped = Instant::now();
    proxy.set_mode(Mode::Blackhole);
    // 2.6s of the 4s session: past the grace a wakening zklock would give
    // itself, before the session can expire.
    last_until(stopped + Duration::from_millis(2600));
    signal(holder.pid() as i32, libc::SIGCONT);

    waiter.expect_exit(0, LONG);
    holder.expect_exit(76, LONG);
    holder.assert_one_loss_line("");
    assert_beats_end_before_next(&events);
    // If zklock woke in time to say the connection is lost, the deadline it
    // gives is what was left of the lease (3.15s after an answer less the
    // 2.6s stop), not a fresh grace (2.15s).
    let stderr = holder.stderr();
    let left = stderr
        .lines()
        .filter_map(|l| l.split(" UTC (").nth(1))
        .filter_map(|l| l.split(" from now").next())
        .map(|s| humantime::parse_duration(s).expect("a duration"));
    for left in left {
        assert!(left < Duration::from_secs(1), "{stderr}");
    }
}

/// Stopped for longer than the session: the keeper stops the command at the
/// lease deadline zklock handed it (TERM, then KILL `--kill-after` later),
/// before the next holder starts; zklock, continued, says the lock was lost.
#[test]
fn stopped_past_the_session_the_keeper_stops_the_command() {
    stopped_past_the_session(false);
}

/// The same with a command that ignores TERM: the keeper's KILL stops it.
#[test]
fn stopped_past_the_session_the_keeper_kills_a_stubborn_command() {
    stopped_past_the_session(true);
}

fn stopped_past_the_session(stubborn: bool) {
    let dir = TempDir::new();
    let events = dir.path().join("events");
    let log = LockLog::new();
    let body = heartbeat(&events, stubborn);
    let (mut holder, mut waiter) = holder_and_waiter("frozen-long", None, &body, &events, &log);

    signal(holder.pid() as i32, libc::SIGSTOP);
    waiter.expect_exit(0, LONG);
    // Stopped on for a while after the next holder's run (6s of the 4s
    // session, as a rule): a command left running beats meanwhile.
    last_until(Instant::now() + Duration::from_secs(1));
    signal(holder.pid() as i32, libc::SIGCONT);

    holder.expect_exit(76, LONG);
    holder.assert_one_loss_line("");
    assert_beats_end_before_next(&events);
    if !stubborn {
        // Ended by TERM, with an `end` line (KILL leaves none).
        log.assert_exclusive();
    }
}

/// `released` needs the server's answer: a holder cut off until it has lost
/// the lock and given up its release does not say it.
#[test]
fn a_release_while_cut_off_is_not_said_to_be_released() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("frozen-release");
    let log = LockLog::new();
    let mut args = T4.to_vec();
    args.push("-v");
    let hold = crate::faults_util::HOLD;
    let mut holder = Locker::spawn("holder", &proxy.connect_string(), &path, &args, &log, hold);
    let held = holder.wait_info(LONG);
    proxy.set_mode(Mode::Blackhole);
    holder.expect_exit(76, LONG);
    let stderr = holder.stderr();
    assert!(!stderr.contains("zklock: released "), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "could not reach ZooKeeper to confirm the release of {path}"
        )),
        "{stderr}"
    );
    crate::harness::wait_until(LONG, "the node expires with the session", || {
        !zk.exists(&held.node)
    });
}

/// Frozen by its own command's first instruction (issue 39): the keeper
/// had its order before the command started, so it stops the command at
/// the lease deadline, before the next holder starts, although zklock never
/// got to supervise it.
#[test]
fn frozen_as_the_command_starts_the_keeper_still_stops_it() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let dir = TempDir::new();
    let events = dir.path().join("events");
    let log = LockLog::new();
    let path = unique_path("frozen-at-start");
    // The command's first step stops zklock, its parent.
    let body = format!("kill -STOP \"$PPID\"\n{}", heartbeat(&events, false));
    let mut holder = zklock_run(&server.connect_string(), &path);
    holder.args(T4).args(["--", "sh", "-c", &body]);
    let mut holder = KillOnDrop(holder.spawn().expect("spawn zklock"));
    wait_children(&zk, &path, 1, LONG);
    let next = format!("echo next >> '{}'", events.display());
    let mut waiter = Locker::spawn("waiter", &server.connect_string(), &path, &T4, &log, &next);
    waiter.expect_exit(0, LONG);
    signal(holder.id() as i32, libc::SIGCONT);
    let status = wait_for_exit(&mut holder.0, LONG).expect("zklock exits");
    assert_eq!(status.code(), Some(76));
    assert_beats_end_before_next(&events);
}

/// A waiter stopped (SIGSTOP) until its session expired, the node ahead
/// deleted meanwhile: continued, it may read that deletion before it finds
/// its connection dead (it is cut off at the proxy since, so nothing else
/// comes). The lock is not known held past the deadline its answers
/// allowed, so its command does not start beside the holder that took the
/// lock when the session expired: it queues again, and runs after. Which
/// comes first is tokio's random pick between the packet and the timer, so
/// four rounds: each takes the stale turn with even odds.
#[test]
fn a_waiter_stopped_past_its_session_does_not_start_on_a_stale_turn() {
    let server = shared_server();
    let direct = server.connect_string();
    let zk = Inspector::connect(&direct);
    let proxy = FaultProxy::start(server.addr());
    let through = proxy.connect_string();
    for _ in 0..4 {
        proxy.set_mode(Mode::Pass);
        let log = LockLog::new();
        let path = unique_path("frozen-waiter");
        let mut holder = Locker::spawn("holder", &direct, &path, &T4, &log, "sleep 1");
        holder.wait_info(LONG);
        let mut waiter = Locker::spawn("waiter", &through, &path, &T4, &log, "sleep 0.5");
        wait_children(&zk, &path, 2, LONG);
        let mut next = Locker::spawn("next", &direct, &path, &T4, &log, "sleep 2");
        wait_children(&zk, &path, 3, LONG);
        signal(waiter.pid() as i32, libc::SIGSTOP);
        // The holder's deletion reaches the stopped waiter's socket; then
        // nothing more does.
        holder.expect_exit(0, LONG);
        last_until(Instant::now() + Duration::from_millis(300));
        proxy.set_mode(Mode::Blackhole);
        // The waiter's session expires (4 s), and the next holder runs.
        next.wait_info(LONG);
        signal(waiter.pid() as i32, libc::SIGCONT);
        last_until(Instant::now() + Duration::from_millis(500));
        proxy.set_mode(Mode::Pass);
        next.expect_exit(0, LONG);
        waiter.expect_exit(0, LONG);
        log.assert_exclusive();
    }
}

/// A command that ends by itself while zklock is stopped past its lease
/// deadline: the run is lost (76, nobody saw whether the command ended
/// before the deadline), and the line does not say the keeper stopped it.
/// (Woken, zklock may also hear the lease's loss before the command's end,
/// and say that instead: both are true.)
#[test]
fn a_command_that_ends_while_zklock_is_stopped_is_not_said_stopped_by_the_keeper() {
    let server = shared_server();
    let path = unique_path("frozen-ended");
    let body = "kill -STOP \"$PPID\"; sleep 0.1; exit 0";
    let dir = TempDir::new();
    let stderr_path = dir.path().join("stderr");
    let mut zklock = zklock_run(&server.connect_string(), &path);
    zklock
        .args(T4)
        .args(["--", "sh", "-c", body])
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    let mut zklock = KillOnDrop(zklock.spawn().expect("spawn zklock"));
    // Past the lease (3.15 s after the last answer).
    last_until(Instant::now() + Duration::from_millis(4500));
    signal(zklock.id() as i32, libc::SIGCONT);
    let status = wait_for_exit(&mut zklock.0, LONG).expect("zklock exits");
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert_eq!(status.code(), Some(76), "{stderr}");
    assert!(stderr.contains("lock lost: "), "{stderr}");
    assert!(!stderr.contains("the keeper stopped"), "{stderr}");
}
