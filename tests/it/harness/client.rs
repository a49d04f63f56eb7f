//! `Inspector`: a blocking ZooKeeper client for tests to look at and poke the tree.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::Runtime;
use zookeeper_client::{self as zk, Acls, CreateMode};

pub use zookeeper_client::Stat;

use super::pki::pki;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Wraps an async `zookeeper_client::Client` in its own runtime.
///
/// The runtime is current-thread (the crate only enables tokio's `rt`), and a dedicated
/// thread keeps driving it: the session must send pings between the test's calls, or
/// it would expire while the test looks elsewhere. Calls from the test thread then only
/// poll their own future while the driver thread runs the session task.
pub struct Inspector {
    client: Option<zk::Client>,
    rt: Arc<Runtime>,
    stop: Arc<AtomicBool>,
    driver: Option<JoinHandle<()>>,
    op_timeout: Duration,
}

impl Inspector {
    /// Connects with a 10 s session timeout; panics if no session within 30 s.
    pub fn connect(connect_string: &str) -> Inspector {
        Inspector::connect_with(connect_string, Duration::from_secs(10))
    }

    pub fn connect_with(connect_string: &str, session_timeout: Duration) -> Inspector {
        Inspector::connect_secure_with(connect_string, &ClientSecurity::default(), session_timeout)
    }

    /// Connects with TLS, SASL and/or `addauth` as `security` says, 10 s session
    /// timeout; panics if no session within 30 s.
    pub fn connect_secure(connect_string: &str, security: &ClientSecurity) -> Inspector {
        Inspector::connect_secure_with(connect_string, security, Duration::from_secs(10))
    }

    pub fn connect_secure_with(
        connect_string: &str,
        security: &ClientSecurity,
        session_timeout: Duration,
    ) -> Inspector {
        Inspector::try_connect_secure(connect_string, security, session_timeout)
            .unwrap_or_else(|e| panic!("inspector: connect to {connect_string}: {e}"))
    }

    /// Like [`Inspector::connect_secure_with`], but a failed connect is returned, not a
    /// panic: `Error::Timeout` if there is no session within 30 s (our bound), else
    /// whatever the crate reports (see /work/notes/secure-harness.md).
    pub fn try_connect_secure(
        connect_string: &str,
        security: &ClientSecurity,
        session_timeout: Duration,
    ) -> Result<Inspector, zk::Error> {
        let connector = security.connector(session_timeout)?;
        Inspector::try_connect_via(connect_string, connector, security.uses_tls())
    }

