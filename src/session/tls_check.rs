//! Telling a certificate problem from an unreachable ensemble. The client
//! library retries a failed TLS handshake like a refused connection and only
//! logs why, so after a connect attempt has taken too long zklock shakes
//! hands with one server itself, with the same CA and client identity, and
//! names what is wrong with the certificates.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError, Error as TlsError};

use crate::session::secret::Secret;

/// The PEM contents behind the TLS settings, for the check.
#[derive(Debug, Clone)]
pub struct TlsPem {
    pub ca: String,
    pub ca_file: String,
    /// The client certificate and its key, for mutual TLS.
    pub identity: Option<(String, Secret)>,
    pub cert_file: Option<String>,
}

/// What is wrong with the TLS handshake with the first reachable server of
/// `connect_string`, if it is the certificates; None when the servers
/// cannot be reached or the handshake succeeds. Blocking, bounded by
/// `timeout` per step.
pub fn diagnose(pem: &TlsPem, connect_string: &str, timeout: Duration) -> Option<String> {
    let hosts = connect_string.split('/').next().unwrap_or("");
    hosts
        .split(',')
        .find_map(|host| diagnose_host(pem, host, timeout).ok().flatten())
}

/// Err: the host could not be reached (try the next).
fn diagnose_host(pem: &TlsPem, host: &str, timeout: Duration) -> Result<Option<String>, ()> {
    let (name, _port) = host.rsplit_once(':').ok_or(())?;
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let address = host.to_socket_addrs().map_err(drop)?.next().ok_or(())?;
    let mut socket = TcpStream::connect_timeout(&address, timeout).map_err(drop)?;
    socket.set_read_timeout(Some(timeout)).map_err(drop)?;
    socket.set_write_timeout(Some(timeout)).map_err(drop)?;
    let config = client_config(pem).map_err(drop)?;
    let server_name = ServerName::try_from(name.to_owned()).map_err(drop)?;
    let mut tls = rustls::ClientConnection::new(Arc::new(config), server_name).map_err(drop)?;
    let mut stream = rustls::Stream::new(&mut tls, &mut socket);
    // Under TLS 1.3 the client finishes its side of the handshake before
    // the server has checked our certificate; the server's verdict (an
    // alert) comes with the first read. A healthy server says nothing
    // until we send a request: the read times out.
    let mut byte = [0u8; 1];
    let result = stream.flush().and_then(|()| stream.read(&mut byte));
    match result {
        Ok(_) => Ok(None),
        Err(err) => match err.get_ref().and_then(|e| e.downcast_ref::<TlsError>()) {
            Some(tls_error) => Ok(Some(explain(tls_error, pem, name))),
            None => Ok(None),
        },
    }
}

fn client_config(pem: &TlsPem) -> Result<rustls::ClientConfig, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.ca.as_bytes()).flatten() {
        let _ = roots.add(cert);
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    match &pem.identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain: Vec<_> = CertificateDer::pem_slice_iter(cert.as_bytes())
                .flatten()
                .collect();
            let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes())
                .map_err(|_| TlsError::General("bad key".into()))?;
            builder.with_client_auth_cert(chain, key)
        }
    }
}

/// One clause naming the problem, for "TLS with HOST: ...".
fn explain(err: &TlsError, pem: &TlsPem, host: &str) -> String {
    let what = match err {
        TlsError::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                "the server's certificate is not signed by the CA in {}",
                pem.ca_file
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
        TlsError::AlertReceived(alert) => match (&pem.cert_file, alert) {
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
        },
        other => format!("the handshake failed ({other}); is this the server's secureClientPort?"),
    };
    format!("TLS with {host}: {what}")
}
