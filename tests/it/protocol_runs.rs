//! Issue 29: runs over zklock's own client, through the fault proxy and an
//! ensemble: what each write carries, cuts in the first burst and in the
//! release, failover with watches set again, a follower, SASL with watches.

use std::time::{Duration, Instant};

use crate::faults_util::{HOLD, LONG, Locker, finish_two_runs, members_serving, wait_children};
use crate::harness::{
    ClientSecurity, Ensemble, FaultProxy, Gated, Inspector, LockLog, Mode, SASL_PASSWORD,
    SASL_USER, Scene, Security, ServerOptions, ZkServer, assert_no_nodes, run_bounded,
    shared_server, unique_path, wait_until, zklock_run,
};

// ZooDefs.OpCode.
const DELETE: i32 = 2;
const EXISTS: i32 = 3;
const GET_DATA: i32 = 4;
const SET_DATA: i32 = 5;
const CREATE2: i32 = 15;
const CLOSE_SESSION: i32 = -11;

/// The release is the deletes and the close, in that order, with nothing
/// ahead of them: the lease's watch on our node is dropped locally, not
/// removed with a request the server would serve first.
#[test]
fn the_release_is_the_delete_and_the_close_nothing_ahead() {
    let server = shared_server();
    let path = unique_path("release-burst");
    let zk = Inspector::connect(&server.connect_string());
    // A holder that did not wait and one that did, each through a proxy of
    // its own. Either reads its node with a watch after the acquisition's
    // write: the lease's first watch, or the one set while waiting fired by
    // that write.
    let (first_proxy, second_proxy) = (
        FaultProxy::start(server.addr()),
        FaultProxy::start(server.addr()),
    );
    let first = Gated::start(zklock_run(&first_proxy.connect_string(), &path));
    let mut second = Gated::spawn(zklock_run(&second_proxy.connect_string(), &path));
    wait_children(&zk, &path, 2, LONG);
    let release = |holder: Gated, proxy: &FaultProxy| {
        wait_until(LONG, "the holder writes its node and watches it", || {
            let requests = proxy.requests();
            let written = requests.iter().rposition(|&op| op == SET_DATA);
            written.is_some_and(|at| requests[at..].contains(&GET_DATA))
        });
        let before = proxy.requests().len();
        assert!(holder.finish().success());
        let release = proxy.requests()[before..].to_vec();
        assert_eq!(release, [DELETE, CLOSE_SESSION], "{:?}", proxy.requests());
    };
    release(first, &first_proxy);
    second.wait_started(LONG);
    release(second, &second_proxy);
    assert_no_nodes(&zk, &path);
}

/// The connection breaks right after the server answered the handshake of
/// a new session, whose first burst (our create among it) rode in the same
/// write: the create's outcome is unknown, the session lives on, and the
/// node is found again by our protected name (or made again), never twice.
#[test]
fn a_cut_right_after_the_first_handshake_answer_keeps_one_node() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("cut-first-handshake");
    let zk = Inspector::connect(&server.connect_string());
    zk.create_all(&path);
    proxy.cut_after_next_handshake(Mode::Pass);
    let holder = Gated::start(zklock_run(&proxy.connect_string(), &path));
    assert_eq!(proxy.cuts(), 1);
    assert!(proxy.connections() >= 2, "no reconnection");
    assert_eq!(zk.children(&path).len(), 1, "{:?}", zk.children(&path));
    assert!(holder.finish().success());
    assert_no_nodes(&zk, &path);
    zk.delete(&path);
}

/// The first burst's create gets no answer (the connection breaks after
/// the server answered the handshake and made our node): the run recovers
/// its node by its protected name, in the same session, and sends the
/// create once.
#[test]
fn a_cut_in_the_middle_of_the_first_burst_adopts_our_node() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("cut-first-burst");
    let zk = Inspector::connect(&server.connect_string());
    proxy.cut_after_next_create(Mode::Pass);
    let mut cmd = zklock_run(&proxy.connect_string(), &path);
    cmd.args(["--", "true"]);
    run_bounded(&mut cmd, LONG).assert_code(0);
    assert_eq!(proxy.cuts(), 1);
    let requests = proxy.requests();
    let creates = requests.iter().filter(|&&op| op == CREATE2).count();
    assert_eq!(creates, 1, "our node was created again: {requests:?}");
    assert_no_nodes(&zk, &path);
}

/// The release's delete gets no answer: it is made again on the session's
/// next connection, with the close behind it, and the run says released.
#[test]
fn a_cut_in_the_release_burst_is_confirmed_on_the_next_connection() {
    let server = shared_server();
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("cut-release");
    let zk = Inspector::connect(&server.connect_string());
    let log = LockLog::new();
    let mut holder = Locker::spawn(
        "holder",
        &proxy.connect_string(),
        &path,
        &["-v"],
        &log,
        HOLD,
    );
    holder.wait_info(LONG);
    proxy.cut_after_next_delete(Mode::Pass);
    holder.release();
    holder.expect_exit(0, LONG);
    assert_eq!(proxy.cuts(), 1);
    let stderr = holder.stderr();
    assert!(stderr.contains("released"), "{stderr}");
    assert!(!stderr.contains("could not reach"), "{stderr}");
    assert_no_nodes(&zk, &path);
}

