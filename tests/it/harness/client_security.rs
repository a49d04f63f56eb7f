//! What a test client brings to a secure server (TLS, SASL, `addauth`), as the
//! configuration of zklock's own client ([`zklock::zk::client::Config`]).

use std::sync::Arc;
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use zklock::zk::client::{Config, SaslFactory};
use zklock::zk::sasl::SaslMechanism;
use zklock::zk::sasl::digest_md5::DigestMd5;

use super::pki::pki;

/// What a client brings to a secure server: TLS settings, SASL, `addauth` pairs.
/// `ClientSecurity::default()` is a plain client.
#[derive(Clone, Debug, Default)]
pub struct ClientSecurity {
    pub tls: Option<ClientTls>,
    pub sasl: Option<ClientSasl>,
    /// `(scheme, auth)` sent on every (re)connect, e.g. `("digest", b"user:password")`.
    pub auth: Vec<(String, Vec<u8>)>,
    /// Give up after one attempt at each member instead of retrying until the
    /// session timeout.
    pub fail_eagerly: bool,
}

/// TLS from the client's side (PEM contents, not paths).
#[derive(Clone, Debug)]
pub struct ClientTls {
    pub ca_pem: String,
    /// `(certificate PEM, key PEM)` for mTLS.
    pub identity: Option<(String, String)>,
    /// On by default; off, the server's certificate must still be signed by the CA
    /// and valid, whatever names it carries.
    pub hostname_verification: bool,
}

#[derive(Clone, Debug)]
pub enum ClientSasl {
    DigestMd5 {
        user: String,
        password: String,
    },
    /// GSSAPI with the ticket cache in `KRB5CCNAME` (see `kdc.rs`). `hostname` is the
    /// instance of the server principal (`zookeeper/<hostname>`); by default the host
    /// of the connect string's first member, i.e. `127.0.0.1`.
    #[cfg(feature = "kerberos")]
    Gssapi {
        hostname: Option<String>,
    },
}

impl ClientSecurity {
    /// TLS with the test CA and the client certificate `CN=zklock-client,O=zklock-test`.
    pub fn tls() -> ClientSecurity {
        let pki = pki();
        ClientSecurity::tls_custom(
            pki.ca_pem(),
            Some((pki.client.cert_pem(), pki.client.key_pem())),
        )
    }

    /// TLS with the test CA and no client certificate.
    pub fn tls_without_identity() -> ClientSecurity {
        ClientSecurity::tls_custom(pki().ca_pem(), None)
    }

    pub fn tls_custom(ca_pem: String, identity: Option<(String, String)>) -> ClientSecurity {
        ClientSecurity {
            tls: Some(ClientTls {
                ca_pem,
                identity,
                hostname_verification: true,
            }),
            ..ClientSecurity::default()
        }
    }

    pub fn sasl_digest(user: &str, password: &str) -> ClientSecurity {
        ClientSecurity {
            sasl: Some(ClientSasl::DigestMd5 {
                user: user.to_string(),
                password: password.to_string(),
            }),
            ..ClientSecurity::default()
        }
    }

    /// `addauth digest user:password` with the connect.
    pub fn digest(user: &str, password: &str) -> ClientSecurity {
        ClientSecurity::default().with_auth("digest", format!("{user}:{password}").as_bytes())
    }

    /// GSSAPI as `zkclient@ZKLOCK.TEST` (the ticket cache of the shared KDC) to
    /// `zookeeper/localhost`.
    #[cfg(feature = "kerberos")]
    pub fn kerberos() -> ClientSecurity {
        ClientSecurity {
            sasl: Some(ClientSasl::Gssapi {
                hostname: Some("localhost".to_string()),
            }),
            ..ClientSecurity::default()
        }
    }

    pub fn with_auth(mut self, scheme: &str, auth: &[u8]) -> ClientSecurity {
        self.auth.push((scheme.to_string(), auth.to_vec()));
        self
    }

    pub fn with_fail_eagerly(mut self) -> ClientSecurity {
        self.fail_eagerly = true;
        self
    }

    pub fn uses_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The client's configuration for `connect_string` (`host:port,...[/chroot]`):
    /// each member within a third of the session timeout (at least 1 s), all of them
    /// in turn until the session timeout (once each with `fail_eagerly`).
    pub fn config(&self, connect_string: &str, session_timeout: Duration) -> Config {
        let (hosts, chroot) = match connect_string.find('/') {
            Some(at) => connect_string.split_at(at),
            None => (connect_string, ""),
        };
        let hosts: Vec<String> = hosts.split(',').map(str::to_owned).collect();
        let attempt_timeout = (session_timeout / 3).max(Duration::from_secs(1));
        let connect_timeout = match self.fail_eagerly {
            true => attempt_timeout * hosts.len() as u32,
            false => session_timeout,
        };
        Config {
            chroot: chroot.trim_end_matches('/').to_owned(),
            session_timeout,
            connect_timeout,
            attempt_timeout,
            tls: self.tls.as_ref().map(|tls| Arc::new(tls.client_config())),
            auth: self.auth.clone(),
            sasl: self.sasl.as_ref().map(ClientSasl::factory),
            max_packet: zklock::zk::client::DEFAULT_MAX_PACKET,
            hosts,
        }
    }
}

impl ClientSasl {
    /// A new mechanism for each connection; GSSAPI names the server after
    /// the member connected to unless `hostname` is given.
    fn factory(&self) -> SaslFactory {
        match self.clone() {
            ClientSasl::DigestMd5 { user, password } => Arc::new(move |_: &str| {
                Ok(Box::new(DigestMd5::new(&user, &password)) as Box<dyn SaslMechanism + Send>)
            }),
            #[cfg(feature = "kerberos")]
            ClientSasl::Gssapi { hostname } => Arc::new(move |member: &str| {
                let member = member.rsplit_once(':').map_or(member, |(h, _)| h);
                let host = hostname.as_deref().unwrap_or(member);
                let gssapi = zklock::zk::sasl::gssapi::Gssapi::new("zookeeper", host)?;
                Ok(Box::new(gssapi) as Box<dyn SaslMechanism + Send>)
            }),
        }
    }
}

impl ClientTls {
    /// rustls' configuration: the CA as the only root, the identity if any.
    fn client_config(&self) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            roots.add(cert.expect("CA PEM")).expect("a CA certificate");
        }
        let builder = match self.hostname_verification {
            true => rustls::ClientConfig::builder().with_root_certificates(roots),
            false => {
                let verifier = WebPkiServerVerifier::builder(Arc::new(roots))
                    .build()
                    .expect("a verifier of the CA");
                rustls::ClientConfig::builder()
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyName(verifier)))
            }
        };
        match &self.identity {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<_, _>>()
                    .expect("client certificate PEM");
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("client key PEM");
                builder
                    .with_client_auth_cert(chain, key)
                    .expect("a client certificate and its key")
            }
        }
    }
}

/// The CA's verifier, but any name will do: the certificate must still chain to the
/// CA and be valid. For tests that opt out of hostname verification on purpose.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified =
            (self.0).verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match verified {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
