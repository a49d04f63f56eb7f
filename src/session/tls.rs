//! TLS: the files given, read and checked once, as one value. The client
//! retries a failed handshake like a refused connection, so when connecting
//! takes too long zklock shakes hands with one server itself
//! ([`diagnose`]) to name what is wrong with the certificates.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError, Error as TlsError, InconsistentKeys};

use crate::exit::{Exit, Failure};
use crate::session::secret::Secret;
use crate::session::{host_name, servers};

/// TLS to the ensemble: the CA that verifies the servers and, for mutual
/// TLS, our own certificate.
#[derive(Debug, Clone)]
pub struct Tls {
    pub ca_file: PathBuf,
    ca: String,
    pub identity: Option<Identity>,
}

/// A client certificate and its key (PEM).
#[derive(Debug, Clone)]
pub struct Identity {
    pub cert_file: PathBuf,
    cert: String,
    key: Secret,
}

impl Tls {
    /// Reads and checks the files given: no TLS without a CA; a
    /// certificate and its key come together.
    pub fn read(
        ca: Option<PathBuf>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<Option<Tls>, String> {
        let Some(ca_file) = ca else {
            if cert.is_some() || key.is_some() {
                return Err(
                    "--tls-cert and --tls-key need --tls-ca (the CA that signed the servers)"
                        .into(),
                );
            }
            return Ok(None);
        };
        let read = |what: &str, path: &Path| {
            std::fs::read_to_string(path)
                .map_err(|err| format!("cannot read the TLS {what} {}: {err}", path.display()))
        };
        let ca = read("CA file", &ca_file)?;
        let file = format!("the TLS CA file {}", ca_file.display());
        holds(&file, &ca, "a certificate", is_cert)?;
        let identity = match (cert, key) {
            (None, None) => None,
            (Some(cert_file), Some(key_file)) => {
                let (cert, key) = (read("certificate", &cert_file)?, read("key", &key_file)?);
                check_identity(&cert, &cert_file, &key, &key_file)?;
                Some(Identity {
                    cert_file,
                    cert,
                    key: Secret::new(key),
                })
            }
            (Some(_), None) => {
                return Err("--tls-cert needs --tls-key (the certificate's private key)".into());
            }
            (None, Some(_)) => return Err("--tls-key needs --tls-cert".into()),
        };
        Ok(Some(Tls {
            ca_file,
            ca,
            identity,
        }))
    }
}

/// Refuses `pem` (read from `file`, "the TLS key FILE" and the like)
/// unless it holds a section that `is` `wanted`, saying what it holds.
fn holds(file: &str, pem: &str, wanted: &str, is: fn(&SectionKind) -> bool) -> Result<(), String> {
    let kinds: Vec<SectionKind> = <(SectionKind, Vec<u8>)>::pem_slice_iter(pem.as_bytes())
        .map(|section| section.map(|(kind, _)| kind))
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{file} is not valid PEM"))?;
    match kinds.iter().any(is) {
        true => Ok(()),
        false => Err(wrong_kind(file, pem, &kinds, wanted)),
    }
}

fn is_cert(kind: &SectionKind) -> bool {
    *kind == SectionKind::Certificate
}

fn is_key(kind: &SectionKind) -> bool {
    matches!(
        kind,
        SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey
    )
}

/// Why a PEM file does not hold `wanted`, saying what it holds instead.
fn wrong_kind(file: &str, pem: &str, kinds: &[SectionKind], wanted: &str) -> String {
    let instead = if kinds.iter().any(is_key) {
        "a private key"
    } else if kinds.contains(&SectionKind::Certificate) {
        "a certificate"
    } else if kinds.contains(&SectionKind::Csr) {
        "a certificate signing request"
    } else if kinds.contains(&SectionKind::PublicKey) {
        "a public key"
    } else if pem.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        return format!(
            "{file} holds an encrypted private key; zklock needs it unencrypted \
             (openssl pkey -in FILE -out NEW_FILE)"
        );
    } else {
        return format!("{file} holds no PEM {}", wanted.trim_start_matches("a "));
    };
    format!("{file} holds {instead}, not {wanted}")
}

