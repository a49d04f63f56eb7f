//! The session's state machine against a scripted server: what the
//! client writes, in which order, and what it reports.

use std::time::Duration;

use tokio::time::Instant;

use super::script::{
    LONG, Member, config, reaches, session_on_either, session_on_first_member, stat_bytes,
};
use crate::zk::answers::ReadResult;
use crate::zk::burst::Burst;
use crate::zk::client::{Client, State};
use crate::zk::jute::{Reader, Writer};
use crate::zk::ops::{CreateMode, ReadOp};
use crate::zk::records::{Error, EventType, WatcherEvent, opcode, xid};

#[tokio::test]
async fn a_burst_rides_behind_the_handshake_and_answers_come_in_order() {
    let member = Member::bind().await;
    let mut burst = Burst::default();
    let created = burst.create("/q/n-", b"d", &[], CreateMode::EphemeralSequential);
    let listed = burst.get_children("/q", false);
    let connecting = tokio::spawn(Client::connect(config(&[&member]), burst));
    let mut peer = member.accept().await;
    assert_eq!(peer.connect_request().await.session_id, 0);
    // Both requests are there before the handshake is answered.
    let (create, list) = (peer.request().await, peer.request().await);
    assert_eq!(
        (create.opcode, list.opcode),
        (opcode::CREATE2, opcode::GET_CHILDREN2)
    );
    assert_eq!(
        Reader::new(&list.body).string().unwrap(),
        "/app/q",
        "chroot applied"
    );
    peer.accept_session(0x42, LONG).await;
    let client = connecting.await.unwrap().unwrap();
    assert_eq!(client.session_id(), 0x42);
    let mut w = Writer::default();
    w.string("/app/q/n-0000000001").bytes.extend(stat_bytes());
    peer.reply(create.xid, 5, 0, &w.bytes).await;
    let mut w = Writer::default();
    w.vector(&["n-0000000001"], |w, s| {
        w.string(s);
    });
    w.bytes.extend(stat_bytes());
    peer.reply(list.xid, 5, 0, &w.bytes).await;
    assert_eq!(
        created.await.unwrap().path,
        "/q/n-0000000001",
        "chroot taken off"
    );
    assert_eq!(listed.await.unwrap().children, ["n-0000000001"]);

    // A later burst: written together, answered in order, errors per request.
    let mut burst = Burst::default();
    let deleted = burst.delete("/q/gone", -1);
    let exists = burst.exists("/q/gone", true);
    client.send(burst);
    let (delete, exist) = (peer.request().await, peer.request().await);
    assert_eq!(
        (delete.opcode, exist.opcode),
        (opcode::DELETE, opcode::EXISTS)
    );
    assert!(exist.xid > delete.xid);
    peer.reply(delete.xid, 6, -101, &[]).await;
    peer.reply(exist.xid, 6, -101, &[]).await;
    assert_eq!(deleted.await, Err(Error::NoNode));
    let exists = exists.await.unwrap();
    assert_eq!(exists.stat, None);
    // A watch for the node's creation was set; the event fires it.
    let mut w = Writer::default();
    let event = WatcherEvent {
        event_type: EventType::NodeCreated,
        path: "/app/q/gone".to_owned(),
    };
    event.write(&mut w);
    peer.reply(xid::WATCHER_EVENT, -1, 0, &w.bytes).await;
    let fired = exists.watch.unwrap().await.unwrap();
    assert_eq!(
        (fired.event_type, fired.path.as_str()),
        (EventType::NodeCreated, "/q/gone")
    );
}

/// The session timeout granted in the ping test: a ping is due after a
/// third of it of quiet.
const GRANTED: Duration = Duration::from_millis(1500);

