//! Issue 3, scenarios 1-9: network faults between one zklock and a standalone server,
//! injected by a [`FaultProxy`], and an operator or a debugger acting on the holder.
//!
//! Timings, with T the session timeout, C the connection timeout (clamp(T/5, 1s, 0.4T)),
//! K `--kill-after` and m = C/4 + 100ms: a silent server is noticed C after the last
//! reply, the lease deadline is T - C - K - m after that, and the server expires the
//! session T after it last heard from the client. For T = 3s, K = 0.5s: C = 1s,
//! grace 1.15s; for T = 4s, K = 0.5s: C = 1s, grace 2.15s; for T = 6s, K = 1s: C = 1.2s,
//! grace 3.4s.

use std::time::{Duration, Instant};

use crate::faults_util::{
    HOLD, LONG, Locker, assert_no_nodes_within, assert_no_watches, finish_two_runs, hold_steady,
    pid_running, start_order, wait_children,
};
use crate::harness::{
    FaultProxy, Holder, Inspector, LockLog, Mode, shared_server, signal, unique_path, wait_until,
    zklock_run,
};

const T3: [&str; 4] = ["--session-timeout", "3s", "--kill-after", "0.5s"];
const T4: [&str; 4] = ["--session-timeout", "4s", "--kill-after", "0.5s"];

/// Scenario 1: Holder's connection blackholed for less than the deadline: the command
/// keeps running, nobody else acquires, the lock is kept (same node, same session).
#[test]
fn s01_brief_blackhole_keeps_the_lock() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("s01-brief-blackhole");
    let log = LockLog::new();

    // T = 4s: noticed C = 1s after the last reply, deadline 2.15s later.
    let mut holder = Locker::spawn("holder", &proxy.connect_string(), &path, &T4, &log, HOLD);
    let held = holder.wait_info(LONG);
    let mut waiter = Locker::spawn("waiter", &server.connect_string(), &path, &T4, &log, "true");
    wait_children(&zk, &path, 2, LONG);

    proxy.set_mode(Mode::Blackhole);
    let cut = Instant::now();
    // Longer than C, so the client notices and reconnects; well below the deadline
    // (which is at least C - ping interval + grace = 2.75s after the cut).
    let partition = Duration::from_millis(1500);
    hold_steady(&mut [&mut holder, &mut waiter], &log, 1, cut + partition);
    let attempts = proxy.connections();
    proxy.set_mode(Mode::Pass);
    // Past the lease deadline and past the session's expiry had it not come back.
    hold_steady(
        &mut [&mut holder, &mut waiter],
        &log,
        1,
        cut + Duration::from_secs(5),
    );
    let (_, stat) = zk.get_data(&held.node).expect("the holder's node is kept");
    assert_eq!(stat.ephemeral_owner, held.session, "same session owns it");
    assert!(
        proxy.connections() > 1,
        "the holder never reconnected (connections: {attempts} during the partition)"
    );
    eprintln!(
        "holder opened {} connections through the proxy ({attempts} by the end of the partition)",
        proxy.connections()
    );

    finish_two_runs(&mut holder, &mut waiter, &log);
    assert_no_nodes_within(&zk, &path, Duration::ZERO);
    assert_no_watches(|w| server.four_letter(w), &path);
}

/// Scenario 2: Holder blackholed longer than the session timeout, a waiter queued: the
/// holder ends its command before the waiter's starts; the holder exits 76.
#[test]
fn s02_long_blackhole_holder_ends_before_waiter_starts() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("s02-long-blackhole");
    let log = LockLog::new();

    let mut holder = Locker::spawn("holder", &proxy.connect_string(), &path, &T3, &log, HOLD);
    let held = holder.wait_info(LONG);
    let mut waiter = Locker::spawn("waiter", &server.connect_string(), &path, &T3, &log, "true");
    wait_children(&zk, &path, 2, LONG);

    proxy.set_mode(Mode::Blackhole);
    let cut = Instant::now();
    let waited = wait_until(LONG, "the holder's command ends", || {
        log.open_ids().is_empty()
    });
    eprintln!("holder's command ended {waited:?} after the partition began");
    holder.expect_exit(76, LONG);
    let exited = cut.elapsed();
    holder.assert_one_loss_line("past the lease deadline");
    waiter.expect_exit(0, LONG);
    let waiter_done = cut.elapsed();
    eprintln!("holder exited 76 after {exited:?}, waiter done after {waiter_done:?}");
    // The partition lasted longer than the session timeout (the waiter got the lock
    // only after the server expired the holder's session).
    assert!(waiter_done > Duration::from_secs(2), "{waiter_done:?}");
    proxy.set_mode(Mode::Pass);

    log.assert_exclusive();
    log.assert_tokens_increase();
    let order = start_order(&log);
    assert_eq!(order.len(), 2, "{}", log.contents());
    assert_eq!(order[0], held.pid);
    assert!(zk.get_data(&held.node).is_none(), "old node survived");
    assert_no_nodes_within(&zk, &path, Duration::from_secs(4));
    assert_no_watches(|w| server.four_letter(w), &path);
}