    /// Connects with a connector the caller built (`secure`: use `secure_connect`).
    pub fn try_connect_via(
        connect_string: &str,
        connector: zk::Connector,
        secure: bool,
    ) -> Result<Inspector, zk::Error> {
        let rt = Arc::new(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("build inspector runtime"),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let driver = {
            let (rt, stop) = (rt.clone(), stop.clone());
            std::thread::Builder::new()
                .name("inspector-rt".into())
                .spawn(move || {
                    rt.block_on(async {
                        while !stop.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    })
                })
                .expect("spawn inspector runtime thread")
        };
        let mut inspector = Inspector {
            client: None,
            rt,
            stop,
            driver: Some(driver),
            op_timeout: Duration::from_secs(30),
        };
        let connected = inspector.rt.block_on(async {
            let connecting = async {
                if secure {
                    connector.secure_connect(connect_string).await
                } else {
                    connector.connect(connect_string).await
                }
            };
            tokio::time::timeout(CONNECT_TIMEOUT, connecting)
                .await
                .unwrap_or(Err(zk::Error::Timeout))
        });
        inspector.client = Some(connected?);
        Ok(inspector)
    }

    /// The session's state as the client sees it (`AuthFailed` after a refused auth).
    pub fn state(&self) -> zk::SessionState {
        self.client().state()
    }

    /// `addauth scheme auth` on the live session.
    pub fn try_auth(&self, scheme: &str, auth: &[u8]) -> Result<(), zk::Error> {
        self.op(self.client().auth(scheme, auth))
    }

    /// The identities the server attached to this session (`whoami`, ZooKeeper 3.7+), as
    /// `(scheme, id)` pairs, e.g. `("x509", "CN=zklock-client,O=zklock-test")`.
    pub fn whoami(&self) -> Vec<(String, String)> {
        self.op(self.client().list_auth_users())
            .unwrap_or_else(|e| panic!("whoami: {e}"))
            .into_iter()
            .map(|user| (user.scheme().to_string(), user.user().to_string()))
            .collect()
    }

    /// Bounds every later call (default 30 s); a call that takes longer fails with
    /// `Error::Timeout` (`try_*`) or panics.
    pub fn set_op_timeout(&mut self, timeout: Duration) {
        self.op_timeout = timeout;
    }

    /// The underlying client, for anything this wrapper lacks (use with [`Self::run`]).
    pub fn client(&self) -> &zk::Client {
        self.client.as_ref().expect("inspector is open")
    }

    /// Runs a future to completion on the inspector's runtime.
    pub fn run<F: Future>(&self, future: F) -> F::Output {
        self.rt.block_on(future)
    }

    pub fn session_id(&self) -> i64 {
        self.client().session_id().0
    }

    pub fn session_timeout(&self) -> Duration {
        self.client().session_timeout()
    }

    fn op<T>(&self, future: impl Future<Output = Result<T, zk::Error>>) -> Result<T, zk::Error> {
        self.run(async {
            tokio::time::timeout(self.op_timeout, future)
                .await
                .unwrap_or(Err(zk::Error::Timeout))
        })
    }

    /// Children names, sorted; NoNode is an error here.
    pub fn try_children(&self, path: &str) -> Result<Vec<String>, zk::Error> {
        let mut children = self.op(self.client().list_children(path))?;
        children.sort();
        Ok(children)
    }

    /// Children names, sorted; empty if the node does not exist.
    pub fn children(&self, path: &str) -> Vec<String> {
        match self.try_children(path) {
            Err(zk::Error::NoNode) => Vec::new(),
            r => r.unwrap_or_else(|e| panic!("children({path}): {e}")),
        }
    }

    pub fn try_stat(&self, path: &str) -> Result<Option<Stat>, zk::Error> {
        self.op(self.client().check_stat(path))
    }

    pub fn stat(&self, path: &str) -> Option<Stat> {
        self.try_stat(path)
            .unwrap_or_else(|e| panic!("stat({path}): {e}"))
    }

    pub fn try_exists(&self, path: &str) -> Result<bool, zk::Error> {
        self.try_stat(path).map(|s| s.is_some())
    }

    pub fn exists(&self, path: &str) -> bool {
        self.stat(path).is_some()
    }

    pub fn get_data(&self, path: &str) -> Option<(Vec<u8>, Stat)> {
        match self.op(self.client().get_data(path)) {
            Ok(found) => Some(found),
            Err(zk::Error::NoNode) => None,
            Err(e) => panic!("get_data({path}): {e}"),
        }
    }

    /// Deletes any version; false if there was no such node.
    pub fn delete(&self, path: &str) -> bool {
        match self.op(self.client().delete(path, None)) {
            Ok(()) => true,
            Err(zk::Error::NoNode) => false,
            Err(e) => panic!("delete({path}): {e}"),
        }
    }

    /// Creates a persistent node, or an ephemeral one owned by this session.
    pub fn create(&self, path: &str, data: &[u8], persistent: bool) -> Stat {
        let mode = if persistent {
            CreateMode::Persistent
        } else {
            CreateMode::Ephemeral
        };
        let options = mode.with_acls(Acls::anyone_all());
        self.op(self.client().create(path, data, &options))
            .unwrap_or_else(|e| panic!("create({path}): {e}"))
            .0
    }

    /// Creates `path` and any missing ancestors as persistent nodes.
    pub fn create_all(&self, path: &str) {
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        self.op(self.client().mkdir(path, &options))
            .unwrap_or_else(|e| panic!("create_all({path}): {e}"));
    }

    /// Creates `prefix<10-digit sequence>` owned by this session; returns its path.
    pub fn try_create_ephemeral_sequential(
        &self,
        prefix: &str,
        data: &[u8],
    ) -> Result<(String, Stat), zk::Error> {
        let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let (stat, seq) = self.op(self.client().create(prefix, data, &options))?;
        Ok((format!("{prefix}{seq}"), stat))
    }

    pub fn create_ephemeral_sequential(&self, prefix: &str, data: &[u8]) -> (String, Stat) {
        self.try_create_ephemeral_sequential(prefix, data)
            .unwrap_or_else(|e| panic!("create_ephemeral_sequential({prefix}): {e}"))
    }

    /// Every descendant of `path` (not `path` itself) as a full path, sorted; empty if
    /// `path` does not exist.
    pub fn tree(&self, path: &str) -> Vec<String> {
        let mut found = Vec::new();
        let mut pending = vec![path.to_string()];
        while let Some(parent) = pending.pop() {
            for child in self.children(&parent) {
                let full = if parent == "/" {
                    format!("/{child}")
                } else {
                    format!("{parent}/{child}")
                };
                pending.push(full.clone());
                found.push(full);
            }
        }
        found.sort();
        found
    }

    /// Closes the session and waits (briefly) until the server confirmed it, so that
    /// `cons`/`dump` no longer show it.
    pub fn close(mut self) {
        self.close_session();
    }

    fn close_session(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let mut state = client.state_watcher();
        drop(client);
        self.rt.block_on(async {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
                while !state.peek_state().is_terminated() {
                    state.changed().await;
                }
            })
            .await;
        });
    }
}