/// Refuses a client certificate and key that cannot make a TLS identity:
/// a file of the wrong kind (the two swapped, a key given twice) or a key
/// that is not the certificate's. Each would otherwise surface only as
/// handshakes failing until the connect timeout.
fn check_identity(
    cert_pem: &str,
    cert_file: &Path,
    key_pem: &str,
    key_file: &Path,
) -> Result<(), String> {
    let cert = format!("the TLS certificate {}", cert_file.display());
    let key = format!("the TLS key {}", key_file.display());
    holds(&cert, cert_pem, "a certificate", is_cert)?;
    holds(&key, key_pem, "a private key", is_key)?;
    // The same check rustls makes when the handshake needs our identity.
    let builder =
        rustls::ClientConfig::builder().with_root_certificates(rustls::RootCertStore::empty());
    match with_identity(builder, cert_pem, key_pem) {
        Ok(_) => Ok(()),
        Err(TlsError::InconsistentKeys(InconsistentKeys::KeyMismatch)) => Err(format!(
            "{key} is not the key of the certificate {}",
            cert_file.display()
        )),
        Err(TlsError::InvalidCertificate(err)) => Err(format!("{cert} cannot be used: {err}")),
        Err(err) => Err(format!("{key} cannot be used: {err}")),
    }
}

/// What is wrong with the TLS handshake with the first reachable server of
/// `connect_string`, if it is the certificates (77) or a server that does
/// not speak TLS on that port (69); None when the servers cannot be reached
/// or the handshake succeeds. Blocking, bounded by `timeout` per step.
pub fn diagnose(tls: &Tls, connect_string: &str, timeout: Duration) -> Option<Failure> {
    servers(connect_string).find_map(|host| diagnose_host(tls, host, timeout).ok().flatten())
}

/// Err: the host could not be reached (try the next).
fn diagnose_host(tls: &Tls, host: &str, timeout: Duration) -> Result<Option<Failure>, ()> {
    let name = host_name(host);
    let address = host.to_socket_addrs().map_err(drop)?.next().ok_or(())?;
    let mut socket = TcpStream::connect_timeout(&address, timeout).map_err(drop)?;
    socket.set_read_timeout(Some(timeout)).map_err(drop)?;
    socket.set_write_timeout(Some(timeout)).map_err(drop)?;
    let config = client_config(tls).map_err(drop)?;
    let server_name = ServerName::try_from(name.to_owned()).map_err(drop)?;
    let mut connection =
        rustls::ClientConnection::new(Arc::new(config), server_name).map_err(drop)?;
    let mut stream = rustls::Stream::new(&mut connection, &mut socket);
    // Under TLS 1.3 the client finishes its side of the handshake before
    // the server has checked our certificate; the server's verdict (an
    // alert) comes with the first read. A healthy server says nothing
    // until we send a request: the read times out.
    let mut byte = [0u8; 1];
    let result = stream.flush().and_then(|()| stream.read(&mut byte));
    let Err(err) = result else {
        return Ok(None);
    };
    if let Some(answer) = not_tls(connection.protocol_version().is_some(), &err) {
        let message = format!(
            "{host} does not speak TLS on that port: it {answer} \
             (a plain clientPort? TLS needs the server's secureClientPort)"
        );
        return Ok(Some(Failure::new(Exit::Unavailable, message)));
    }
    Ok(err
        .get_ref()
        .and_then(|e| e.downcast_ref::<TlsError>())
        .map(|tls_error| Failure::new(Exit::NoPermission, explain(tls_error, tls, host))))
}

