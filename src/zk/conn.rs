//! One connection to one server: dialling it (TCP_NODELAY, TLS), framing
//! packets, the handshake and the SASL exchange that open every connection.

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::zk::jute::{Reader, Writer};
use crate::zk::ops::Request;
use crate::zk::records::{ConnectRequest, ConnectResponse, Error, ReplyHeader, xid};
use crate::zk::sasl::{SaslMechanism, SaslStep};

/// A byte stream to a server: TCP, or TLS over TCP.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// A connection, with the bytes read but not yet taken as packets.
pub struct Conn {
    stream: Box<dyn Stream>,
    buf: Vec<u8>,
    /// The largest packet accepted: a longer one is refused from its
    /// length, before any of it is read.
    max_packet: usize,
}

impl Conn {
    pub fn new(stream: Box<dyn Stream>, max_packet: usize) -> Conn {
        Conn {
            stream,
            buf: Vec::new(),
            max_packet,
        }
    }

    /// The next packet (without its length). Cancel-safe: bytes read
    /// before a cancellation stay in the buffer.
    pub async fn packet(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes")) as usize;
                if len > self.max_packet {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "a packet of {len} bytes, over the limit of {} (--jute-maxbuffer)",
                            self.max_packet
                        ),
                    ));
                }
                if self.buf.len() >= 4 + len {
                    let packet = self.buf[4..4 + len].to_vec();
                    self.buf.drain(..4 + len);
                    return Ok(packet);
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = poll_fn(|cx| {
                let mut read = ReadBuf::new(&mut chunk);
                Pin::new(&mut *self.stream)
                    .poll_read(cx, &mut read)
                    .map_ok(|()| read.filled().len())
            })
            .await?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Writes `bytes` whole (one write when the socket takes it) and flushes.
    pub async fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let n = poll_fn(|cx| Pin::new(&mut *self.stream).poll_write(cx, bytes)).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[n..];
        }
        poll_fn(|cx| Pin::new(&mut *self.stream).poll_flush(cx)).await
    }
}

/// Connects to `host` (`name:port`), TCP_NODELAY set: every packet is a
/// request or an answer someone waits for. Over TLS when `tls` is given.
pub async fn dial(
    host: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
    timeout: Duration,
    max_packet: usize,
) -> io::Result<Conn> {
    let attempt = async {
        let tcp = TcpStream::connect(host).await?;
        tcp.set_nodelay(true)?;
        let Some(config) = tls else {
            return Ok(Conn::new(Box::new(tcp), max_packet));
        };
        let name = server_name(host)?;
        let stream = tokio_rustls::TlsConnector::from(Arc::clone(config))
            .connect(name, tcp)
            .await?;
        Ok(Conn::new(Box::new(stream), max_packet))
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()))
}

/// The name a server's certificate is checked against: `host` without
/// its port (and without the brackets of an IPv6 address).
fn server_name(host: &str) -> io::Result<rustls::pki_types::ServerName<'static>> {
    let name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    let name = name.trim_start_matches('[').trim_end_matches(']');
    rustls::pki_types::ServerName::try_from(name.to_owned())
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidInput, err))
}

/// Why a connection attempt failed.
#[derive(Debug)]
pub enum Refused {
    /// The connection failed or broke; `written` when requests behind the
    /// handshake may have reached the server.
    Io { err: io::Error, written: bool },
    /// The session asked for has expired (a timeout of 0 in the answer).
    Expired,
    /// SASL failed: the server refused, or the mechanism did.
    AuthFailed(String),
}

impl Refused {
    fn io(written: bool) -> impl FnOnce(io::Error) -> Refused {
        move |err| Refused::Io { err, written }
    }
}

/// Writes the ConnectRequest with `behind` in the same write, and reads
/// the server's answer (docs/design.md, "The protocol layer").
pub async fn handshake(
    conn: &mut Conn,
    request: &ConnectRequest,
    behind: &[u8],
) -> Result<ConnectResponse, Refused> {
    let mut w = Writer::default();
    request.write(&mut w);
    let mut out = (w.bytes.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&w.bytes);
    out.extend_from_slice(behind);
    let written = !behind.is_empty();
    conn.write(&out).await.map_err(Refused::io(written))?;
    let packet = conn.packet().await.map_err(Refused::io(written))?;
    let response = ConnectResponse::read(&mut Reader::new(&packet)).map_err(invalid(written))?;
    if response.timeout_ms <= 0 {
        return Err(Refused::Expired);
    }
    Ok(response)
}

