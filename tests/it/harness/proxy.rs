//! A TCP proxy between zklock and one ZooKeeper server that injects network faults.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::frames::{FrameSplitter, parse_request, reply_xid};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
// Pumps wake this often to notice that their connection was closed under them.
const POLL: Duration = Duration::from_millis(100);
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
// Upper bound on waiting for the server's reply to the create we cut after.
const CUT_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The request a one-shot cut follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CutAfter {
    /// An EPHEMERAL_SEQUENTIAL create.
    Create,
    Delete,
    /// closeSession.
    Close,
    /// The server's answer to a connection's handshake (ConnectResponse).
    Handshake,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// A network partition: sockets stay open, nothing arrives either way.
    ///
    /// What arrives is read and discarded rather than left unread: with nothing read,
    /// the kernel would buffer it and deliver it when the mode changes, which is not a
    /// partition; and senders would eventually block, which small ZooKeeper traffic
    /// never does in a real partition. A stream with discarded bytes can never be
    /// forwarded again without feeding the peer garbage, so leaving Blackhole resets
    /// every connection that lost data (a real network would deliver it late or break
    /// the connection; clients see the latter). Closes seen during Blackhole are not
    /// passed on either. New connections are accepted and held silent.
    Blackhole,
    /// Reset every connection (RST), and reset new ones as soon as they are accepted.
    Reset,
}

/// Proxies a free loopback port to `upstream`. Dropping it stops its threads and
/// closes every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    upstream: SocketAddr,
    // Pumps hold the read lock from checking the mode to finishing a write, so once
    // set_mode returns, no byte crosses under the old mode.
    mode: RwLock<Mode>,
    armed_cut: Mutex<Option<(CutAfter, Mode)>>,
    conns: Mutex<Vec<Weak<Conn>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stopping: AtomicBool,
    cuts: AtomicUsize,
    connections: AtomicUsize,
    /// The op code of every request clients sent after their handshake, in order.
    requests: Mutex<Vec<i32>>,
    /// Answers to node reads (exists, getData) passed on to the clients.
    node_reads_answered: AtomicUsize,
}

struct Conn {
    client: TcpStream,
    server: Option<TcpStream>,
    dead: AtomicBool,
    /// Bytes were discarded, or there never was an upstream: it can never pass again.
    poisoned: AtomicBool,
    /// Set before the create is forwarded: (create xid, mode after the cut, start).
    cut: Mutex<Option<(i32, Mode, Instant)>>,
    /// The xids of node reads (exists, getData) sent, not yet answered.
    node_reads: Mutex<Vec<i32>>,
}