/// How the server answered our ClientHello, if that shows it does not speak
/// TLS: it hung up before a ServerHello (ZooKeeper's plain port reads the
/// ClientHello as an oversized request and closes), or its first bytes are
/// not a TLS record header. A server that says nothing at all is not judged.
fn not_tls(hello_seen: bool, err: &std::io::Error) -> Option<&'static str> {
    use rustls::InvalidMessage::{InvalidContentType, UnknownProtocolVersion};
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset, UnexpectedEof};
    match err.get_ref().and_then(|e| e.downcast_ref::<TlsError>()) {
        Some(TlsError::InvalidMessage(InvalidContentType | UnknownProtocolVersion)) => {
            Some("answered our TLS handshake with something else")
        }
        None if !hello_seen
            && matches!(
                err.kind(),
                UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
            ) =>
        {
            Some("closed the connection on our TLS handshake")
        }
        _ => None,
    }
}

/// The rustls configuration `tls` makes: its CA as the only roots, its
/// identity (mutual TLS) if any. One for every TLS connection zklock makes.
pub fn client_config(tls: &Tls) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(tls.ca.as_bytes()).flatten() {
        let _ = roots.add(cert);
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    match &tls.identity {
        None => Ok(builder.with_no_client_auth()),
        Some(Identity { cert, key, .. }) => with_identity(builder, cert, key.expose()),
    }
}

fn with_identity(
    builder: rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>,
    cert_pem: &str,
    key_pem: &str,
) -> Result<rustls::ClientConfig, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes()).flatten();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|_| TlsError::General("the key is not valid PEM".into()))?;
    builder.with_client_auth_cert(chain.collect(), key)
}

/// One clause naming the problem, for "TLS with HOST: ...".
/// What went wrong with TLS at `member` (`name:port`), named as people
/// fix it.
fn explain(err: &TlsError, tls: &Tls, member: &str) -> String {
    let host = host_name(member);
    let what = match err {
        TlsError::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                "the server's certificate is not signed by the CA in {}",
                tls.ca_file.display()
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!("the server's certificate is not valid for the name {host}")
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's certificate has expired".to_owned()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet".to_owned()
            }
            CertificateError::Revoked => "the server's certificate is revoked".to_owned(),
            other => format!("the server's certificate is invalid ({other:?})"),
        },
        TlsError::AlertReceived(alert) => {
            match (tls.identity.as_ref().map(|i| i.cert_file.display()), alert) {
                (None, _) => format!(
                    "the server wants a client certificate (give --tls-cert and --tls-key); it said {alert:?}"
                ),
                (
                    Some(cert),
                    AlertDescription::UnknownCA
                    | AlertDescription::BadCertificate
                    | AlertDescription::CertificateUnknown
                    | AlertDescription::DecryptError,
                ) => format!(
                    "the server does not accept the client certificate {cert} (it said {alert:?})"
                ),
                (Some(cert), _) => format!(
                    "the server refused the handshake with the client certificate {cert} ({alert:?})"
                ),
            }
        }
        other => format!("the handshake failed ({other}); is this the server's secureClientPort?"),
    };
    format!("TLS with {member}: {what}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind as Io};

    #[test]
    fn a_hang_up_or_a_non_tls_answer_is_not_tls_silence_and_tls_errors_are() {
        let eof = Error::from(Io::UnexpectedEof);
        assert!(not_tls(false, &eof).is_some());
        assert!(not_tls(false, &Error::from(Io::ConnectionReset)).is_some());
        // A silent server, or one that hung up after its ServerHello.
        assert!(not_tls(false, &Error::from(Io::WouldBlock)).is_none());
        assert!(not_tls(true, &eof).is_none());
        // What rustls says of a ZooKeeper reply (a length) or of HTTP.
        let invalid = |m| Error::new(Io::InvalidData, TlsError::InvalidMessage(m));
        assert!(not_tls(false, &invalid(rustls::InvalidMessage::InvalidContentType)).is_some());
        assert!(
            not_tls(
                false,
                &invalid(rustls::InvalidMessage::UnknownProtocolVersion)
            )
            .is_some()
        );
        // A TLS alert is the certificates' business.
        let alert = TlsError::AlertReceived(AlertDescription::UnknownCA);
        assert!(not_tls(true, &Error::new(Io::InvalidData, alert)).is_none());
    }
}
