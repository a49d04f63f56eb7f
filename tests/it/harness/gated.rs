//! `Gated`: a `zklock run` whose command holds the lock until the test releases it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::TempDir;
use super::cmd::{KillOnDrop, wait_for_exit, wait_for_file};
use super::process::read_pid_file;

const LONG: Duration = Duration::from_secs(30);

/// Saves the environment it got, says it runs by writing its pid, and waits for the
/// release file. Polling keeps the shell interruptible by the signals tests send.
const SCRIPT: &str = r#"env | grep '^ZKLOCK_' > "$1/env"
echo $$ > "$1/pid"
while [ ! -e "$1/release" ]; do sleep 0.02; done
"#;

/// A running `zklock run` with a gated command. Dropping it kills zklock (the command
/// then dies of its parent-death signal).
pub struct Gated {
    zklock: KillOnDrop,
    dir: TempDir,
}

impl Gated {
    /// Spawns `zklock_run` (a `zklock run ... PATH` with no command yet) with the gated
    /// command; does not wait for the lock.
    pub fn spawn(mut zklock_run: Command) -> Gated {
        let dir = TempDir::new();
        zklock_run
            .args(["--", "sh", "-c", SCRIPT, "sh"])
            .arg(dir.path())
            .stdout(Stdio::null());
        let zklock = KillOnDrop(
            zklock_run
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {zklock_run:?}: {e}")),
        );
        Gated { zklock, dir }
    }

    /// Spawns and waits until the command runs, that is, the lock is held.
    pub fn start(zklock_run: Command) -> Gated {
        let mut gated = Gated::spawn(zklock_run);
        gated.wait_started(LONG);
        gated
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// zklock's pid.
    pub fn pid(&self) -> u32 {
        self.zklock.id()
    }

    /// zklock's exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.zklock.try_wait().expect("try_wait")
    }

    /// The pid of the gated command's shell (zklock's child), once started.
    /// `echo $$ > pid` creates the file before it writes the pid: reading
    /// it at once found it empty in CI ("a pid: Empty"), so wait for the line.
    pub fn command_pid(&self) -> u32 {
        read_pid_file(&self.file("pid"), LONG) as u32
    }

    pub fn started(&self) -> bool {
        self.file("pid").exists()
    }

    /// Waits until the command runs; panics if zklock exits or `timeout` passes first.
    /// Returns how long it waited.
    pub fn wait_started(&mut self, timeout: Duration) -> Duration {
        let begin = Instant::now();
        while !self.started() {
            if let Some(status) = self.zklock.try_wait().expect("try_wait") {
                panic!("zklock exited ({status}) before its command started");
            }
            assert!(
                begin.elapsed() < timeout,
                "command not started after {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        begin.elapsed()
    }

    /// The `ZKLOCK_*` variables the command got.
    pub fn env(&self) -> BTreeMap<String, String> {
        assert!(wait_for_file(self.file("pid"), LONG), "command not started");
        std::fs::read_to_string(self.file("env"))
            .expect("read env dump")
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Lets the command end (it exits 0).
    pub fn release(&self) {
        std::fs::write(self.file("release"), "").expect("write release file");
    }

    /// Waits for zklock to exit, without releasing.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        wait_for_exit(&mut self.zklock, timeout)
            .unwrap_or_else(|| panic!("zklock still running after {timeout:?}"))
    }

    /// Releases and waits for zklock to exit.
    pub fn finish(mut self) -> ExitStatus {
        self.release();
        self.wait(LONG)
    }
}