/// Scenario 3: An operator deletes the holder's node: command terminated, exit 76, the
/// waiter acquires.
///
/// No exclusivity oracle here: deleting the node breaks the lock on purpose, and the
/// waiter and the holder learn it from the same transaction, so the waiter's command may
/// start a few milliseconds before the holder's has been stopped.
#[test]
fn s03_operator_deletes_holder_node() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let path = unique_path("s03-node-deleted");
    let log = LockLog::new();
    let connect = server.connect_string();

    let mut holder = Locker::spawn("holder", &connect, &path, &T3, &log, HOLD);
    let held = holder.wait_info(LONG);
    let mut waiter = Locker::spawn("waiter", &connect, &path, &T3, &log, HOLD);
    wait_children(&zk, &path, 2, LONG);

    let deleted = Instant::now();
    assert!(zk.delete(&held.node));
    holder.expect_exit(76, LONG);
    let took = deleted.elapsed();
    eprintln!("holder exited 76 {took:?} after the deletion");
    assert!(took < Duration::from_secs(3), "{took:?}");
    holder.assert_one_loss_line("was deleted");
    assert!(
        !pid_running(held.pid),
        "the holder's command outlived zklock"
    );
    let next = waiter.wait_info(LONG);
    assert!(next.token > held.token);
    assert_eq!(zk.children(&path), vec![next.node_name().to_string()]);
    waiter.release();
    waiter.expect_exit(0, LONG);
    assert!(log.open_ids().is_empty(), "{}", log.contents());
    eprintln!(
        "lock log (at most {} at once):\n{}",
        log.max_concurrency(),
        log.contents()
    );
    log.assert_tokens_increase();
    assert_no_nodes_within(&zk, &path, Duration::ZERO);
    assert_no_watches(|w| server.four_letter(w), &path);
}

/// Scenario 4: Holder zklock SIGSTOPped longer than the session timeout, then SIGCONT:
/// the waiter acquires after about one session timeout; the keeper has killed the
/// frozen holder's command by then (a command that ignores TERM: KILL, `--kill-after`
/// after the lease deadline); the resumed holder exits 76. The fencing tokens differ
/// and increase.
#[test]
fn s04_frozen_holder_is_overtaken_then_kills_its_command() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let path = unique_path("s04-sigstop");
    let log = LockLog::new();
    let connect = server.connect_string();
    let session = Duration::from_secs(4);

    // The command ignores TERM, so only the KILL after --kill-after ends it.
    let stubborn = format!("trap '' TERM\n{HOLD}");
    let mut holder = Locker::spawn("holder", &connect, &path, &T4, &log, &stubborn);
    let held = holder.wait_info(LONG);
    let mut waiter = Locker::spawn("waiter", &connect, &path, &T4, &log, "true");
    wait_children(&zk, &path, 2, LONG);

    signal(holder.pid() as i32, libc::SIGSTOP);
    let stopped = Instant::now();
    assert!(log.wait_for_starts(2, LONG), "the waiter never acquired");
    let overtaken = stopped.elapsed();
    waiter.expect_exit(0, LONG);
    eprintln!("waiter acquired {overtaken:?} after the SIGSTOP");
    // About one session timeout: not before the server could expire the session
    // (last ping up to ~0.4s before the stop), and not a second one later.
    assert!(
        overtaken >= session - Duration::from_millis(600),
        "{overtaken:?}"
    );
    assert!(overtaken < session * 2, "{overtaken:?}");
    assert!(
        !pid_running(held.pid),
        "the frozen holder's keeper did not kill its command"
    );
    log.record_end(held.pid);

    signal(holder.pid() as i32, libc::SIGCONT);
    let resumed = Instant::now();
    holder.expect_exit(76, LONG);
    holder.assert_one_loss_line("");
    eprintln!("holder exited {:?} after SIGCONT", resumed.elapsed());

    let tokens: Vec<i64> = log.entries().iter().filter_map(|e| e.token).collect();
    assert!(tokens.len() >= 2, "{}", log.contents());
    log.assert_tokens_increase();
    log.assert_max_concurrency(2);
    assert_no_nodes_within(&zk, &path, Duration::ZERO);
    assert_no_watches(|w| server.four_letter(w), &path);
}

