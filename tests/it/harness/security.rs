//! Server-side security settings: TLS on the client port, SASL (DIGEST-MD5 or Kerberos),
//! and authentication enforcement. Part of [`ServerOptions`](super::ServerOptions), so
//! `ZkServer` and `Ensemble` both take them.
//!
//! A TLS server keeps a plain client port too, bound to 127.0.0.1 and used only by the
//! harness for its 4-letter-word probes (readiness, `is_ours`, `srvr`, `cons`...): 4lw
//! over TLS would need a TLS client in the probe. Tests get the secure port from
//! `connect_string()`/`addr()`; the plain one only from `plain_addr()`.

use std::fs;
use std::path::Path;

use super::kdc::kdc;
use super::pki::pki;

/// `ssl.clientAuth`: whether the server asks for a client certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// A client without a trusted certificate fails the handshake.
    Need,
    /// Asked for; a client without one still connects (no x509 identity).
    Want,
    /// Not asked for.
    None,
}

impl ClientAuth {
    fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Need => "need",
            ClientAuth::Want => "want",
            ClientAuth::None => "none",
        }
    }
}

/// Which certificate the server presents (see [`super::Pki`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerCert {
    /// Signed by the test CA; SAN `IP:127.0.0.1, DNS:localhost`.
    Good,
    /// Right SAN, signed by a CA the client does not know.
    UnknownCa,
    /// Signed by the test CA, but only `DNS:wrong.example`.
    WrongName,
    /// Signed by the test CA, right SAN, expired in 2020.
    Expired,
}

/// TLS on the client port (`secureClientPort`, Netty, PEM key and trust stores).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsServer {
    pub client_auth: ClientAuth,
    pub cert: ServerCert,
}

/// SASL on the server side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SaslServer {
    /// DIGEST-MD5 with these `(user, password)` pairs in the JAAS `Server` section.
    DigestMd5 { users: Vec<(String, String)> },
    /// GSSAPI with the principal `zookeeper/localhost@ZKLOCK.TEST` of the process's
    /// shared KDC ([`super::kdc()`]), started on first use.
    Kerberos,
}

/// The user that [`Security::sasl_digest`] creates.
pub const SASL_USER: &str = "zklock";
/// Its password.
pub const SASL_PASSWORD: &str = "zklock-secret";
/// A second user with its own password, for tests that need two identities.
pub const SASL_OTHER_USER: &str = "other";
pub const SASL_OTHER_PASSWORD: &str = "other-secret";

/// Security settings of a server or ensemble. `Security::default()` is a plain server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Security {
    pub tls: Option<TlsServer>,
    pub sasl: Option<SaslServer>,
    /// `enforce.auth.schemes` (e.g. `["sasl"]`, `["digest"]`, `["x509"]`); empty leaves
    /// `enforce.auth.enabled` off.
    pub enforce_auth: Vec<String>,
    /// Turns the `digest` scheme off
    /// (`zookeeper.DigestAuthenticationProvider.enabled=false`): the server
    /// refuses every `addauth digest`.
    pub refuse_digest: bool,
}

impl Security {
    /// TLS only, client certificate required (`ssl.clientAuth=need`), good server cert.
    pub fn tls() -> Security {
        Security::tls_with(ClientAuth::Need, ServerCert::Good)
    }

    pub fn tls_with(client_auth: ClientAuth, cert: ServerCert) -> Security {
        Security {
            tls: Some(TlsServer { client_auth, cert }),
            ..Security::default()
        }
    }

    /// SASL DIGEST-MD5 with [`SASL_USER`]/[`SASL_PASSWORD`] and
    /// [`SASL_OTHER_USER`]/[`SASL_OTHER_PASSWORD`], enforced (`enforce.auth.schemes=sasl`).
    pub fn sasl_digest() -> Security {
        Security {
            sasl: Some(SaslServer::DigestMd5 {
                users: vec![
                    (SASL_USER.into(), SASL_PASSWORD.into()),
                    (SASL_OTHER_USER.into(), SASL_OTHER_PASSWORD.into()),
                ],
            }),
            ..Security::default()
        }
        .enforce(&["sasl"])
    }

    /// Kerberos (SASL GSSAPI) against the shared KDC, enforced (`sasl`).
    pub fn kerberos() -> Security {
        Security {
            sasl: Some(SaslServer::Kerberos),
            ..Security::default()
        }
        .enforce(&["sasl"])
    }