/// A waiter whose member fails moves to another member with its session;
/// the watch on the node ahead is set again there, so the waiter still gets
/// its turn when the holder releases, in order.
#[test]
fn failover_sets_the_watches_again_and_the_waiter_gets_its_turn() {
    let mut ensemble = Ensemble::start(3);
    let s = Scene::on(ensemble.connect_string(), "failover-watches");
    let path = &s.path;
    let args = ["--session-timeout", "10s", "--kill-after", "1s"];
    let mut holder = Locker::spawn("holder", &s.connect, path, &args, &s.log, HOLD);
    holder.wait_info(LONG);
    let mut waiter = Locker::spawn("waiter", &s.connect, path, &args, &s.log, "true");
    let zk = Inspector::connect(&s.connect);
    let queue = wait_children(&zk, path, 2, LONG);
    let waiter_node = format!("{path}/{}", queue.iter().max().expect("two nodes"));
    let (_, stat) = zk.get_data(&waiter_node).expect("the waiter's node");
    let mut on = Vec::new();
    wait_until(LONG, "the waiter's connection shows in `cons`", || {
        on = members_serving(&ensemble, stat.ephemeral_owner, &[]);
        on.len() == 1
    });
    let failed = on[0];
    ensemble.kill(failed);
    let survivors: Vec<String> = (0..3)
        .filter(|&i| i != failed)
        .map(|i| ensemble.member_connect_string(i))
        .collect();
    let zk = Inspector::connect(&survivors.join(","));
    wait_until(LONG, "the waiter moves to another member", || {
        waiter.assert_running("while moving");
        !members_serving(&ensemble, stat.ephemeral_owner, &[failed]).is_empty()
    });
    assert!(
        zk.exists(&waiter_node),
        "the waiter's node survives the move"
    );
    finish_two_runs(&mut holder, &mut waiter, &s.log);
    assert_no_nodes(&zk, path);
}

/// The first burst through a follower (which forwards the writes to the
/// leader and answers in order): a free lock on a missing directory, and
/// a waiter behind it.
#[test]
fn the_first_burst_through_a_follower() {
    let ensemble = Ensemble::start(3);
    let leader = ensemble.leader();
    let follower = (0..3).find(|&i| i != leader).expect("a follower");
    let connect = ensemble.member_connect_string(follower);
    let path = format!("{}/deeper", unique_path("follower"));
    let mut cmd = zklock_run(&connect, &path);
    cmd.args(["--", "true"]);
    run_bounded(&mut cmd, LONG).assert_code(0);
    let holder = Gated::start(zklock_run(&connect, &path));
    let zk = Inspector::connect(&ensemble.connect_string());
    let mut waiter = Gated::spawn(zklock_run(&connect, &path));
    wait_children(&zk, &path, 2, LONG);
    assert!(holder.finish().success());
    waiter.wait_started(LONG);
    assert!(waiter.finish().success());
    assert_no_nodes(&zk, &path);
}

/// Under SASL (a server that enforces it) a holder watches its node: over
/// several lease periods it reads its node once (to set the lease's watch
/// after the acquisition's write), and sends no periodic reads.
#[test]
fn a_holder_under_sasl_watches_instead_of_polling() {
    let server = ZkServer::start_with(ServerOptions {
        security: Security::sasl_digest(),
        ..ServerOptions::default()
    });
    let proxy = FaultProxy::start(server.addr());
    let path = unique_path("sasl-watch");
    let sasl = ["--sasl-user", SASL_USER];
    let mut cmd = zklock_run(&proxy.connect_string(), &path);
    cmd.args(sasl)
        .args(["--session-timeout", "6s", "--kill-after", "1s"]);
    cmd.env("ZKLOCK_PASSWORD", SASL_PASSWORD);
    let holder = Gated::start(cmd);
    let zk = Inspector::connect_secure(
        &server.connect_string(),
        &ClientSecurity::sasl_digest(SASL_USER, SASL_PASSWORD),
    );
    // A waiter that gives up after 5 s: the holder's node changing
    // under it (deleted) would have shown as a loss.
    let mut cmd = zklock_run(&server.connect_string(), &path);
    cmd.args(sasl).args(["-w", "5s", "--", "true"]);
    cmd.env("ZKLOCK_PASSWORD", SASL_PASSWORD);
    let started = Instant::now();
    run_bounded(&mut cmd, LONG).assert_code(75);
    assert!(started.elapsed() >= Duration::from_secs(5));
    let requests = proxy.requests();
    let reads = requests
        .iter()
        .filter(|&&op| op == GET_DATA || op == EXISTS)
        .count();
    // C/2 polling would have read the node about ten times by now.
    assert!(reads <= 2, "the holder polls: {requests:?}");
    assert!(holder.finish().success());
    assert_no_nodes(&zk, &path);
}

/// TLS with the server's certificate alone, and mutual TLS: a holder and a
/// waiter behind it, each handing over within its session, nothing left.
#[test]
fn tls_and_mutual_tls_runs_hand_over() {
    use crate::harness::{ClientAuth, ServerCert, pki};
    for (client_auth, mutual) in [(ClientAuth::None, false), (ClientAuth::Need, true)] {
        let server = ZkServer::start_with(ServerOptions {
            security: Security::tls_with(client_auth, ServerCert::Good),
            ..ServerOptions::default()
        });
        let path = unique_path("tls-hand-over");
        let pki = pki();
        let run = || {
            let mut cmd = zklock_run(&server.connect_string(), &path);
            cmd.arg("--tls-ca").arg(&pki.ca);
            if mutual {
                cmd.arg("--tls-cert").arg(&pki.client.cert);
                cmd.arg("--tls-key").arg(&pki.client.key);
            }
            cmd
        };
        let holder = Gated::start(run());
        let mut waiter = Gated::spawn(run());
        let zk = Inspector::connect_secure(&server.connect_string(), &ClientSecurity::tls());
        wait_children(&zk, &path, 2, LONG);
        assert!(holder.finish().success(), "mutual TLS: {mutual}");
        waiter.wait_started(LONG);
        assert!(waiter.finish().success(), "mutual TLS: {mutual}");
        assert_no_nodes(&zk, &path);
    }
}
