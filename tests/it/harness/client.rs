//! `Inspector`: a blocking ZooKeeper client for tests to look at and poke the tree.

use std::future::Future;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use zklock::zk::burst::{Burst, Pending};
use zklock::zk::client::{Client, Config, ConnectError, State};
use zklock::zk::ops::CreateMode;
use zklock::zk::records::{Acl, Error, perms};

pub use zklock::zk::records::Stat;

use super::client_security::ClientSecurity;

const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// zklock's own client ([`zklock::zk`]) on a runtime of its own, behind blocking calls.
///
/// The runtime is current-thread (zklock's), and a dedicated thread keeps driving it:
/// the session must send pings between the test's calls, or it would expire while the
/// test looks elsewhere. Calls from the test thread then only poll their own future
/// while the driver thread runs the session task.
pub struct Inspector {
    client: Option<Client>,
    rt: Arc<Runtime>,
    stop: Option<oneshot::Sender<()>>,
    driver: Option<JoinHandle<()>>,
    op_timeout: Duration,
}

/// One ACL entry: `perms` (`zklock::zk::records::perms`) for `scheme:id`.
pub fn acl(perms: i32, scheme: &str, id: &str) -> Acl {
    Acl {
        perms,
        scheme: scheme.to_owned(),
        id: id.to_owned(),
    }
}

/// Everyone may do everything: the ACL of the nodes the inspector creates.
pub fn open_acl() -> Vec<Acl> {
    vec![Acl::open()]
}

impl Inspector {
    /// Connects with a 10 s session timeout; panics if no session within it.
    pub fn connect(connect_string: &str) -> Inspector {
        Inspector::connect_with(connect_string, Duration::from_secs(10))
    }

    pub fn connect_with(connect_string: &str, session_timeout: Duration) -> Inspector {
        Inspector::connect_secure_with(connect_string, &ClientSecurity::default(), session_timeout)
    }

    /// Connects with TLS, SASL and/or `addauth` as `security` says, 10 s session
    /// timeout; panics if no session within it.
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
    /// panic: no member answered in time (the session timeout, or one attempt per
    /// member with `fail_eagerly`), or SASL failed.
    pub fn try_connect_secure(
        connect_string: &str,
        security: &ClientSecurity,
        session_timeout: Duration,
    ) -> Result<Inspector, ConnectError> {
        Inspector::try_connect_via(security.config(connect_string, session_timeout))
    }

