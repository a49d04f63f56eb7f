//! Credentials against a scripted server: digest auth in the connect
//! burst, SASL before anything else on every connection.

use std::sync::Arc;
use std::time::Duration;

use super::script::{
    LONG, Member, Peer, Received, accept_either, config, reaches, session_on_either, stat_bytes,
};
use crate::zk::burst::Burst;
use crate::zk::client::{Client, ConnectError, State};
use crate::zk::jute::{Reader, Writer};
use crate::zk::records::{Error, opcode, xid};
use crate::zk::sasl::{SaslMechanism, SaslStep};

/// A mechanism of one round: sends `hello`, done on the server's answer.
struct OneRound;

impl SaslMechanism for OneRound {
    fn step(&mut self, challenge: Option<&[u8]>) -> anyhow::Result<SaslStep> {
        Ok(match challenge {
            None => SaslStep::Send(b"hello".to_vec()),
            Some(_) => SaslStep::Done,
        })
    }
}

#[tokio::test]
async fn credentials_and_watches_follow_sasl_on_every_connection() {
    let (a, b) = (Member::bind().await, Member::bind().await);
    let mut config = config(&[&a, &b]);
    config.sasl = Some(Arc::new(|_: &str| Ok(Box::new(OneRound) as _)));
    config.auth = vec![("digest".to_owned(), b"u:p".to_vec())];
    let mut burst = Burst::default();
    let watched = burst.get_children("/q", true);
    let connecting = tokio::spawn(Client::connect(config, burst));
    let (mut peer, b) = accept_either(&a, &b).await;
    let next = sasl_then_credentials(&mut peer).await;
    assert_eq!(next.opcode, opcode::GET_CHILDREN2, "the burst after SASL");
    let mut w = Writer::default();
    w.vector::<&str>(&[], |_, _| {}).bytes.extend(stat_bytes());
    peer.reply(next.xid, 4, 0, &w.bytes).await;
    let client = connecting.await.unwrap().unwrap();
    let _watch = watched.await.unwrap().watch.unwrap();
    drop(peer);
    reaches(&client, State::Disconnected).await;
    let mut peer = b.accept().await;
    let next = sasl_then_credentials(&mut peer).await;
    assert_eq!(next.opcode, opcode::SET_WATCHES, "watches after SASL");
}

/// Plays a server through the handshake and SASL, checks that the
/// credentials come next, and returns the request after them.
async fn sasl_then_credentials(peer: &mut Peer) -> Received {
    peer.connect_request().await;
    peer.accept_session(0x42, LONG).await;
    let sasl = peer.request().await;
    assert_eq!(sasl.opcode, opcode::SASL, "SASL first");
    assert_eq!(
        Reader::new(&sasl.body).buffer().unwrap(),
        Some(&b"hello"[..])
    );
    peer.reply(sasl.xid, 0, 0, &[0, 0, 0, 0]).await;
    let auth = peer.request().await;
    assert_eq!((auth.xid, auth.opcode), (xid::AUTH, opcode::AUTH));
    peer.reply(xid::AUTH, 0, 0, &[]).await;
    peer.request().await
}

#[tokio::test]
async fn digest_credentials_ride_in_the_connect_burst_and_a_refusal_fails_the_connect() {
    let a = Member::bind().await;
    let mut config = config(&[&a]);
    config.auth = vec![("digest".to_owned(), b"u:p".to_vec())];
    let mut burst = Burst::default();
    let synced = burst.sync("/");
    let connecting = tokio::spawn(Client::connect(config, burst));
    let mut peer = a.accept().await;
    peer.connect_request().await;
    let (auth, sync) = (peer.request().await, peer.request().await);
    assert_eq!((auth.xid, sync.opcode), (xid::AUTH, opcode::SYNC));
    let mut r = Reader::new(&auth.body);
    assert_eq!(r.int().unwrap(), 0);
    assert_eq!(r.string().unwrap(), "digest");
    assert_eq!(r.string().unwrap(), "u:p");
    peer.accept_session(0x42, LONG).await;
    peer.reply(xid::AUTH, 0, -115, &[]).await;
    // No other member, and no other session: the refusal is the answer.
    let err = connecting.await.unwrap().err().unwrap();
    let ConnectError::AuthFailed { member, why } = err else {
        panic!("{err}")
    };
    assert_eq!(member, a.address);
    assert!(why.contains("digest"), "{why}");
    assert!(synced.await.is_err());
}