/// Scenario 5: cut-after-create on the first create: exactly one node for this zklock,
/// the lock is acquired, nothing left afterwards.
#[test]
fn s05_lost_create_reply_is_recovered() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("s05-cut-after-create");
    let log = LockLog::new();

    // The lock directory exists, so the cut create is the one that makes our node (a
    // create answered NoNode would be cut otherwise, and nothing would be lost).
    zk.create_all(&path);
    proxy.cut_after_next_create(Mode::Pass);
    let mut locker = Locker::spawn("locker", &proxy.connect_string(), &path, &T3, &log, HOLD);
    let held = locker.wait_info(LONG);
    assert_eq!(proxy.cuts(), 1, "the create was not cut");
    assert_eq!(
        zk.children(&path),
        vec![held.node_name().to_string()],
        "exactly one node, the adopted one"
    );
    let (_, stat) = zk.get_data(&held.node).expect("node");
    assert_eq!(stat.ephemeral_owner, held.session);
    assert_eq!(stat.czxid, held.token);
    locker.release();
    locker.expect_exit(0, LONG);
    assert_eq!(log.starts(), 1);
    assert_no_nodes_within(&zk, &path, Duration::ZERO);
    assert_no_watches(|w| server.four_letter(w), &path);
    zk.delete(&path);
}

/// Scenario 6: cut-after-create, then blackhole longer than the session timeout: the old
/// node dies with the old session and is never adopted; acquisition succeeds in a new
/// session.
#[test]
fn s06_lost_create_then_expiry_requeues_in_new_session() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("s06-cut-then-expire");
    let log = LockLog::new();

    zk.create_all(&path);
    proxy.cut_after_next_create(Mode::Blackhole);
    let mut args = T3.to_vec();
    args.extend(["--connect-timeout", "30s", "-v"]);
    let mut locker = Locker::spawn("locker", &proxy.connect_string(), &path, &args, &log, HOLD);
    wait_until(LONG, "the create is cut", || proxy.cuts() == 1);
    let orphan = wait_children(&zk, &path, 1, LONG).remove(0);
    let orphan_path = format!("{path}/{orphan}");
    let (_, orphan_stat) = zk.get_data(&orphan_path).expect("orphan node");
    let cut = Instant::now();
    wait_until(LONG, "the orphan dies with its session", || {
        !zk.exists(&orphan_path)
    });
    eprintln!("orphan gone {:?} after the cut", cut.elapsed());
    assert_eq!(log.starts(), 0);
    locker.assert_running("during the partition");

    proxy.set_mode(Mode::Pass);
    let held = locker.wait_info(LONG);
    eprintln!("acquired {:?} after the cut", cut.elapsed());
    assert_ne!(held.session, orphan_stat.ephemeral_owner, "same session");
    assert_ne!(held.node, orphan_path, "the orphan was adopted");
    let uuid = |name: &str| name.split("-lock-").next().unwrap_or_default().to_string();
    assert_ne!(uuid(held.node_name()), uuid(&orphan), "uuid reused");
    assert_eq!(zk.children(&path), vec![held.node_name().to_string()]);
    locker.release();
    locker.expect_exit(0, LONG);
    assert!(
        locker.stderr().contains("queueing again"),
        "{}",
        locker.stderr()
    );
    assert_no_nodes_within(&zk, &path, Duration::ZERO);
    assert_no_watches(|w| server.four_letter(w), &path);
    zk.delete(&path);
}