    /// No SASL, but every session must `addauth digest` first.
    pub fn digest_enforced() -> Security {
        Security::default().enforce(&["digest"])
    }

    /// A plain server that refuses the `digest` scheme.
    pub fn digest_refused() -> Security {
        Security {
            refuse_digest: true,
            ..Security::default()
        }
    }

    /// Replaces the enforced schemes; `&[]` turns enforcement off.
    pub fn enforce(mut self, schemes: &[&str]) -> Security {
        self.enforce_auth = schemes.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn is_plain(&self) -> bool {
        *self == Security::default()
    }

    pub fn uses_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The zoo.cfg lines and JVM arguments for a server with its files in `dir`.
    pub(crate) fn configure(&self, dir: &Path, secure_port: Option<u16>) -> (String, Vec<String>) {
        let mut config = String::new();
        let mut jvm = Vec::new();
        if let Some(tls) = self.tls {
            let port = secure_port.expect("a TLS server needs a secure port");
            let pki = pki();
            let store = match tls.cert {
                ServerCert::Good => &pki.server,
                ServerCert::UnknownCa => &pki.unknown_ca_server,
                ServerCert::WrongName => &pki.wrong_name_server,
                ServerCert::Expired => &pki.expired_server,
            };
            config += &format!("secureClientPort={port}\nsecureClientPortAddress=127.0.0.1\n");
            jvm.extend([
                "-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory"
                    .to_string(),
                format!("-Dzookeeper.ssl.keyStore.location={}", store.bundle.display()),
                "-Dzookeeper.ssl.keyStore.type=PEM".to_string(),
                format!("-Dzookeeper.ssl.trustStore.location={}", pki.ca.display()),
                "-Dzookeeper.ssl.trustStore.type=PEM".to_string(),
                format!("-Dzookeeper.ssl.clientAuth={}", tls.client_auth.as_str()),
                // Without it the server cannot map a client certificate to `x509:<DN>`.
                "-Dzookeeper.authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider"
                    .to_string(),
            ]);
        }
        match &self.sasl {
            None => {}
            Some(SaslServer::DigestMd5 { users }) => {
                let users: String = users
                    .iter()
                    .map(|(user, password)| {
                        assert!(
                            !password.contains(['"', '\\']) && !user.contains(['"', '=', ' ']),
                            "keep SASL users and passwords JAAS-safe"
                        );
                        format!("\n  user_{user}=\"{password}\"")
                    })
                    .collect();
                let jaas = format!(
                    "Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required{users};\n}};\n"
                );
                jvm.extend(sasl_jvm_args(dir, &jaas));
            }
            Some(SaslServer::Kerberos) => {
                let kdc = kdc();
                let jaas = format!(
                    "Server {{\n  com.sun.security.auth.module.Krb5LoginModule required\n  \
                     useKeyTab=true\n  keyTab=\"{}\"\n  storeKey=true\n  useTicketCache=false\n  \
                     principal=\"{}\";\n}};\n",
                    kdc.server_keytab().display(),
                    kdc.server_principal()
                );
                jvm.extend(sasl_jvm_args(dir, &jaas));
                jvm.extend([
                    format!("-Djava.security.krb5.conf={}", kdc.krb5_conf().display()),
                    // The session's sasl id is then the bare user name, as with DIGEST-MD5.
                    "-Dzookeeper.kerberos.removeHostFromPrincipal=true".to_string(),
                    "-Dzookeeper.kerberos.removeRealmFromPrincipal=true".to_string(),
                ]);
            }
        }
        if self.refuse_digest {
            jvm.push("-Dzookeeper.DigestAuthenticationProvider.enabled=false".to_string());
        }
        if !self.enforce_auth.is_empty() {
            jvm.push("-Dzookeeper.enforce.auth.enabled=true".to_string());
            jvm.push(format!(
                "-Dzookeeper.enforce.auth.schemes={}",
                self.enforce_auth.join(",")
            ));
        }
        (config, jvm)
    }
}

fn sasl_jvm_args(dir: &Path, jaas: &str) -> Vec<String> {
    let path = dir.join("jaas.conf");
    fs::write(&path, jaas).expect("write jaas.conf");
    vec![
        format!("-Djava.security.auth.login.config={}", path.display()),
        "-Dzookeeper.authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
            .to_string(),
    ]
}
