//! Shared test harness: real ZooKeeper servers, a fault-injecting proxy, an inspecting
//! client, and builders/oracles for `zklock` commands.
//!
//! Not every test uses every helper, so unused items and re-exports are expected.
#![allow(dead_code, unused_imports)]

mod client;
mod client_security;
mod cmd;
mod curator;
mod ensemble;
mod frames;
mod gated;
mod holder;
mod intervals;
mod kazoo;
mod kdc;
mod net_ensemble;
mod netns;
mod node;
mod pki;
mod process;
mod proxy;
mod pty;
mod scene;
mod security;
mod server;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub use client::{Inspector, Stat, acl, open_acl};
pub use client_security::{ClientSasl, ClientSecurity, ClientTls};
pub use cmd::{
    CI_VARIABLES, Entry, EntryKind, KillOnDrop, LockLog, clean_environment, signal, unique_path,
    wait_for_exit, wait_for_file, zklock, zklock_run,
};
pub use curator::{Curator, CuratorHold, CuratorKind};
pub use ensemble::Ensemble;
pub use gated::Gated;
pub use holder::{
    Holder, assert_no_lock_nodes, contenders, ephemerals, is_dead, wait_for_contenders,
    wait_no_lock_nodes,
};
pub use intervals::{interval, recording, stamped_start};
pub use kazoo::{KazooKind, KazooLock, python};
pub use kdc::{KRB_CLIENT, KRB_CLIENT_PASSWORD, KRB_OTHER_CLIENT, Kdc, REALM, kdc, krb5_dir};
pub use net_ensemble::NetEnsemble;
pub use netns::{Host, Net};
pub use pki::{CLIENT_DN, CLIENT_SUBJECT, CertKey, OTHER_CLIENT_DN, Pki, pki};
pub use process::{
    KillGroupOnDrop, Outcome, assert_no_nodes, pid_alive, read_pid_file, run_bounded, wait_pid_gone,
};
pub use proxy::{FaultProxy, Mode};
pub use pty::Pty;
pub use scene::Scene;
pub use security::{
    ClientAuth, SASL_OTHER_PASSWORD, SASL_OTHER_USER, SASL_PASSWORD, SASL_USER, SaslServer,
    Security, ServerCert, TlsServer,
};
pub use server::{ServerOptions, ZkServer, shared_server};

/// Tests that start hundreds of processes at once (a fleet, every calling
/// form in every shell) take turns: two of them together on two cores
/// starve the other tests' sessions past their lease deadlines.
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Polls `cond` until it holds; panics with `description` after `timeout`.
///
/// Returns how long it took, which tests may log to spot slow paths.
pub fn wait_until(
    timeout: Duration,
    description: &str,
    mut cond: impl FnMut() -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        if cond() {
            return start.elapsed();
        }
        if start.elapsed() >= timeout {
            panic!("timed out after {timeout:?} waiting for: {description}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const TEMP_PREFIX: &str = "zklock-it-";

/// A directory under the system temp dir, removed (with its contents) on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        sweep_stale_dirs();
        let pid = std::process::id();
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("{TEMP_PREFIX}{pid}-{n}"));
            match std::fs::create_dir(&path) {
                Ok(()) => return TempDir { path },
                // Left over from an earlier process that had our pid.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let _ = std::fs::remove_dir_all(&path);
                }
                Err(e) => panic!("cannot create temp dir {}: {e}", path.display()),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Default for TempDir {
    fn default() -> Self {
        TempDir::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Removes temp dirs of test processes that no longer exist.
///
/// A test process killed with SIGKILL runs no destructors, and the shared server's dir is
/// owned by a static that is never dropped; without this sweep, such dirs pile up.
fn sweep_stale_dirs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else {
                continue;
            };
            let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
}