fn invalid(written: bool) -> impl FnOnce(crate::zk::jute::Malformed) -> Refused {
    move |err| Refused::Io {
        err: io::Error::new(io::ErrorKind::InvalidData, err),
        written,
    }
}

/// One step of the mechanism on a thread of its own: GSSAPI's may ask a
/// KDC, and the session's thread must go on serving its timers meanwhile
/// (the attempt's timeout bounds the wait).
async fn off_thread(
    mut mechanism: Box<dyn SaslMechanism + Send>,
    challenge: Option<Vec<u8>>,
) -> Result<(Box<dyn SaslMechanism + Send>, anyhow::Result<SaslStep>), Refused> {
    tokio::task::spawn_blocking(move || {
        let step = mechanism.step(challenge.as_deref());
        (mechanism, step)
    })
    .await
    .map_err(|err| Refused::AuthFailed(format!("the SASL mechanism failed: {err}")))
}

/// Reads the answers to `credentials`, written behind the handshake: a
/// server answers each auth packet as it reads it, so they come before the
/// answer of anything written behind them. A refusal names the scheme.
pub async fn credentials_accepted(
    conn: &mut Conn,
    credentials: &[(String, Vec<u8>)],
) -> Result<(), Refused> {
    for (scheme, _) in credentials {
        let packet = conn.packet().await.map_err(Refused::io(true))?;
        let header = ReplyHeader::read(&mut Reader::new(&packet)).map_err(invalid(true))?;
        if header.xid != xid::AUTH {
            let err = io::Error::new(io::ErrorKind::InvalidData, "an answer ahead of the auth's");
            return Err(Refused::Io { err, written: true });
        }
        if header.err != 0 {
            let why = Error::from_i32(header.err);
            return Err(Refused::AuthFailed(format!(
                "the server refused the {scheme} credentials ({why})"
            )));
        }
    }
    Ok(())
}

/// The SASL exchange: each token the mechanism makes, sent alone and
/// answered before the next, until the mechanism is done. Its requests
/// take their xids from `xid`.
pub async fn authenticate(
    conn: &mut Conn,
    mut mechanism: Box<dyn SaslMechanism + Send>,
    xid: &mut i32,
) -> Result<(), Refused> {
    let mut challenge: Option<Vec<u8>> = None;
    loop {
        let (back, step) = off_thread(mechanism, challenge.take()).await?;
        mechanism = back;
        let token = match step.map_err(|err| Refused::AuthFailed(format!("{err:#}")))? {
            SaslStep::Done => return Ok(()),
            SaslStep::Send(token) => token,
        };
        *xid += 1;
        let request = Request::Sasl { token };
        let mut out = Vec::new();
        request.write_packet(*xid, "", &mut out);
        conn.write(&out).await.map_err(Refused::io(false))?;
        let packet = conn.packet().await.map_err(Refused::io(false))?;
        let mut r = Reader::new(&packet);
        let header = ReplyHeader::read(&mut r).map_err(invalid(false))?;
        if header.xid != *xid {
            let err = io::Error::new(io::ErrorKind::InvalidData, "SASL answer out of order");
            return Err(Refused::Io {
                err,
                written: false,
            });
        }
        if header.err != 0 {
            let why = Error::from_i32(header.err);
            return Err(Refused::AuthFailed(format!(
                "the server refused the SASL exchange ({why})"
            )));
        }
        match request.read_response("", &mut r).map_err(invalid(false))? {
            crate::zk::answers::Response::Sasl(token) => challenge = Some(token),
            _ => unreachable!("a SASL request reads a SASL answer"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_is_checked_against_the_host_without_its_port() {
        let name = |host| server_name(host).unwrap().to_str().into_owned();
        assert_eq!(name("zk1.example:2281"), "zk1.example");
        assert_eq!(name("127.0.0.1:2281"), "127.0.0.1");
        assert_eq!(name("[::1]:2281"), "::1");
    }
}
