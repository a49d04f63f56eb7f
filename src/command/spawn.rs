//! Starting the command: `std::process::Command`, with the one step that
//! must run between fork and exec (`in_child`): a clean signal state, the
//! terminal's foreground, and the parent-death signal.
//!
//! std joins the process group (the keeper's, see keeper.rs), resets
//! SIGPIPE, then runs `in_child`, then execs as execvp does (a file the
//! kernel cannot execute runs with `/bin/sh`); an exec failure comes back
//! from `spawn` as the errno.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use rustix::process::Pid;

use crate::command::signals;

/// What the command does not inherit. sd_notify's: zklock alone speaks for
/// the service, so a daemon that speaks sd_notify itself cannot say it is
/// ready before zklock holds the lock (nor feed the watchdog while zklock
/// cannot). `ZKLOCK_PING`: the URL is a credential, and a zklock run by the
/// command would ping the same check.
pub const WITHHELD: [&str; 4] = [
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "ZKLOCK_PING",
];

/// Starts `argv` (not empty) with `env` added to our environment
/// (overriding) and systemd's notification variables removed (see
/// `run::notify`), in process group `pgid` (0: a new group), given the
/// foreground of `terminal`, with the signals `ignored` when zklock started
/// (a `signals::set`) left ignored and every other at its default; returns the child's pid, or
/// the errno of the failed exec (ENOENT: not found).
pub fn launch(
    argv: &[OsString],
    env: &[(&str, String)],
    terminal: Option<BorrowedFd<'static>>,
    pgid: i32,
    ignored: u64,
) -> io::Result<Pid> {
    let zklock = rustix::process::getpid();
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]);
    command
        .envs(env.iter().map(|(key, value)| (key, value)))
        .process_group(pgid);
    for withheld in WITHHELD {
        command.env_remove(withheld);
    }
    // SAFETY: `in_child` makes only async-signal-safe system calls on
    // values it owns, and allocates nothing: a forked child of a process
    // with threads may find the allocator's locks held.
    unsafe {
        command.pre_exec(move || in_child(terminal, zklock, ignored));
    }
    // The child starts with every signal blocked, so that our handlers
    // (which write to our signal pipe) never run in it; `in_child` resets
    // them before it unblocks.
    let previous = signals::change_mask(libc::SIG_BLOCK, signals::ALL);
    let spawned = command.spawn();
    signals::change_mask(libc::SIG_SETMASK, previous);
    // The std handle neither waits nor kills when dropped: child.rs reaps.
    Ok(Pid::from_child(&spawned?))
}

/// Everything the command must not inherit from zklock: its signal
/// handlers and the signals it ignores itself (exec keeps SIG_IGN), its
/// blocked signals, and its terminal's foreground. Signals ignored when
/// zklock started (`ignored`) stay ignored. Runs in the child between fork
/// and exec, already in its process group.
fn in_child(terminal: Option<BorrowedFd<'static>>, zklock: Pid, ignored: u64) -> io::Result<()> {
    // Inherited from the parent (see `launch`); again, for std versions
    // that empty the mask before this step.
    signals::change_mask(libc::SIG_BLOCK, signals::ALL);
    for signal in 1..=64 {
        if matches!(signal, libc::SIGKILL | libc::SIGSTOP) || ignored & signals::set(&[signal]) != 0
        {
            continue;
        }
        // The raw system call, as glibc's sigaction refuses the signals
        // it reserves (32, 33), which can arrive ignored; rustix has no
        // stable sigaction. An all-zero kernel sigaction is SIG_DFL with
        // no flags and an empty mask, whatever the field order.
        let default = [0u64; 4];
        // SAFETY: rt_sigaction reads the 32-byte `default` on our stack
        // and writes nothing (null old action); 8 is the kernel's
        // sigset size.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                default.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            );
        }
    }
    if let Some(fd) = terminal {
        // Every signal is still blocked (SIGTTOU among them), so this
        // succeeds although our group is not the foreground yet.
        let _ = rustix::termios::tcsetpgrp(fd, rustix::process::getpgrp());
    }
    // If zklock dies (even by SIGKILL), the command must not run on without
    // the lock. This fires when the creating thread exits: zklock's main
    // thread, which lives as long as zklock. The keeper kills the rest.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    if rustix::process::getppid() != Some(zklock) {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    signals::change_mask(libc::SIG_SETMASK, 0);
    Ok(())
}

/// Finds `program` as the exec will, without running it: Ok if some
/// candidate is an executable file; else the errno the exec would fail with
/// (ENOENT: not found; EACCES: found but not executable). Checked before
/// connecting, so a typo does not wait for the lock; the exec checks again.
pub fn resolve(program: &OsStr) -> io::Result<()> {
    let mut denied = false;
    for candidate in candidates(program) {
        let Ok(meta) = std::fs::metadata(&candidate) else {
            continue;
        };
        let executable = rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK).is_ok();
        if meta.is_file() && executable {
            return Ok(());
        }
        denied = true;
    }
    let errno = if denied { libc::EACCES } else { libc::ENOENT };
    Err(io::Error::from_raw_os_error(errno))
}

/// The paths execvp would try for `program`: the path itself if it has a
/// slash, else each `$PATH` entry joined with it.
fn candidates(program: &OsStr) -> Vec<PathBuf> {
    if program.is_empty() {
        return Vec::new();
    }
    if program.as_bytes().contains(&b'/') {
        return vec![program.into()];
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    path.as_bytes()
        .split(|&b| b == b':')
        .map(|dir| {
            let dir = if dir.is_empty() { b"." } else { dir };
            PathBuf::from(OsStr::from_bytes(dir)).join(program)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_execvp() {
        let names = |p: &str| candidates(OsStr::new(p));
        assert_eq!(names("./x"), [PathBuf::from("./x")]);
        let found = names("sh");
        assert!(found.iter().all(|c| c.ends_with("sh")), "{found:?}");
    }

    #[test]
    fn resolve_finds_what_exec_would() {
        assert!(resolve(OsStr::new("sh")).is_ok());
        assert!(resolve(OsStr::new("/bin/sh")).is_ok());
        let code = |p: &str| resolve(OsStr::new(p)).unwrap_err().raw_os_error();
        assert_eq!(code("/nonexistent/zklock-test"), Some(libc::ENOENT));
        assert_eq!(code("zklock-no-such-command-anywhere"), Some(libc::ENOENT));
        assert_eq!(code("/"), Some(libc::EACCES));
        assert_eq!(code(""), Some(libc::ENOENT));
    }

    #[test]
    fn launches_and_reports_exec_failures() {
        let start = |argv: &[&str]| {
            let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
            launch(&argv, &[], None, 0, 0)
        };
        let pid = start(&["true"]).expect("true starts");
        let reaped = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
        let (_, status) = reaped.unwrap().unwrap();
        assert_eq!(status.exit_status(), Some(0));
        let missing = start(&["/nonexistent/zklock-test"]).unwrap_err();
        assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
        let directory = start(&["/"]).unwrap_err();
        assert_eq!(directory.raw_os_error(), Some(libc::EACCES));
    }
}
