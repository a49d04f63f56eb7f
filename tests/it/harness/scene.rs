//! `Scene`: the set-up most tests share — a server, a lock path of their own, a
//! `zklock run` against both, the lock log its commands write to and an inspecting
//! client — so that a test says only what it checks.

use std::cell::OnceCell;
use std::process::Command;

use super::{
    Holder, Inspector, LockLog, assert_no_lock_nodes, assert_no_nodes, shared_server, unique_path,
    zklock_run,
};

/// One lock path on one server. The inspecting client connects on first use, so a
/// test that never looks at the tree opens no session of its own.
pub struct Scene {
    /// The connect string zklock gets with `-z`.
    pub connect: String,
    /// A lock path no other test uses (`unique_path`).
    pub path: String,
    /// The start/end log of commands run by [`Scene::hold`] (or `log.shell_body`).
    pub log: LockLog,
    zk: OnceCell<Inspector>,
}

impl Scene {
    /// A unique path tagged `tag` on the shared server.
    pub fn new(tag: &str) -> Scene {
        Scene::on(shared_server().connect_string(), tag)
    }

    /// A unique path tagged `tag` behind `connect`: a server of the test's own, an
    /// ensemble or a proxy.
    pub fn on(connect: impl Into<String>, tag: &str) -> Scene {
        Scene {
            connect: connect.into(),
            path: unique_path(tag),
            log: LockLog::new(),
            zk: OnceCell::new(),
        }
    }

    /// `zklock run -z CONNECT PATH`; the caller appends options, `--` and the command.
    pub fn run(&self) -> Command {
        zklock_run(&self.connect, &self.path)
    }

    /// A [`Holder`] of the path (plain `zklock run`), started: the lock is held.
    pub fn hold(&self) -> Holder {
        Holder::start(&mut self.run(), &self.log)
    }

    /// The inspecting client, connected on first use.
    pub fn zk(&self) -> &Inspector {
        self.zk.get_or_init(|| Inspector::connect(&self.connect))
    }

    /// No node at all is left under the path: "nothing is left behind in ZooKeeper".
    pub fn assert_nothing_left(&self) {
        assert_no_nodes(self.zk(), &self.path);
    }

    /// No ephemeral node is left under the path (directories the server reaps later,
    /// and records zklock keeps on purpose, may remain).
    pub fn assert_no_lock_nodes(&self) {
        assert_no_lock_nodes(self.zk(), &self.path);
    }
}
