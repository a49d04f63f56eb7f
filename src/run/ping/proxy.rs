//! An http:// ping through an HTTP proxy (docs/design.md, "Health-check
//! pings"): a plain request in absolute form, as curl sends it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ureq::http::Uri;
use ureq::http::uri::Scheme;
use ureq::{Proxy, ProxyProtocol};

/// Whether an http:// ping goes through `proxy` as a plain request in
/// absolute form (`GET http://host/path`), as curl sends it. ureq would
/// tunnel it with CONNECT, which proxies refuse for ports other than 443
/// (squid's default configuration). https:// keeps ureq's CONNECT, and
/// other proxies (SOCKS, an https:// proxy) and NO_PROXY hosts ureq's way.
pub(super) fn forwards(proxy: &Proxy, uri: &Uri) -> bool {
    uri.scheme() == Some(&Scheme::HTTP)
        && proxy.protocol() == ProxyProtocol::Http
        && !proxy.is_no_proxy(uri)
}

/// `GET http://host/path HTTP/1.1` to `proxy`, within `timeout`, with the
/// errors ureq would give (connection, timeout, status).
pub(super) fn get_through(proxy: &Proxy, uri: &Uri, timeout: Duration) -> Result<(), ureq::Error> {
    let deadline = Instant::now() + timeout;
    let left = || match deadline.saturating_duration_since(Instant::now()) {
        Duration::ZERO => Err(ureq::Error::Timeout(ureq::Timeout::Global)),
        left => Ok(left),
    };
    let proxy_host = proxy.host().trim_start_matches('[').trim_end_matches(']');
    let addrs = resolve(proxy_host, proxy.port(), left()?)?;
    let mut connected = Err(ureq::Error::ConnectionFailed);
    for addr in &addrs {
        connected = TcpStream::connect_timeout(addr, left()?).map_err(timed_out);
        if connected.is_ok() {
            break;
        }
    }
    let mut stream = connected?;
    let authority = uri.authority().map_or("", |a| a.as_str());
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((userinfo, host)) => (Some(userinfo), host),
        None => (None, authority),
    };
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = format!("GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n");
    if let Some(userinfo) = userinfo {
        let credentials = BASE64.encode(userinfo);
        request += &format!("Authorization: Basic {credentials}\r\n");
    }
    if proxy.username().is_some() || proxy.password().is_some() {
        let (user, password) = (proxy.username(), proxy.password());
        let credentials = BASE64.encode(format!(
            "{}:{}",
            user.unwrap_or_default(),
            password.unwrap_or_default()
        ));
        request += &format!("Proxy-Authorization: Basic {credentials}\r\n");
    }
    request += "Connection: close\r\n\r\n";
    stream.set_write_timeout(Some(left()?))?;
    stream.write_all(request.as_bytes()).map_err(timed_out)?;
    stream.set_read_timeout(Some(left()?))?;
    let mut status = String::new();
    BufReader::new(stream.take(1024))
        .read_line(&mut status)
        .map_err(timed_out)?;
    // `HTTP/1.1 200 OK`
    let code = (status.split(' ').nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .filter(|_| status.starts_with("HTTP/"))
        .ok_or_else(|| {
            ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the proxy's answer is not HTTP",
            ))
        })?;
    match code {
        200..=299 => Ok(()),
        code => Err(ureq::Error::StatusCode(code)),
    }
}

/// The proxy's addresses, looked up on a thread so that a hanging lookup
/// cannot hold the ping past its bound.
fn resolve(host: &str, port: u16, timeout: Duration) -> Result<Vec<SocketAddr>, ureq::Error> {
    let (sender, receiver) = mpsc::channel();
    let host = host.to_owned();
    std::thread::Builder::new()
        .name("zklock-ping-dns".into())
        .spawn(move || {
            let _ = sender.send((host.as_str(), port).to_socket_addrs().map(Vec::from_iter));
        })?;
    match receiver.recv_timeout(timeout) {
        Ok(Ok(addrs)) if !addrs.is_empty() => Ok(addrs),
        Ok(_) => Err(ureq::Error::HostNotFound),
        Err(_) => Err(ureq::Error::Timeout(ureq::Timeout::Global)),
    }
}

/// A socket timeout as ureq reports its own.
fn timed_out(err: std::io::Error) -> ureq::Error {
    match err.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            ureq::Error::Timeout(ureq::Timeout::Global)
        }
        _ => ureq::Error::Io(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_goes_through_an_http_proxy_in_absolute_form() {
        let http = Proxy::new("http://proxy:3128").unwrap();
        let socks = Proxy::new("socks5://proxy:1080").unwrap();
        let uri = |url: &str| url.parse::<Uri>().unwrap();
        assert!(forwards(&http, &uri("http://hc/ping/u")));
        assert!(!forwards(&http, &uri("https://hc/ping/u")));
        assert!(!forwards(&socks, &uri("http://hc/ping/u")));
    }
}
