//! `Inspector`: a blocking ZooKeeper client for tests to look at and poke the tree.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::runtime::Runtime;
use zookeeper_client::{self as zk, Acls, CreateMode};

pub use zookeeper_client::Stat;

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
        let connecting = zk::Client::connector()
            .with_session_timeout(session_timeout)
            .connect(connect_string);
        let client = rt
            .block_on(async { tokio::time::timeout(CONNECT_TIMEOUT, connecting).await })
            .unwrap_or_else(|_| {
                panic!("inspector: no session with {connect_string} within {CONNECT_TIMEOUT:?}")
            })
            .unwrap_or_else(|e| panic!("inspector: connect to {connect_string}: {e}"));
        Inspector {
            client: Some(client),
            rt,
            stop,
            driver: Some(driver),
            op_timeout: Duration::from_secs(30),
        }
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