impl FaultProxy {
    pub fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy port");
        let addr = listener.local_addr().expect("proxy addr");
        let shared = Arc::new(Shared {
            upstream,
            mode: RwLock::new(Mode::Pass),
            armed_cut: Mutex::new(None),
            conns: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            stopping: AtomicBool::new(false),
            cuts: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            node_reads_answered: AtomicUsize::new(0),
        });
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("proxy-accept:{}", addr.port()))
                .spawn(move || accept_loop(&shared, listener))
                .expect("spawn proxy acceptor")
        };
        FaultProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `127.0.0.1:PORT` of the proxy.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set_mode(&self, mode: Mode) {
        self.shared.set_mode(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.shared.mode.read().expect("mode lock")
    }

    /// One-shot: on the next EPHEMERAL_SEQUENTIAL create forwarded in Pass mode, relay
    /// nothing more to that client, wait until the server has answered the create (so the
    /// node exists: a request from a closed connection may be dropped unprocessed),
    /// switch the proxy to `then`, close both sides, and count a cut.
    pub fn cut_after_next_create(&self, then: Mode) {
        *self.shared.armed_cut.lock().expect("cut lock") = Some((CutAfter::Create, then));
    }

    /// The same on the next delete: the delete reaches the server, its answer and
    /// whatever the client sent after it in the same burst do not.
    pub fn cut_after_next_delete(&self, then: Mode) {
        *self.shared.armed_cut.lock().expect("cut lock") = Some((CutAfter::Delete, then));
    }

    /// The same on the next closeSession: the session ends at the server,
    /// the client hears nothing of it.
    pub fn cut_after_next_close(&self, then: Mode) {
        *self.shared.armed_cut.lock().expect("cut lock") = Some((CutAfter::Close, then));
    }

    /// One-shot: the next connection's handshake answer (the session established or
    /// re-established) reaches the client, then the proxy closes that connection,
    /// switches to `then` and counts a cut: the client's next request gets no answer.
    pub fn cut_after_next_handshake(&self, then: Mode) {
        *self.shared.armed_cut.lock().expect("cut lock") = Some((CutAfter::Handshake, then));
    }

    /// Cuts done so far; when it increments, the node exists and the mode is `then`.
    pub fn cuts(&self) -> usize {
        self.shared.cuts.load(Ordering::SeqCst)
    }

    /// Connections accepted so far, in any mode.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The op codes (ZooDefs.OpCode) of the requests clients sent so far, after
    /// their handshakes, in the order they arrived.
    pub fn requests(&self) -> Vec<i32> {
        self.shared.requests.lock().expect("requests lock").clone()
    }

    /// Waits until a client behind the proxy has read a node (exists or
    /// getData) and the proxy has passed the answer on: a waiter reads the
    /// node ahead, to watch it, only once its first burst, and the
    /// handshake before it, were answered. Its node on the server says
    /// less: it exists as soon as the server read the burst, while the
    /// handshake's answer may still be on its way. The read's own answer
    /// counts too: a waiter cut off before it has not looked at the queue
    /// yet, and waits past its `--timeout` until the connection is given up.
    pub fn wait_watching(&self, timeout: Duration) {
        super::wait_until(timeout, "a client behind the proxy watching a node", || {
            self.shared.node_reads_answered.load(Ordering::SeqCst) > 0
        });
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wakes the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for conn in self.shared.live_conns() {
            conn.close(true);
        }
        let threads = std::mem::take(&mut *self.shared.threads.lock().expect("threads lock"));
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn live_conns(&self) -> Vec<Arc<Conn>> {
        let mut conns = self.conns.lock().expect("conns lock");
        conns.retain(|c| c.strong_count() > 0);
        conns.iter().filter_map(Weak::upgrade).collect()
    }

    fn set_mode(&self, new: Mode) {
        let mut mode = self.mode.write().expect("mode lock");
        *mode = new;
        for conn in self.live_conns() {
            match new {
                Mode::Reset => conn.close(true),
                Mode::Pass if conn.poisoned.load(Ordering::SeqCst) => conn.close(true),
                _ => {}
            }
        }
    }

    fn spawn(&self, name: String, f: impl FnOnce() + Send + 'static) {
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .expect("spawn proxy pump");
        let mut threads = self.threads.lock().expect("threads lock");
        threads.retain(|t| !t.is_finished());
        threads.push(handle);
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    for client in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        shared.connections.fetch_add(1, Ordering::SeqCst);
        // Held while connecting upstream and registering, so that a concurrent set_mode
        // sees this connection.
        let mode = shared.mode.read().expect("mode lock");
        let server = match *mode {
            Mode::Reset => {
                set_linger_zero(&client);
                continue;
            }
            Mode::Blackhole => None,
            Mode::Pass => match TcpStream::connect_timeout(&shared.upstream, CONNECT_TIMEOUT) {
                Ok(server) => Some(server),
                // The server is down: so is the proxied connection.
                Err(_) => {
                    set_linger_zero(&client);
                    continue;
                }
            },
        };
        let conn = Arc::new(Conn {
            poisoned: AtomicBool::new(server.is_none()),
            client,
            server,
            dead: AtomicBool::new(false),
            cut: Mutex::new(None),
            node_reads: Mutex::new(Vec::new()),
        });
        for s in std::iter::once(&conn.client).chain(conn.server.as_ref()) {
            let _ = s.set_nodelay(true);
            let _ = s.set_read_timeout(Some(POLL));
            let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
        }
        shared
            .conns
            .lock()
            .expect("conns lock")
            .push(Arc::downgrade(&conn));
        drop(mode);
        let port = conn.client.peer_addr().map(|a| a.port()).unwrap_or(0);
        let (s, c) = (shared.clone(), conn.clone());
        shared.spawn(format!("proxy-c2s:{port}"), move || {
            client_to_server(&s, &c)
        });
        if conn.server.is_some() {
            let (s, c) = (shared.clone(), conn);
            shared.spawn(format!("proxy-s2c:{port}"), move || {
                server_to_client(&s, &c)
            });
        }
    }
}

enum Got {
    Data(usize),
    Idle,
    Closed { error: bool },
}

fn read_some(mut stream: &TcpStream, buf: &mut [u8]) -> Got {
    match stream.read(buf) {
        Ok(0) => Got::Closed { error: false },
        Ok(n) => Got::Data(n),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Got::Idle
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Got::Idle,
        Err(_) => Got::Closed { error: true },
    }
}

/// End of stream (or a socket error) on one side, outside a cut.
fn on_closed(shared: &Shared, conn: &Conn, error: bool) {
    if *shared.mode.read().expect("mode lock") == Mode::Blackhole {
        // A partition hides the close from the other side.
        conn.poisoned.store(true, Ordering::SeqCst);
    } else {
        conn.close(error);
    }
}

fn client_to_server(shared: &Shared, conn: &Conn) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut frames = FrameSplitter::new();
    loop {
        if conn.dead.load(Ordering::SeqCst) {
            return;
        }
        let n = match read_some(&conn.client, &mut buf) {
            Got::Data(n) => n,
            Got::Idle => continue,
            Got::Closed { .. } if conn.dead.load(Ordering::SeqCst) => return,
            // The server side finishes the cut; closing now could make the server drop
            // the create unprocessed.
            Got::Closed { .. } if conn.cut.lock().expect("cut lock").is_some() => return,
            Got::Closed { error } => return on_closed(shared, conn, error),
        };
        let chunk = &buf[..n];
        // Parsed whatever the mode, to stay in step with the frame boundaries.
        let requests: Vec<_> = frames
            .push(chunk)
            .into_iter()
            .filter_map(|f| Some((f.end, parse_request(&f.body, f.first)?)))
            .collect();
        (shared.requests.lock().expect("requests lock"))
            .extend(requests.iter().filter_map(|(_, request)| request.op()));
        (conn.node_reads.lock().expect("node reads lock")).extend(
            requests
                .iter()
                .filter_map(|(_, request)| request.node_read_xid()),
        );
        let mode = shared.mode.read().expect("mode lock");
        if conn.cut.lock().expect("cut lock").is_some() {
            continue;
        }
        let Some(mut server) = conn.server.as_ref().filter(|_| *mode == Mode::Pass) else {
            if *mode == Mode::Pass {
                drop(mode);
                conn.close(true);
                return;
            }
            conn.poisoned.store(true, Ordering::SeqCst);
            continue;
        };
        let mut forward = chunk;
        let mut armed = shared.armed_cut.lock().expect("cut lock");
        let target = armed.and_then(|(after, _)| {
            requests.iter().find_map(|(end, request)| {
                let xid = match after {
                    CutAfter::Create => request.ephemeral_sequential_create_xid(),
                    CutAfter::Delete => request.delete_xid(),
                    CutAfter::Close => request.close_xid(),
                    CutAfter::Handshake => None,
                }?;
                Some((*end, xid))
            })
        });
        if let Some((end, xid)) = target
            && let Some((_, then)) = armed.take()
        {
            // Before forwarding, so that the reply cannot slip through to the client.
            *conn.cut.lock().expect("cut lock") = Some((xid, then, Instant::now()));
            forward = &chunk[..end];
        }
        drop(armed);
        if server.write_all(forward).is_err() {
            drop(mode);
            conn.close(true);
            return;
        }
    }
}