/// The answers to the credentials come first, whatever was written
/// behind them: the session is connected once they are in.
#[tokio::test]
async fn accepted_credentials_are_answered_before_the_connect_returns() {
    let a = Member::bind().await;
    let mut config = config(&[&a]);
    config.auth = vec![("digest".to_owned(), b"u:p".to_vec())];
    let mut burst = Burst::default();
    let synced = burst.sync("/");
    let connecting = tokio::spawn(Client::connect(config, burst));
    let mut peer = a.accept().await;
    peer.connect_request().await;
    let (_, sync) = (peer.request().await, peer.request().await);
    peer.accept_session(0x42, LONG).await;
    peer.reply(xid::AUTH, 0, 0, &[]).await;
    let client = connecting.await.unwrap().unwrap();
    assert_eq!(client.link().borrow().state, State::Connected);
    let mut w = Writer::default();
    w.string("/app");
    peer.reply(sync.xid, 0x11, 0, &w.bytes).await;
    synced.await.unwrap();
}

#[tokio::test]
async fn credentials_added_to_a_live_session_are_answered_apart_and_sent_again() {
    let (a, b) = (Member::bind().await, Member::bind().await);
    let (client, mut peer, b) = session_on_either(&a, &b).await;
    let synced = client.call(|b| b.sync("/q"));
    let added = client.call(|b| b.add_auth("digest", b"u:p"));
    let sync = peer.request().await;
    let auth = peer.request().await;
    assert_eq!((auth.xid, auth.opcode), (xid::AUTH, opcode::AUTH));
    // The server answers an auth as it reads it, ahead of the sync.
    peer.reply(xid::AUTH, 0, 0, &[]).await;
    added.await.unwrap();
    let mut w = Writer::default();
    w.string("/app/q");
    peer.reply(sync.xid, 0x11, 0, &w.bytes).await;
    synced.await.unwrap();
    drop(peer);
    reaches(&client, State::Disconnected).await;

    let mut peer = b.accept().await;
    peer.connect_request().await;
    let again = peer.request().await;
    assert_eq!((again.xid, again.opcode), (xid::AUTH, opcode::AUTH));
    let mut r = Reader::new(&again.body);
    assert_eq!(r.int().unwrap(), 0);
    assert_eq!(r.string().unwrap(), "digest");
    assert_eq!(r.string().unwrap(), "u:p");
    peer.accept_session(0x42, LONG).await;
    peer.reply(xid::AUTH, 0, 0, &[]).await;
    reaches(&client, State::Connected).await;
    // A refusal ends the session, and says so to whoever added them.
    let refused = client.call(|b| b.add_auth("digest", b"v:q"));
    assert_eq!(peer.request().await.opcode, opcode::AUTH);
    peer.reply(xid::AUTH, 0, -115, &[]).await;
    assert_eq!(refused.await, Err(Error::AuthFailed));
    reaches(&client, State::AuthFailed).await;
}

#[tokio::test]
async fn a_sasl_refusal_or_no_member_at_all_fails_the_connect_and_says_which() {
    let a = Member::bind().await;
    let mut refused = config(&[&a]);
    refused.sasl = Some(Arc::new(|_: &str| Ok(Box::new(OneRound) as _)));
    let connecting = tokio::spawn(Client::connect(refused, Burst::default()));
    let mut peer = a.accept().await;
    peer.connect_request().await;
    peer.accept_session(0x42, LONG).await;
    let sasl = peer.request().await;
    peer.reply(sasl.xid, 0, -115, &[]).await;
    let err = connecting.await.unwrap().err().unwrap();
    assert!(matches!(err, ConnectError::AuthFailed { .. }), "{err}");

    let gone = Member::bind().await;
    let mut nobody = config(&[&gone]);
    drop(gone.listener);
    nobody.connect_timeout = Duration::from_millis(300);
    let err = Client::connect(nobody, Burst::default())
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ConnectError::Unreachable(_)), "{err}");
}
