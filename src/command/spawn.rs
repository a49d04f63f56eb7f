//! Starting the command: a child that shares zklock's memory until its
//! exec (`clone` with CLONE_VM and CLONE_VFORK, as posix_spawn makes one),
//! so that no copy of zklock's mappings is made and torn down again on the
//! path to the command's start; zklock waits, as with vfork, until the child
//! has exec'd or failed to. The one step between the clone and the exec
//! (`in_child`): the process group (the keeper's, see keeper/), a clean
//! signal state, the terminal's foreground and the parent-death signal.
//! The exec is glibc's execvpe, as std's would be (a file the kernel cannot
//! execute runs with `/bin/sh`); its failure comes back from [`launch`] as
//! the errno.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};

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
    let exec = Exec::new(argv, env)?;
    let failed = AtomicI32::new(0);
    let setup = Setup {
        exec: &exec,
        terminal,
        zklock: rustix::process::getpid(),
        pgid,
        ignored,
        failed: &failed,
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // The top of the stack (it grows down), aligned as the ABI wants.
    let top = stack.as_mut_ptr().wrapping_add(CHILD_STACK);
    let top = top.wrapping_sub(top as usize % 16);
    // The child starts with every signal blocked, so that our handlers
    // (which write to our signal pipe) never run in it; `in_child` resets
    // them before it unblocks.
    let previous = signals::change_mask(libc::SIG_BLOCK, signals::ALL);
    // SAFETY: `start` runs on `stack`, which outlives the child's use of it
    // (CLONE_VFORK: we go on only once it has exec'd or exited), with a
    // pointer to `setup`, alive as long; sharing our memory, it writes only
    // `failed` and its own stack, allocates nothing and makes only
    // async-signal-safe calls (see `start`). Without CLONE_SIGHAND it
    // resets its own copy of the signal handlers, not ours.
    let pid = unsafe {
        libc::clone(
            start,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref(&setup).cast_mut().cast(),
        )
    };
    let clone_error = io::Error::last_os_error();
    signals::change_mask(libc::SIG_SETMASK, previous);
    let Some(pid) = Pid::from_raw(pid).filter(|_| pid > 0) else {
        return Err(clone_error);
    };
    match failed.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            // It exited at once: reaped here, not by the supervisor.
            let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// The child's stack: `in_child` and glibc's execvpe (which builds each
/// candidate path, and a script's argument list, on the stack).
const CHILD_STACK: usize = 256 * 1024;

/// The exec's arguments, made before the clone: the child allocates nothing.
struct Exec {
    program: CString,
    _strings: Vec<CString>,
    /// Null-terminated arrays of pointers into `_strings`.
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl Exec {
    /// `argv`, and our environment with `env` added (overriding) and
    /// [`WITHHELD`] removed. A NUL byte in any of them is refused.
    fn new(argv: &[OsString], env: &[(&str, String)]) -> io::Result<Exec> {
        let c_string = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
        };
        let args: Vec<CString> = (argv.iter())
            .map(|arg| c_string(arg.as_bytes()))
            .collect::<io::Result<_>>()?;
        let overridden =
            |key: &OsStr| WITHHELD.iter().any(|w| key == *w) || env.iter().any(|(k, _)| key == *k);
        let mut vars = Vec::new();
        for (key, value) in std::env::vars_os().filter(|(key, _)| !overridden(key)) {
            vars.push(c_string(
                &[key.as_bytes(), b"=", value.as_bytes()].concat(),
            )?);
        }
        for (key, value) in env {
            vars.push(c_string(format!("{key}={value}").as_bytes())?);
        }
        let pointers = |strings: &[CString]| {
            (strings.iter().map(|s| s.as_ptr()))
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        let (argv, envp) = (pointers(&args), pointers(&vars));
        let program =
            (args.first().cloned()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        Ok(Exec {
            program,
            _strings: args.into_iter().chain(vars).collect(),
            argv,
            envp,
        })
    }
}

/// What the child is handed.
struct Setup<'a> {
    exec: &'a Exec,
    terminal: Option<BorrowedFd<'static>>,
    zklock: Pid,
    pgid: i32,
    ignored: u64,
    /// The errno of a failed step or exec; 0 while none failed.
    failed: &'a AtomicI32,
}

/// The child: its process group, [`in_child`], then the exec. On failure it
/// leaves the errno in `failed` and exits.
extern "C" fn start(setup: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `launch` passes a pointer to a `Setup` that lives until we
    // exec or exit (it is suspended until then).
    let setup = unsafe { &*setup.cast::<Setup<'_>>() };
    let prepared = rustix::process::setpgid(None, Pid::from_raw(setup.pgid))
        .map_err(io::Error::from)
        .and_then(|()| in_child(setup.terminal, setup.zklock, setup.ignored));
    let errno = match prepared {
        Err(err) => err.raw_os_error().unwrap_or(libc::EINVAL),
        Ok(()) => {
            let exec = setup.exec;
            // SAFETY: the arrays are null-terminated and point into
            // strings `exec` keeps alive; execvpe returns only on failure,
            // leaving the errno in this thread's (shared) errno slot.
            unsafe {
                libc::execvpe(
                    exec.program.as_ptr(),
                    exec.argv.as_ptr(),
                    exec.envp.as_ptr(),
                );
                *libc::__errno_location()
            }
        }
    };
    setup.failed.store(errno.max(1), Ordering::SeqCst);
    // SAFETY: _exit ends this process at once, running nothing of ours.
    unsafe { libc::_exit(127) }
}
/// Everything the command must not inherit from zklock: its signal
/// handlers and the signals it ignores itself (exec keeps SIG_IGN), its
/// blocked signals, and its terminal's foreground. Signals ignored when
/// zklock started (`ignored`) stay ignored. Runs in the child before its
/// exec, in its process group, sharing zklock's memory: it writes none of
/// it and allocates nothing.
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