fn server_to_client(shared: &Shared, conn: &Conn) {
    let server = conn.server.as_ref().expect("upstream");
    let mut buf = vec![0u8; 64 * 1024];
    let mut frames = FrameSplitter::new();
    loop {
        if conn.dead.load(Ordering::SeqCst) {
            return;
        }
        let read = read_some(server, &mut buf);
        let n = match read {
            Got::Closed { .. } if conn.dead.load(Ordering::SeqCst) => return,
            Got::Closed { error } if conn.cut.lock().expect("cut lock").is_none() => {
                return on_closed(shared, conn, error);
            }
            Got::Data(n) => n,
            _ => 0,
        };
        let replies = frames.push(&buf[..n]);
        let cut = *conn.cut.lock().expect("cut lock");
        if let Some((xid, then, started)) = cut {
            // The answers ahead of the cut request's (the handshake's, when
            // the request rode in the session's first write) still reach the
            // client: only the cut request's answer and what follows are lost.
            let ahead = replies
                .iter()
                .take_while(|f| reply_xid(&f.body, f.first) != Some(xid));
            for frame in ahead {
                let mut bytes = (frame.body.len() as i32).to_be_bytes().to_vec();
                bytes.extend_from_slice(&frame.body);
                let _ = (&conn.client).write_all(&bytes);
            }
            let answered = replies
                .iter()
                .any(|f| reply_xid(&f.body, f.first) == Some(xid));
            let gone = matches!(read, Got::Closed { .. });
            if answered || gone || started.elapsed() > CUT_REPLY_TIMEOUT {
                // Mode and count first: the client reconnects, and the test goes on, as
                // soon as it sees the close.
                shared.set_mode(then);
                shared.cuts.fetch_add(1, Ordering::SeqCst);
                conn.close(false);
                return;
            }
            continue;
        }
        if n == 0 {
            continue;
        }
        let mode = shared.mode.read().expect("mode lock");
        match *mode {
            Mode::Pass => {
                let handshake = replies.iter().find(|f| f.first).map(|f| f.end);
                let mut armed = shared.armed_cut.lock().expect("cut lock");
                let cut = match (handshake, *armed) {
                    (Some(end), Some((CutAfter::Handshake, then))) => {
                        *armed = None;
                        Some((end, then))
                    }
                    _ => None,
                };
                drop(armed);
                let forward = cut.map_or(n, |(end, _)| end);
                if (&conn.client).write_all(&buf[..forward]).is_err() {
                    drop(mode);
                    conn.close(true);
                    return;
                }
                let mut reads = conn.node_reads.lock().expect("node reads lock");
                for reply in replies.iter().filter(|f| f.end <= forward) {
                    let xid = reply_xid(&reply.body, reply.first);
                    if let Some(at) = reads.iter().position(|&read| Some(read) == xid) {
                        reads.remove(at);
                        shared.node_reads_answered.fetch_add(1, Ordering::SeqCst);
                    }
                }
                drop(reads);
                if let Some((_, then)) = cut {
                    drop(mode);
                    // FIN, not RST: an RST could make the client's kernel drop the
                    // handshake answer before the client read it.
                    conn.close(false);
                    shared.set_mode(then);
                    shared.cuts.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
            _ => conn.poisoned.store(true, Ordering::SeqCst),
        }
    }
}

impl Conn {
    /// Closes both sides: FIN, or RST when `reset`. Pumps notice within POLL.
    fn close(&self, reset_: bool) {
        if self.dead.swap(true, Ordering::SeqCst) {
            return;
        }
        for s in std::iter::once(&self.client).chain(self.server.as_ref()) {
            if reset_ {
                // The RST goes out when the last handle closes, i.e. when the pumps
                // drop the connection; reading is shut now to wake them.
                set_linger_zero(s);
                let _ = s.shutdown(Shutdown::Read);
            } else {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

/// With a zero linger time, closing the socket sends RST instead of FIN.
fn set_linger_zero(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the fd is a live socket owned by `stream`, and the option value points to
    // a properly sized `linger` that outlives the call.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}