impl Drop for Inspector {
    fn drop(&mut self) {
        self.close_session();
        self.stop.store(true, Ordering::SeqCst);
        if let Some(driver) = self.driver.take() {
            let _ = driver.join();
        }
    }
}

/// What a client brings to a secure server: TLS settings, SASL, `addauth` pairs.
/// `ClientSecurity::default()` is a plain client.
#[derive(Clone, Debug, Default)]
pub struct ClientSecurity {
    pub tls: Option<ClientTls>,
    pub sasl: Option<ClientSasl>,
    /// `(scheme, auth)` sent on every (re)connect, e.g. `("digest", b"user:password")`.
    pub auth: Vec<(String, Vec<u8>)>,
    /// `Connector::with_fail_eagerly`: give up after one pass over the hosts
    /// (`Error::NoHosts`) instead of retrying until the session timeout.
    pub fail_eagerly: bool,
}

/// TLS from the client's side (PEM contents, not paths).
#[derive(Clone, Debug)]
pub struct ClientTls {
    pub ca_pem: String,
    /// `(certificate PEM, key PEM)` for mTLS.
    pub identity: Option<(String, String)>,
    /// On by default in the crate; off needs its `unsafe` opt-out.
    pub hostname_verification: bool,
}

#[derive(Clone, Debug)]
pub enum ClientSasl {
    DigestMd5 {
        user: String,
        password: String,
    },
    /// GSSAPI with the ticket cache in `KRB5CCNAME` (see `kdc.rs`). `hostname` is the
    /// instance of the server principal (`zookeeper/<hostname>`); the crate defaults
    /// to the host of the connect string, i.e. `127.0.0.1`.
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

    /// A connector with all of this set (use `secure_connect` if [`Self::uses_tls`]).
    pub fn connector(&self, session_timeout: Duration) -> Result<zk::Connector, zk::Error> {
        let mut connector = zk::Client::connector().with_session_timeout(session_timeout);
        if let Some(tls) = &self.tls {
            let mut options = zk::TlsOptions::new().with_pem_ca(&tls.ca_pem)?;
            if let Some((cert, key)) = &tls.identity {
                options = options.with_pem_identity(cert, key)?;
            }
            if !tls.hostname_verification {
                // SAFETY: not memory safety: the crate marks this `unsafe` because it
                // allows man-in-the-middle attacks; tests opt out on purpose.
                options = unsafe { options.with_no_hostname_verification() };
            }
            connector = connector.with_tls(options);
        }
        match &self.sasl {
            None => {}
            Some(ClientSasl::DigestMd5 { user, password }) => {
                connector = connector
                    .with_sasl(zk::SaslOptions::digest_md5(user.clone(), password.clone()));
            }
            #[cfg(feature = "kerberos")]
            Some(ClientSasl::Gssapi { hostname }) => {
                let mut options = zk::SaslOptions::gssapi();
                if let Some(hostname) = hostname {
                    options = options.with_hostname(hostname.clone());
                }
                connector = connector.with_sasl(options);
            }
        }
        for (scheme, auth) in &self.auth {
            connector = connector.with_auth(scheme, auth);
        }
        if self.fail_eagerly {
            connector = connector.with_fail_eagerly();
        }
        Ok(connector)
    }
}