/// Scenario 7: Waiter blackholed briefly while the holder releases: the waiter still
/// acquires (its watch survives the reconnect); no duplicate nodes.
#[test]
fn s07_waiter_watch_survives_brief_blackhole() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("s07-waiter-blackhole");
    let log = LockLog::new();

    let mut holder = Locker::spawn("holder", &server.connect_string(), &path, &T4, &log, HOLD);
    let held = holder.wait_info(LONG);
    let mut waiter = Locker::spawn("waiter", &proxy.connect_string(), &path, &T4, &log, HOLD);
    let queued: Vec<String> = wait_children(&zk, &path, 2, LONG)
        .into_iter()
        .filter(|c| c != held.node_name())
        .collect();
    proxy.wait_watching(LONG);

    proxy.set_mode(Mode::Blackhole);
    let cut = Instant::now();
    holder.release();
    holder.expect_exit(0, LONG);
    // Brief: past C, so the waiter notices and reconnects; far from T.
    hold_steady(
        &mut [&mut waiter],
        &log,
        1,
        cut + Duration::from_millis(1500),
    );
    proxy.set_mode(Mode::Pass);
    let healed = Instant::now();
    let next = waiter.wait_info(LONG);
    let took = healed.elapsed();
    eprintln!("waiter acquired {took:?} after the partition healed");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(vec![next.node_name().to_string()], queued, "not its node");
    assert_eq!(zk.children(&path), queued, "duplicate nodes");
    waiter.release();
    waiter.expect_exit(0, LONG);
    log.assert_exclusive();
    log.assert_tokens_increase();
    assert_no_nodes_within(&zk, &path, Duration::ZERO);
    assert_no_watches(|w| server.four_letter(w), &path);
}

/// Scenario 8: Waiter blackholed longer than the session timeout: it re-queues and later
/// acquires; the queue behind it is not blocked.
#[test]
fn s08_expired_waiter_requeues_without_blocking_the_queue() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("s08-waiter-expires");
    let log = LockLog::new();
    let direct = server.connect_string();

    let mut holder = Locker::spawn("holder", &direct, &path, &T3, &log, HOLD);
    let held = holder.wait_info(LONG);
    let mut args = T3.to_vec();
    args.extend(["--connect-timeout", "30s", "-v"]);
    let mut cut_off = Locker::spawn("cut-off", &proxy.connect_string(), &path, &args, &log, HOLD);
    let first_node = wait_children(&zk, &path, 2, LONG)
        .into_iter()
        .find(|c| c != held.node_name())
        .expect("cut-off waiter's node");
    let first_node = format!("{path}/{first_node}");
    let (_, first_stat) = zk.get_data(&first_node).expect("node");
    let mut behind = Locker::spawn("behind", &direct, &path, &T3, &log, HOLD);
    wait_children(&zk, &path, 3, LONG);
    proxy.wait_watching(LONG);

    proxy.set_mode(Mode::Blackhole);
    let cut = Instant::now();
    wait_until(LONG, "the cut-off waiter's node expires", || {
        !zk.exists(&first_node)
    });
    eprintln!(
        "cut-off waiter's node expired {:?} after the cut",
        cut.elapsed()
    );

    // The queue moves on without it, while it is still cut off.
    holder.release();
    holder.expect_exit(0, LONG);
    let next = behind.wait_info(LONG);
    behind.release();
    behind.expect_exit(0, LONG);
    assert_eq!(proxy.mode(), Mode::Blackhole);
    cut_off.assert_running("while cut off");

    proxy.set_mode(Mode::Pass);
    let last = cut_off.wait_info(LONG);
    eprintln!("cut-off waiter acquired {:?} after the cut", cut.elapsed());
    assert_ne!(
        last.session, first_stat.ephemeral_owner,
        "not a new session"
    );
    assert!(last.token > next.token);
    cut_off.release();
    cut_off.expect_exit(0, LONG);
    assert!(
        cut_off.stderr().contains("queueing again"),
        "{}",
        cut_off.stderr()
    );

    assert_eq!(start_order(&log), vec![held.pid, next.pid, last.pid]);
    log.assert_exclusive();
    log.assert_tokens_increase();
    assert_no_nodes_within(&zk, &path, Duration::ZERO);
    assert_no_watches(|w| server.four_letter(w), &path);
}

