//! How long the client waits for a stalled server (docs/design.md,
//! "Session and lease rules"): a request unanswered is no reason to give a
//! connection up, 2T/3 of silence is; and a caller may give it up sooner.

use std::time::Duration;

use tokio::time::Instant;

use super::script::{Member, accept_either, config, reaches};
use crate::zk::burst::Burst;
use crate::zk::client::{Client, State};
use crate::zk::records::opcode;

const GRANTED: Duration = Duration::from_millis(1500);

#[tokio::test]
async fn a_request_unanswered_for_c_keeps_the_connection_until_two_thirds_of_silence() {
    let (a, b) = (Member::bind().await, Member::bind().await);
    let mut config = config(&[&a, &b]);
    config.attempt_timeout = Duration::from_millis(200);
    let connecting = tokio::spawn(Client::connect(config, Burst::default()));
    // The client tries the members in an order of its own.
    let (mut peer, next) = accept_either(&a, &b).await;
    peer.connect_request().await;
    let answered = peer.accept_session(0x42, GRANTED).await;
    let client = connecting.await.unwrap().unwrap();
    let stalled = client.call(|b| b.sync("/q"));
    assert_eq!(peer.request().await.opcode, opcode::SYNC);
    // Three times C without an answer: a stalled server, not a lost one.
    // The sleep is the stall under test.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(client.link().borrow().state, State::Connected);
    reaches(&client, State::Disconnected).await;
    assert!(
        answered.elapsed() >= GRANTED * 2 / 3,
        "{:?}",
        answered.elapsed()
    );
    drop(stalled);

    // The session resumed on the next member; a caller gives it up at once.
    let mut peer = next.accept().await;
    peer.connect_request().await;
    peer.accept_session(0x42, GRANTED).await;
    reaches(&client, State::Connected).await;
    let here = client.link().borrow().losses;
    // Only the connection named is given up: not a later one. The sleep
    // is the time a wrong drop would take to show.
    client.leave(here - 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(client.link().borrow().state, State::Connected);
    let left = Instant::now();
    client.leave(here);
    reaches(&client, State::Disconnected).await;
    assert!(
        left.elapsed() < Duration::from_millis(200),
        "{:?}",
        left.elapsed()
    );
    assert_eq!(client.link().borrow().losses, here + 1);
    drop(peer);
}