    /// Connects with a configuration the caller built.
    pub fn try_connect_via(config: Config) -> Result<Inspector, ConnectError> {
        let rt = Arc::new(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("build inspector runtime"),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let driver = {
            let rt = rt.clone();
            std::thread::Builder::new()
                .name("inspector-rt".into())
                .spawn(move || {
                    let _ = rt.block_on(stopped);
                })
                .expect("spawn inspector runtime thread")
        };
        let mut inspector = Inspector {
            client: None,
            rt,
            stop: Some(stop),
            driver: Some(driver),
            op_timeout: Duration::from_secs(30),
        };
        let client = inspector
            .rt
            .block_on(Client::connect(config, Burst::default()))?;
        inspector.client = Some(client);
        Ok(inspector)
    }

    /// The session's state as the client sees it (`AuthFailed` after a refused auth).
    pub fn state(&self) -> State {
        self.client().link().borrow().state
    }

    /// `addauth scheme auth` on the live session (sent again on every reconnection).
    pub fn try_auth(&self, scheme: &str, auth: &[u8]) -> Result<(), Error> {
        self.call(|b| b.add_auth(scheme, auth))
    }

    /// The identities the server attached to this session (`whoami`, ZooKeeper 3.7+), as
    /// `(scheme, id)` pairs, e.g. `("x509", "CN=zklock-client,O=zklock-test")`.
    pub fn whoami(&self) -> Vec<(String, String)> {
        self.call(|b| b.who_am_i())
            .unwrap_or_else(|e| panic!("whoami: {e}"))
    }

    /// Bounds every later call (default 30 s); a call that takes longer fails with
    /// `Error::OperationTimeout` (`try_*`) or panics.
    pub fn set_op_timeout(&mut self, timeout: Duration) {
        self.op_timeout = timeout;
    }

    /// The underlying client, for anything this wrapper lacks (use with [`Self::run`]).
    pub fn client(&self) -> &Client {
        self.client.as_ref().expect("inspector is open")
    }

    /// Runs a future to completion on the inspector's runtime.
    pub fn run<F: Future>(&self, future: F) -> F::Output {
        self.rt.block_on(future)
    }

    pub fn session_id(&self) -> i64 {
        self.client().session_id()
    }

    /// The session timeout the server granted.
    pub fn session_timeout(&self) -> Duration {
        self.client().link().borrow().session_timeout
    }

    /// One request, bounded by the op timeout.
    fn call<T>(&self, request: impl FnOnce(&mut Burst) -> Pending<T>) -> Result<T, Error> {
        self.op(self.client().call(request))
    }

    fn op<T>(&self, future: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        self.run(async {
            tokio::time::timeout(self.op_timeout, future)
                .await
                .unwrap_or(Err(Error::OperationTimeout))
        })
    }

    /// Children names, sorted; NoNode is an error here.
    pub fn try_children(&self, path: &str) -> Result<Vec<String>, Error> {
        let mut children = self.call(|b| b.get_children(path, false))?.children;
        children.sort();
        Ok(children)
    }

    /// Children names, sorted; empty if the node does not exist.
    pub fn children(&self, path: &str) -> Vec<String> {
        match self.try_children(path) {
            Err(Error::NoNode) => Vec::new(),
            r => r.unwrap_or_else(|e| panic!("children({path}): {e}")),
        }
    }

    pub fn try_stat(&self, path: &str) -> Result<Option<Stat>, Error> {
        self.call(|b| b.exists(path, false)).map(|found| found.stat)
    }

    pub fn stat(&self, path: &str) -> Option<Stat> {
        self.try_stat(path)
            .unwrap_or_else(|e| panic!("stat({path}): {e}"))
    }

    pub fn try_exists(&self, path: &str) -> Result<bool, Error> {
        self.try_stat(path).map(|s| s.is_some())
    }

    pub fn exists(&self, path: &str) -> bool {
        self.stat(path).is_some()
    }

    pub fn get_data(&self, path: &str) -> Option<(Vec<u8>, Stat)> {
        match self.call(|b| b.get_data(path, false)) {
            Ok(found) => Some((found.data, found.stat)),
            Err(Error::NoNode) => None,
            Err(e) => panic!("get_data({path}): {e}"),
        }
    }

    /// Deletes any version; false if there was no such node.
    pub fn delete(&self, path: &str) -> bool {
        match self.call(|b| b.delete(path, -1)) {
            Ok(()) => true,
            Err(Error::NoNode) => false,
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
        self.call(|b| b.create(path, data, &open_acl(), mode))
            .unwrap_or_else(|e| panic!("create({path}): {e}"))
            .stat
    }

    /// Creates `path` and any missing ancestors as persistent nodes, every level in
    /// one burst (an existing one answers NodeExists).
    pub fn create_all(&self, path: &str) {
        let mut burst = Burst::default();
        let created: Vec<_> = (path.match_indices('/').map(|(i, _)| &path[..i]))
            .chain([path])
            .filter(|level| !level.is_empty())
            .map(|level| {
                let mode = CreateMode::Persistent;
                (level, burst.create(level, b"", &open_acl(), mode))
            })
            .collect();
        self.client().send(burst);
        for (level, pending) in created {
            match self.op(pending) {
                Ok(_) | Err(Error::NodeExists) => {}
                Err(e) => panic!("create_all({path}): {level}: {e}"),
            }
        }
    }

    /// Creates `prefix<10-digit sequence>` owned by this session; returns its path.
    pub fn try_create_ephemeral_sequential(
        &self,
        prefix: &str,
        data: &[u8],
    ) -> Result<(String, Stat), Error> {
        let mode = CreateMode::EphemeralSequential;
        let created = self.call(|b| b.create(prefix, data, &open_acl(), mode))?;
        Ok((created.path, created.stat))
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
        let closed = client.call(|b| b.close());
        drop(client);
        self.rt.block_on(async {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, closed).await;
        });
    }
}

impl Drop for Inspector {
    fn drop(&mut self) {
        self.close_session();
        drop(self.stop.take());
        if let Some(driver) = self.driver.take() {
            let _ = driver.join();
        }
    }
}