/// Scenario 9: `--timeout` expires while the waiter's connection is blackholed briefly:
/// the node is deleted after the reconnect (not left to die with the session), nothing
/// left.
#[test]
fn s09_timeout_during_blackhole_deletes_node_after_reconnect() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("s09-timeout-blackhole");
    let log = LockLog::new();

    let t6 = ["--session-timeout", "6s", "--kill-after", "1s"];
    let mut holder = Locker::spawn("holder", &server.connect_string(), &path, &t6, &log, HOLD);
    let held = holder.wait_info(LONG);
    // Room for the queueing and the proxy's cut to come before the deadline
    // on a loaded machine (at 2 s, a cut after it found the cleanup done).
    let wait_limit = Duration::from_secs(4);
    // A 12 s session: its connection is given up only after 8 s of silence,
    // so the cleanup always goes into the connection the partition cut (a
    // heal resets it, and the session comes back at once). With 6 s, a
    // loaded machine could give that connection up first: the cleanup then
    // waited in a new attempt, and the pause after that attempt's reset
    // (up to 1.5 s) outlasted the 1 s the cleanup has.
    let mut args = vec!["--session-timeout", "12s", "--kill-after", "1s"];
    args.extend(["--timeout", "4s", "-v"]);
    let mut waiter = Locker::spawn("waiter", &proxy.connect_string(), &path, &args, &log, HOLD);
    let queued = wait_children(&zk, &path, 2, LONG)
        .into_iter()
        .find(|c| c != held.node_name())
        .expect("waiter's node");
    assert!(
        waiter.spawned.elapsed() < wait_limit,
        "too slow to queue to test a timeout during the partition"
    );

    proxy.wait_watching(LONG);
    let before = proxy.requests().len();
    proxy.set_mode(Mode::Blackhole);
    let cut_at = waiter.spawned.elapsed();
    assert!(
        cut_at < wait_limit,
        "the partition came after the waiter's --timeout"
    );
    // Until the --timeout has passed and the waiter's cleanup went into the
    // partition (anything but a ping): it then has 1 s to reconnect and delete
    // its node, and the session (12s) outlives the partition. Healing at a fixed
    // time could come after that second on a loaded machine.
    const PING: i32 = 11;
    let deadline = Instant::now() + LONG;
    while !proxy.requests()[before..].iter().any(|&op| op != PING) {
        holder.assert_running("while the lock should be kept");
        let exited = waiter.try_exit();
        assert!(
            exited.is_none() && Instant::now() < deadline,
            "no cleanup from the waiter (cut {cut_at:?} after its spawn, now {:?}; \
             exited: {exited:?}; requests: {:?}, the cut after the first {before}); stderr:\n{}",
            waiter.spawned.elapsed(),
            proxy.requests(),
            waiter.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(log.starts(), 1);
    proxy.set_mode(Mode::Pass);
    let healed = Instant::now();
    waiter.expect_exit(75, LONG);
    eprintln!("waiter exited 75 {:?} after the heal", healed.elapsed());
    assert!(
        waiter.stderr().contains("timed out waiting"),
        "{}",
        waiter.stderr()
    );
    assert!(
        !zk.exists(&format!("{path}/{queued}")),
        "the waiter's node outlived it (left to die with the session?) {}",
        waiter.stderr()
    );
    assert_eq!(zk.children(&path), vec![held.node_name().to_string()]);
    holder.release();
    holder.expect_exit(0, LONG);
    assert_eq!(log.starts(), 1);
    assert_no_nodes_within(&zk, &path, Duration::ZERO);
    assert_no_watches(|w| server.four_letter(w), &path);
}

/// With `-v`, a holder says when its connection is lost (with the lease deadline)
/// and when it is restored, for a partition and for a reset alike.
#[test]
fn verbose_says_when_the_connection_is_lost_and_restored() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("verbose-connection");
    let log = LockLog::new();
    let mut holder = Holder::start(
        // A session long enough that a disconnection is still one when a
        // loaded machine gets round to it, not already an expiry.
        zklock_run(&proxy.connect_string(), &path).arg("-v").args([
            "--session-timeout",
            "10s",
            "--kill-after",
            "0.5s",
        ]),
        &log,
    );
    // Two outages, each reported. (A reset right after the first outage's
    // reconnection is what scenario 11 makes certain.)
    for (round, mode) in [Mode::Blackhole, Mode::Reset].into_iter().enumerate() {
        proxy.set_mode(mode);
        said(
            &holder,
            "connection to ZooKeeper lost; the lock is kept until ",
            round + 1,
        );
        proxy.set_mode(Mode::Pass);
        said(
            &holder,
            "connection to ZooKeeper restored after ",
            round + 1,
        );
    }
    let stderr = holder.stderr();
    let lost = stderr
        .lines()
        .find(|l| l.contains("connection to ZooKeeper lost"))
        .unwrap();
    // `... kept until HH:MM:SS UTC (2s 100ms from now) unless ...`
    let until = lost.split("kept until ").nth(1).unwrap();
    assert!(
        until.as_bytes()[2] == b':'
            && until.as_bytes()[5] == b':'
            && until[8..].starts_with(" UTC ("),
        "{lost}"
    );
    assert!(stderr.contains("; still holding"), "{stderr}");
    holder.finish();
}

