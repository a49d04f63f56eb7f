//! What a broken or hostile server cannot make the session do: read a
//! packet over the limit, hold a write past the connection's deadline,
//! stall the session's thread in a SASL step; and what failed attempts
//! leave behind (nothing: the credentials go once in each handshake).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, timeout};

use super::script::{LONG, Member, accept_either, config, reaches, session_on_first_member};
use crate::zk::burst::Burst;
use crate::zk::client::{Client, ConnectError, State};
use crate::zk::ops::CreateMode;
use crate::zk::records::{Acl, Error, opcode, xid};
use crate::zk::sasl::{SaslMechanism, SaslStep};

/// A packet longer than the limit ends the connection from its length:
/// nothing of it is read, the requests in flight are lost.
#[tokio::test]
async fn a_packet_over_the_limit_ends_the_connection_unread() {
    let a = Member::bind().await;
    let mut config = config(&[&a]);
    config.max_packet = 1 << 20;
    let (client, mut peer) = session_on_first_member(config, &a).await;
    let synced = client.call(|b| b.sync("/q"));
    assert_eq!(peer.request().await.opcode, opcode::SYNC);
    // Claims 60 MiB; sends a little of it.
    let mut frame = (60u32 << 20).to_be_bytes().to_vec();
    frame.extend([0u8; 64]);
    peer.raw(&frame).await;
    let lost = timeout(
        Duration::from_secs(10),
        reaches(&client, State::Disconnected),
    )
    .await;
    assert!(lost.is_ok(), "still reading a packet over the limit");
    assert_eq!(synced.await, Err(Error::ConnectionLoss));
}

/// A server that stops reading holds a large write: the connection is
/// given up at its deadline (two thirds of the session timeout of
/// silence), not left "connected" with no timer running.
#[tokio::test]
async fn a_write_the_server_does_not_read_ends_at_the_connection_deadline() {
    let a = Member::bind().await;
    let connecting = tokio::spawn(Client::connect(config(&[&a]), Burst::default()));
    let mut peer = a.accept().await;
    peer.connect_request().await;
    peer.accept_session(0x42, Duration::from_secs(3)).await;
    let client = connecting.await.unwrap().unwrap();
    let mut burst = Burst::default();
    let data = vec![7u8; 1 << 20];
    let creates: Vec<_> = (0..48)
        .map(|i| {
            burst.create(
                &format!("/n{i}"),
                &data,
                &[Acl::open()],
                CreateMode::Persistent,
            )
        })
        .collect();
    client.send(burst);
    let lost = timeout(
        Duration::from_secs(10),
        reaches(&client, State::Disconnected),
    )
    .await;
    assert!(lost.is_ok(), "still connected 10 s into a blocked write");
    drop((peer, creates));
}

/// The credentials go once in each handshake, however many attempts
/// failed before it.
#[tokio::test]
async fn credentials_of_a_failed_first_attempt_do_not_pile_up() {
    let (a, b) = (Member::bind().await, Member::bind().await);
    let mut config = config(&[&a, &b]);
    config.auth = vec![("digest".to_owned(), b"u:p".to_vec())];
    config.attempt_timeout = Duration::from_millis(500);
    let mut burst = Burst::default();
    let synced = burst.sync("/");
    let connecting = tokio::spawn(Client::connect(config, burst));
    let (mut first, next) = accept_either(&a, &b).await;
    first.connect_request().await;
    let (auth, sync) = (first.request().await, first.request().await);
    assert_eq!((auth.xid, sync.opcode), (xid::AUTH, opcode::SYNC));
    drop(first); // never answered
    let mut peer = next.accept().await;
    peer.connect_request().await;
    let (auth, sync) = (peer.request().await, peer.request().await);
    assert_eq!(auth.xid, xid::AUTH);
    assert_eq!(sync.opcode, opcode::SYNC, "one auth packet, then the burst");
    peer.accept_session(0x42, LONG).await;
    peer.reply(xid::AUTH, 0, 0, &[]).await;
    connecting.await.unwrap().unwrap();
    drop(synced);
}

/// A mechanism whose first step blocks (as GSSAPI's may, asking a KDC).
struct Stalls;

impl SaslMechanism for Stalls {
    fn step(&mut self, _: Option<&[u8]>) -> anyhow::Result<SaslStep> {
        std::thread::sleep(Duration::from_secs(3));
        Ok(SaslStep::Done)
    }
}

/// The SASL step runs off the session's thread: the attempt's timeout
/// still ends it on time.
#[tokio::test]
async fn a_stalled_sasl_step_does_not_hold_the_sessions_thread() {
    let a = Member::bind().await;
    let mut config = config(&[&a]);
    config.sasl = Some(Arc::new(|_: &str| Ok(Box::new(Stalls) as _)));
    config.attempt_timeout = Duration::from_millis(500);
    config.connect_timeout = Duration::from_millis(800);
    let started = Instant::now();
    let connecting = tokio::spawn(Client::connect(config, Burst::default()));
    let mut peer = a.accept().await;
    peer.connect_request().await;
    peer.accept_session(0x42, LONG).await;
    let err = connecting.await.unwrap().err().unwrap();
    assert!(matches!(err, ConnectError::Unreachable(_)), "{err}");
    let took = started.elapsed();
    assert!(took < Duration::from_millis(2500), "gave up after {took:?}");
}