#[tokio::test]
async fn a_ping_goes_out_only_after_a_third_of_the_timeout_of_quiet() {
    let member = Member::bind().await;
    let connecting = tokio::spawn(Client::connect(config(&[&member]), Burst::default()));
    let mut peer = member.accept().await;
    peer.connect_request().await;
    let answered = peer.accept_session(1, GRANTED).await;
    let client = connecting.await.unwrap().unwrap();
    let ping = peer.request().await;
    assert_eq!((ping.xid, ping.opcode), (xid::PING, opcode::PING));
    assert!(
        answered.elapsed() >= GRANTED / 3,
        "{:?}",
        answered.elapsed()
    );
    peer.reply(xid::PING, 0, 0, &[]).await;
    // A request resets the quiet: the next ping is a third after it, not a
    // third after the last ping. The sleep is the quiet under test (half a
    // ping interval), not a wait for something to happen.
    tokio::time::sleep(GRANTED / 6).await;
    let before = Instant::now();
    let sync = client.call(|b| b.sync("/q"));
    let request = peer.request().await;
    assert_eq!(request.opcode, opcode::SYNC);
    let mut w = Writer::default();
    w.string("/app/q");
    peer.reply(request.xid, 9, 0, &w.bytes).await;
    sync.await.unwrap();
    let ping = peer.request().await;
    assert_eq!(ping.opcode, opcode::PING);
    assert!(before.elapsed() >= GRANTED / 3, "{:?}", before.elapsed());
    assert_eq!(client.link().borrow().state, State::Connected);
}

#[tokio::test]
async fn a_lost_connection_is_reported_at_once_and_the_session_resumed_with_its_watches() {
    let (a, b) = (Member::bind().await, Member::bind().await);
    let (client, mut peer, b) = session_on_either(&a, &b).await;
    let watched = client.call(|b| b.get_data("/q/n", true));
    let get = peer.request().await;
    let mut w = Writer::default();
    w.buffer(Some(b"x")).bytes.extend(stat_bytes());
    peer.reply(get.xid, 0x10, 0, &w.bytes).await;
    let watch = watched.await.unwrap().watch.unwrap();
    let unanswered = client.call(|b| b.sync("/q"));
    assert_eq!(peer.request().await.opcode, opcode::SYNC);
    drop(peer);

    reaches(&client, State::Disconnected).await;
    assert_eq!(client.link().borrow().losses, 1);
    assert_eq!(unanswered.await, Err(Error::ConnectionLoss));
    // Made while disconnected: written on the next connection.
    let made_meanwhile = client.call(|b| b.sync("/q"));
    let mut peer = b.accept().await;
    let resumed = peer.connect_request().await;
    assert_eq!((resumed.session_id, resumed.last_zxid_seen), (0x42, 0x10));
    assert_eq!(resumed.password, [7; 16]);
    let set = peer.request().await;
    assert_eq!(
        (set.xid, set.opcode),
        (xid::SET_WATCHES, opcode::SET_WATCHES)
    );
    let mut r = Reader::new(&set.body);
    assert_eq!(r.long().unwrap(), 0x10, "relative zxid");
    assert_eq!(
        r.vector(Reader::string).unwrap(),
        ["/app/q/n"],
        "data watches"
    );
    // Not connected until the server answers on the new connection.
    assert_eq!(client.link().borrow().state, State::Disconnected);
    peer.accept_session(0x42, LONG).await;
    reaches(&client, State::Connected).await;
    let sync = peer.request().await;
    assert_eq!(sync.opcode, opcode::SYNC);
    let mut w = Writer::default();
    w.string("/app/q");
    peer.reply(sync.xid, 0x11, 0, &w.bytes).await;
    made_meanwhile.await.unwrap();
    let mut w = Writer::default();
    let event = WatcherEvent {
        event_type: EventType::NodeDeleted,
        path: "/app/q/n".to_owned(),
    };
    event.write(&mut w);
    peer.reply(xid::WATCHER_EVENT, -1, 0, &w.bytes).await;
    assert_eq!(watch.await.unwrap().event_type, EventType::NodeDeleted);
}

#[tokio::test]
async fn a_server_saying_expired_ends_the_session() {
    let (a, b) = (Member::bind().await, Member::bind().await);
    let (client, mut peer, b) = session_on_either(&a, &b).await;
    let exists = client.call(|b| b.exists("/q/n", true));
    let request = peer.request().await;
    peer.reply(request.xid, 3, 0, &stat_bytes()).await;
    let watch = exists.await.unwrap().watch.unwrap();
    drop(peer);
    reaches(&client, State::Disconnected).await;
    let mut peer = b.accept().await;
    peer.connect_request().await;
    peer.accept_session(0, Duration::ZERO).await;
    reaches(&client, State::Expired).await;
    assert_eq!(watch.await, Err(Error::SessionExpired));
    assert_eq!(
        client.call(|b| b.sync("/")).await,
        Err(Error::SessionExpired)
    );
}

