//! A scripted ZooKeeper server on a loopback listener: it reads what the
//! client writes and answers as each test says.

use std::time::Duration;

use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::zk::burst::Burst;
use crate::zk::client::{Client, Config, DEFAULT_MAX_PACKET, State};
use crate::zk::conn::Conn;
use crate::zk::jute::{Reader, Writer};
use crate::zk::records::{ConnectRequest, ConnectResponse, ReplyHeader, Stat};

/// A session timeout the scripted servers grant when a test is not about
/// pings: none is due before the test ends.
pub const LONG: Duration = Duration::from_secs(30);

pub struct Member {
    pub listener: TcpListener,
    pub address: String,
}

impl Member {
    pub async fn bind() -> Member {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        Member { listener, address }
    }

    pub async fn accept(&self) -> Peer {
        let (stream, _) = self.listener.accept().await.unwrap();
        Peer(Conn::new(Box::new(stream), DEFAULT_MAX_PACKET))
    }
}

/// A request as the server reads it.
#[derive(Debug)]
pub struct Received {
    pub xid: i32,
    pub opcode: i32,
    pub body: Vec<u8>,
}

pub struct Peer(Conn);

impl Peer {
    pub async fn connect_request(&mut self) -> ConnectRequest {
        let packet = self.0.packet().await.unwrap();
        ConnectRequest::read(&mut Reader::new(&packet)).unwrap()
    }

    pub async fn request(&mut self) -> Received {
        let packet = self.0.packet().await.unwrap();
        let mut r = Reader::new(&packet);
        let (xid, opcode) = (r.int().unwrap(), r.int().unwrap());
        let body = packet[8..].to_vec();
        Received { xid, opcode, body }
    }

    pub async fn accept_session(&mut self, session_id: i64, timeout: Duration) -> Instant {
        let mut w = Writer::default();
        ConnectResponse {
            timeout_ms: timeout.as_millis() as i32,
            session_id,
            password: vec![7; 16],
            read_only: false,
        }
        .write(&mut w);
        self.send(w).await
    }

    pub async fn reply(&mut self, xid: i32, zxid: i64, err: i32, body: &[u8]) {
        let mut w = Writer::default();
        ReplyHeader { xid, zxid, err }.write(&mut w);
        w.bytes.extend_from_slice(body);
        self.send(w).await;
    }

    /// Writes `bytes` as they are, framing included.
    pub async fn raw(&mut self, bytes: &[u8]) {
        self.0.write(bytes).await.unwrap();
    }

    async fn send(&mut self, w: Writer) -> Instant {
        let mut out = (w.bytes.len() as i32).to_be_bytes().to_vec();
        out.extend(w.bytes);
        self.0.write(&out).await.unwrap();
        Instant::now()
    }
}

pub fn config(hosts: &[&Member]) -> Config {
    Config {
        hosts: hosts.iter().map(|m| m.address.clone()).collect(),
        chroot: "/app".to_owned(),
        session_timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(30),
        attempt_timeout: Duration::from_secs(30),
        tls: None,
        auth: Vec::new(),
        sasl: None,
        max_packet: DEFAULT_MAX_PACKET,
    }
}

pub fn stat_bytes() -> Vec<u8> {
    let mut w = Writer::default();
    Stat::default().write(&mut w);
    w.bytes
}

/// Waits for the link to reach `state`.
pub async fn reaches(client: &Client, state: State) {
    let mut link = client.link();
    link.wait_for(|link| link.state == state).await.unwrap();
}

/// The connection the client makes to the first member of its own order
/// (it shuffles them), and the one it will try after it, of two.
pub async fn accept_either<'m>(a: &'m Member, b: &'m Member) -> (Peer, &'m Member) {
    tokio::select! {
        peer = a.accept() => (peer, b),
        peer = b.accept() => (peer, a),
    }
}

/// A session on the first member the client tries, of two; the other.
pub async fn session_on_either<'m>(a: &'m Member, b: &'m Member) -> (Client, Peer, &'m Member) {
    let connecting = tokio::spawn(Client::connect(config(&[a, b]), Burst::default()));
    let (mut peer, next) = accept_either(a, b).await;
    peer.connect_request().await;
    peer.accept_session(0x42, LONG).await;
    (connecting.await.unwrap().unwrap(), peer, next)
}

/// A session on `first`, the only member or the one the test expects.
pub async fn session_on_first_member(config: Config, first: &Member) -> (Client, Peer) {
    let connecting = tokio::spawn(Client::connect(config, Burst::default()));
    let mut peer = first.accept().await;
    peer.connect_request().await;
    peer.accept_session(0x42, LONG).await;
    (connecting.await.unwrap().unwrap(), peer)
}