/// Scenario 10: the release is one burst, the deletes and the session's close; the
/// connection breaks after the delete reached the server and before its answer (or
/// the close) came through. zklock makes the delete again from a new connection to
/// the same session, as a delete sent alone would be retried, learns the node is
/// gone, and ends that session: released at once, not at the session's expiry.
#[test]
fn s10_lost_release_reply_is_confirmed_from_a_new_connection() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("s10-cut-after-delete");
    proxy.cut_after_next_delete(Mode::Pass);
    let mut cmd = zklock_run(&proxy.connect_string(), &path);
    cmd.args(["-v", "--session-timeout", "30s", "--", "true"]);
    let out = crate::harness::run_bounded(&mut cmd, LONG);
    out.assert_code(0);
    assert_eq!(proxy.cuts(), 1, "the delete was not cut: {}", out.stderr);
    assert!(
        proxy.connections() >= 2,
        "no second connection: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains("released ") && !out.stderr.contains("could not reach"),
        "{}",
        out.stderr
    );
    assert_no_nodes_within(&zk, &path, Duration::ZERO);
}

/// Scenario 11: the connection breaks right after the server answered a
/// reconnection's handshake. A client that says connected on that answer and then
/// stays so while it reconnects (as the client library zklock used before its own
/// did) leaves the holder's command running with no lease deadline, past the
/// server's expiry of the session. zklock's client may say connected on the
/// handshake's answer (the server did answer), but says disconnected at once when
/// that connection breaks: with the server out of reach after the cut, the last
/// word is "lost" and the lease deadline runs.
#[test]
fn s11_connection_lost_right_after_a_reconnection_handshake() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("s11-lost-after-handshake");
    let log = LockLog::new();
    // T = 20s: C = 4s, a grace of 14.4s from the first outage's start.
    let mut holder = Holder::start(
        zklock_run(&proxy.connect_string(), &path).arg("-v").args([
            "--session-timeout",
            "20s",
            "--kill-after",
            "0.5s",
        ]),
        &log,
    );
    let node = holder.node();
    let (_, held) = zk.get_data(&node).expect("the holder's node");
    let restored = "connection to ZooKeeper restored after ";
    proxy.set_mode(Mode::Reset);
    said(
        &holder,
        "connection to ZooKeeper lost; the lock is kept until ",
        1,
    );
    proxy.cut_after_next_handshake(Mode::Reset);
    proxy.set_mode(Mode::Pass);
    wait_until(LONG, "the handshake cut", || proxy.cuts() == 1);
    // The proxy resets every connection now: whatever was said on the
    // handshake's answer, the holder must end up disconnected.
    let lost = "connection to ZooKeeper lost; the lock is kept until ";
    std::thread::sleep(Duration::from_secs(1));
    let stderr = holder.stderr();
    let restored_before = stderr.matches(restored).count();
    assert_eq!(
        stderr.matches(lost).count(),
        restored_before + 1,
        "not disconnected after the cut:\n{stderr}"
    );
    proxy.set_mode(Mode::Pass);
    said(&holder, restored, restored_before + 1);
    let (_, stat) = zk.get_data(&node).expect("the holder's node is kept");
    assert_eq!(stat.ephemeral_owner, held.ephemeral_owner, "same session");
    assert!(
        !holder.stderr().contains("lock lost"),
        "{}",
        holder.stderr()
    );
    holder.finish();
}

/// `--on-disconnect kill`: any disconnection loses the lock at once, even one the
/// session would survive.
#[test]
fn on_disconnect_kill_ends_the_hold_at_a_disconnection() {
    let server = shared_server();
    let zk = Inspector::connect(&server.connect_string());
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("on-disconnect-kill");
    let log = LockLog::new();
    let mut holder = Holder::start(
        zklock_run(&proxy.connect_string(), &path).args([
            "--on-disconnect",
            "kill",
            "--session-timeout",
            "4s",
        ]),
        &log,
    );
    proxy.set_mode(Mode::Reset);
    holder.assert_exit(76, LONG);
    assert!(
        holder
            .stderr()
            .contains("lock lost: disconnected from ZooKeeper (--on-disconnect=kill)"),
        "{}",
        holder.stderr()
    );
    // Unreachable at its exit, zklock leaves its node to the session's expiry.
    assert_no_nodes_within(&zk, &path, LONG);
}

/// Waits until the holder's stderr has `times` lines containing `what`.
fn said(holder: &Holder, what: &str, times: usize) {
    let deadline = Instant::now() + LONG;
    while holder.stderr().matches(what).count() < times {
        assert!(
            Instant::now() < deadline,
            "no {times} `{what}` lines in:\n{}",
            holder.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