#[tokio::test]
async fn closed_only_on_the_answer_to_close_session() {
    let a = Member::bind().await;
    let (client, mut peer) = session_on_first_member(config(&[&a]), &a).await;
    let mut burst = Burst::default();
    let deleted = burst.delete("/q/n", -1);
    let closed = burst.close();
    client.send(burst);
    let (delete, close) = (peer.request().await, peer.request().await);
    assert_eq!(
        (delete.opcode, close.opcode),
        (opcode::DELETE, opcode::CLOSE_SESSION)
    );
    peer.reply(delete.xid, 8, 0, &[]).await;
    deleted.await.unwrap();
    assert_eq!(client.link().borrow().state, State::Connected);
    peer.reply(close.xid, 9, 0, &[]).await;
    closed.await.unwrap();
    reaches(&client, State::Closed).await;
    assert_eq!(client.call(|b| b.sync("/")).await, Err(Error::Closed));
}

#[tokio::test]
async fn a_member_that_never_answers_the_handshake_is_left_for_the_next() {
    // Bound, never accepting: the kernel completes TCP's handshake anyway.
    let (silent, b) = (Member::bind().await, Member::bind().await);
    let mut config = config(&[&silent, &b]);
    config.attempt_timeout = Duration::from_secs(1);
    let mut burst = Burst::default();
    let synced = burst.sync("/");
    let connecting = tokio::spawn(Client::connect(config, burst));
    let mut peer = b.accept().await;
    peer.connect_request().await;
    // The burst is made again behind the handshake that is answered.
    let sync = peer.request().await;
    assert_eq!(sync.opcode, opcode::SYNC);
    peer.accept_session(0x42, LONG).await;
    let client = connecting.await.unwrap().unwrap();
    let mut w = Writer::default();
    w.string("/app");
    peer.reply(sync.xid, 1, 0, &w.bytes).await;
    synced.await.unwrap();
    assert_eq!(client.link().borrow().state, State::Connected);
}

#[tokio::test]
async fn reads_fall_back_to_single_requests_where_multi_read_is_unknown() {
    let a = Member::bind().await;
    let (client, mut peer) = session_on_first_member(config(&[&a]), &a).await;
    let reads = vec![
        ReadOp::GetData("/q/a".into()),
        ReadOp::GetChildren("/q".into()),
    ];
    let reading = tokio::spawn(async move { client.read_many(reads).await });
    let multi = peer.request().await;
    assert_eq!(multi.opcode, opcode::MULTI_READ);
    peer.reply(multi.xid, 0, -6, &[]).await;
    let (data, children) = (peer.request().await, peer.request().await);
    assert_eq!(
        (data.opcode, children.opcode),
        (opcode::GET_DATA, opcode::GET_CHILDREN2)
    );
    peer.reply(data.xid, 2, -101, &[]).await;
    let mut w = Writer::default();
    w.vector(&["a"], |w, s| {
        w.string(s);
    });
    w.bytes.extend(stat_bytes());
    peer.reply(children.xid, 2, 0, &w.bytes).await;
    let results = reading.await.unwrap().unwrap();
    assert_eq!(
        results,
        [
            Err(Error::NoNode),
            Ok(ReadResult::Children(vec!["a".to_owned()]))
        ]
    );
}

#[tokio::test]
async fn an_answer_out_of_order_ends_the_connection() {
    let (a, b) = (Member::bind().await, Member::bind().await);
    let (client, mut peer, _) = session_on_either(&a, &b).await;
    let mut burst = Burst::default();
    let first = burst.sync("/1");
    let second = burst.sync("/2");
    client.send(burst);
    let (_, later) = (peer.request().await, peer.request().await);
    peer.reply(later.xid, 1, 0, &[]).await;
    reaches(&client, State::Disconnected).await;
    assert_eq!(first.await, Err(Error::ConnectionLoss));
    assert_eq!(second.await, Err(Error::ConnectionLoss));
}

#[tokio::test]
async fn when_every_handle_is_gone_the_session_closes_itself() {
    let a = Member::bind().await;
    let (client, mut peer) = session_on_first_member(config(&[&a]), &a).await;
    let mut link = client.link();
    drop(client);
    let close = peer.request().await;
    assert_eq!(close.opcode, opcode::CLOSE_SESSION);
    assert_eq!(link.borrow().state, State::Connected, "until the answer");
    peer.reply(close.xid, 2, 0, &[]).await;
    link.wait_for(|link| link.state == State::Closed)
        .await
        .unwrap();
}
