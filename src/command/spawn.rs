//! Starting the command: a vfork-style clone that gives it a clean signal
//! state, its process group (the keeper's, see keeper.rs), the terminal and
//! a parent-death signal, then execs it.
//!
//! Why not `std::process::Command` with `pre_exec`: that forks, and copying
//! zklock's page tables and then faulting on every page it writes afterwards
//! cost about half a millisecond on each run and each lock hand-off. glibc's
//! `posix_spawn` avoids the copy the same way as here (CLONE_VM|CLONE_VFORK),
//! but cannot set the parent-death signal. So the child runs a small,
//! allocation-free function on its own stack in our address space while we
//! wait, and everything it needs is prepared before the clone.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

/// Everything the child reads, prepared by the parent: the child must not
/// allocate (the allocator's locks may be held by a thread that does not
/// exist in the child's view) and must not touch anything else we own.
struct Plan<'a> {
    /// Where to look for the program: the path itself if it has a slash,
    /// else each `$PATH` entry joined with it, as execvp does.
    candidates: &'a [CString],
    argv: Vec<*const libc::c_char>,
    /// `/bin/sh CANDIDATE ARGS...` for files the kernel cannot execute
    /// (ENOEXEC): execvp runs them with the shell, and so do we. Slot 1 is
    /// filled in by the child.
    sh_argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    terminal: Option<libc::c_int>,
    /// The process group to join; 0 makes a new one led by the child.
    pgid: libc::pid_t,
    /// Signals (one bit each) the child leaves ignored; see
    /// `signals::IGNORED_AT_START`.
    keep_ignored: u64,
    zklock_pid: libc::pid_t,
    /// Set by the child to the errno of its failure before it exits.
    error: AtomicI32,
}

const STACK_SIZE: usize = 256 * 1024;
const SH: &[u8] = b"/bin/sh\0";

/// What starting the command needs that does not depend on the lock: built
/// before zklock waits (see `Child::prepare`). Built on the hand-off, after
/// the lock was taken, the strings, the copy of our environment and the
/// child's stack took about 0.1 ms of a one-waiter hand-off (bench/RESULTS.md).
pub struct Prepared {
    argv: Vec<CString>,
    candidates: Vec<CString>,
    /// Our environment as `KEY=VALUE`, `ZKLOCK_PASSWORD` included: it was in
    /// the environment the user gave, and a nested zklock needs it.
    inherited: Vec<CString>,
    stack: Vec<u8>,
}

impl Prepared {
    /// Prepares to start `argv`; the errno of an argument the exec cannot
    /// take (EINVAL: a NUL byte).
    pub fn new(argv: &[OsString]) -> io::Result<Prepared> {
        let program = argv
            .first()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        let inherited = std::env::vars_os()
            .map(|(key, value)| entry(&key, &value))
            .collect::<io::Result<_>>()?;
        Ok(Prepared {
            argv: argv
                .iter()
                .map(|a| c_string(a))
                .collect::<io::Result<_>>()?,
            candidates: candidates(program)?,
            inherited,
            stack: vec![0u8; STACK_SIZE],
        })
    }
}

/// Starts the prepared command with `env` added to our environment
/// (overriding) in process group `pgid` (0: a new group), with the signals
/// in `keep_ignored` (one bit each) left ignored and every other at its
/// default; returns the child's pid, or the errno of the failed exec
/// (ENOENT: not found).
pub fn launch(
    prepared: &mut Prepared,
    env: &[(&str, String)],
    terminal: Option<libc::c_int>,
    pgid: libc::pid_t,
    keep_ignored: u64,
) -> io::Result<libc::pid_t> {
    let added: Vec<CString> = env
        .iter()
        .map(|(key, value)| entry(OsStr::new(key), OsStr::new(value)))
        .collect::<io::Result<_>>()?;
    let mut plan = Plan {
        candidates: &prepared.candidates,
        argv: pointers(prepared.argv.iter().map(CString::as_c_str)),
        sh_argv: [SH.as_ptr().cast(), std::ptr::null()]
            .into_iter()
            .chain(prepared.argv[1..].iter().map(|a| a.as_ptr()))
            .chain([std::ptr::null()])
            .collect(),
        envp: pointers(environment(&prepared.inherited, &added).into_iter()),
        terminal,
        pgid,
        keep_ignored,
        // SAFETY: getpid has no preconditions.
        zklock_pid: unsafe { libc::getpid() },
        error: AtomicI32::new(0),
    };
    let plan_ptr: *mut Plan<'_> = &mut plan;
    // SAFETY: CLONE_VFORK suspends this thread until the child execs or
    // exits, so `plan` and the stack outlive its use of them; the child runs
    // only `child_main`, which does not allocate.
    let pid = unsafe {
        clone_sharing_memory(
            child_main,
            &mut prepared.stack,
            libc::CLONE_VFORK,
            plan_ptr.cast(),
        )?
    };
    match plan.error.load(Ordering::SeqCst) {
        0 => Ok(pid),
        errno => {
            // The child exited without exec: reap it here, it is not the command.
            // SAFETY: waitpid on our own child, status discarded.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// Starts `entry(arg)` in a child process that shares our memory
/// (CLONE_VM, plus `flags`), running on `stack`, and reporting its exit to
/// us with SIGCHLD. Every signal is blocked in this thread around the
/// clone, and the child starts with that mask: our handlers (which write to
/// our signal pipe) must never run in it before it has reset them, or at
/// all.
///
/// # Safety
///
/// `entry` must allocate nothing and call only async-signal-safe
/// functions, and `stack` and whatever `arg` points to must stay valid and
/// untouched by us for as long as the child uses them.
unsafe fn clone_sharing_memory(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    stack: &mut [u8],
    flags: libc::c_int,
    arg: *mut libc::c_void,
) -> io::Result<libc::pid_t> {
    // The stack grows down on every architecture Linux runs zklock on;
    // keep the top 16-byte aligned as the ABIs require.
    let top = ((stack.as_mut_ptr() as usize + stack.len()) & !15) as *mut libc::c_void;
    // SAFETY: the signal masks are plain data; the clone's preconditions
    // are this function's own.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
        let pid = libc::clone(entry, top, libc::CLONE_VM | flags | libc::SIGCHLD, arg);
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        Ok(pid)
    }
}

/// The child: runs on its own stack, in our memory, until it execs.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `Plan`, alive and untouched by the parent
    // (suspended by CLONE_VFORK) until we exec or exit.
    let plan = unsafe { &mut *arg.cast::<Plan<'_>>() };
    let errno = match prepare_child(plan) {
        Ok(()) => exec_first(plan),
        Err(errno) => errno,
    };
    plan.error.store(errno, Ordering::SeqCst);
    // SAFETY: _exit ends only this child, without running exit handlers.
    unsafe { libc::_exit(127) }
}

/// Tries each candidate as execvp does; returns the errno to report.
fn exec_first(plan: &mut Plan<'_>) -> libc::c_int {
    let mut denied = false;
    for candidate in plan.candidates {
        // SAFETY: null-terminated arrays of pointers to NUL-terminated strings
        // owned by the parent, which is suspended.
        let errno = unsafe {
            libc::execve(candidate.as_ptr(), plan.argv.as_ptr(), plan.envp.as_ptr());
            *libc::__errno_location()
        };
        match errno {
            libc::ENOEXEC => {
                plan.sh_argv[1] = candidate.as_ptr();
                // SAFETY: as above; sh_argv[1] now points at the candidate.
                unsafe {
                    libc::execve(
                        SH.as_ptr().cast(),
                        plan.sh_argv.as_ptr(),
                        plan.envp.as_ptr(),
                    )
                };
                // SAFETY: reading errno after a failed call.
                return unsafe { *libc::__errno_location() };
            }
            libc::EACCES => denied = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            other => return other,
        }
    }
    if denied { libc::EACCES } else { libc::ENOENT }
}

/// Everything the command must not inherit from zklock: its signal handlers
/// and the signals it ignores itself (exec keeps SIG_IGN; Rust ignores
/// SIGPIPE), its blocked signals, its process group and its terminal
/// foreground. Signals ignored when zklock started stay ignored. Returns an
/// errno.
fn prepare_child(plan: &Plan<'_>) -> Result<(), libc::c_int> {
    let (terminal, pgid) = (plan.terminal, plan.pgid);
    let errno = || {
        // SAFETY: reading errno after a failed call.
        unsafe { *libc::__errno_location() }
    };
    // SAFETY: async-signal-safe syscalls on stack data.
    unsafe {
        // glibc's sigaction refuses the two signals it reserves (32 and 33),
        // yet they can arrive ignored (glibc's own posix_spawn leaves them
        // so), and exec keeps them ignored. The raw syscall resets all of
        // them. An all-zero kernel sigaction is SIG_DFL with no flags and an
        // empty mask, whatever the architecture's field order.
        let default = [0u64; 4];
        for signal in 1..=64 {
            let kept = plan.keep_ignored & crate::command::signals::set(&[signal]) != 0;
            if signal != libc::SIGKILL && signal != libc::SIGSTOP && !kept {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    signal,
                    default.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    8usize,
                );
            }
        }
        if libc::setpgid(0, pgid) != 0 {
            return Err(errno());
        }
        if let Some(fd) = terminal {
            // Every signal is still blocked (SIGTTOU among them), so this
            // succeeds although our group is not the foreground yet.
            libc::tcsetpgrp(fd, libc::getpgrp());
        }
        // If zklock dies (even by SIGKILL), the command must not run on
        // without the lock. This fires when the creating thread exits: zklock
        // starts the command from its main thread, which lives as long as zklock.
        // It reaches this process only; the keeper kills the rest of the group.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
            return Err(errno());
        }
        if libc::getppid() != plan.zklock_pid {
            return Err(libc::ESRCH);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    Ok(())
}

fn c_string(text: &OsStr) -> io::Result<CString> {
    CString::new(text.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn pointers<'a>(strings: impl Iterator<Item = &'a CStr>) -> Vec<*const libc::c_char> {
    strings
        .map(CStr::as_ptr)
        .chain([std::ptr::null()])
        .collect()
}

/// `KEY=VALUE`.
fn entry(key: &OsStr, value: &OsStr) -> io::Result<CString> {
    let mut entry = key.as_bytes().to_vec();
    entry.push(b'=');
    entry.extend_from_slice(value.as_bytes());
    CString::new(entry).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The `inherited` entries that `added` does not replace, then `added`.
fn environment<'a>(inherited: &'a [CString], added: &'a [CString]) -> Vec<&'a CStr> {
    let key = |entry: &'a CString| {
        let bytes = entry.as_bytes();
        &bytes[..bytes.iter().position(|&b| b == b'=').unwrap_or(bytes.len())]
    };
    inherited
        .iter()
        .filter(|old| !added.iter().any(|new| key(new) == key(old)))
        .chain(added)
        .map(CString::as_c_str)
        .collect()
}

/// Finds `program` as [`launch`] will, without running it: Ok if some
/// candidate is an executable file; else the errno the exec would fail with
/// (ENOENT: not found; EACCES: found but not executable). Checked before
/// connecting, so a typo does not wait for the lock; the exec checks again.
pub fn resolve(program: &OsStr) -> io::Result<()> {
    let mut denied = false;
    for candidate in candidates(program)? {
        let Ok(meta) = std::fs::metadata(OsStr::from_bytes(candidate.to_bytes())) else {
            continue;
        };
        // SAFETY: access reads the NUL-terminated path and nothing else.
        let executable = unsafe { libc::access(candidate.as_ptr(), libc::X_OK) } == 0;
        if meta.is_file() && executable {
            return Ok(());
        }
        denied = true;
    }
    Err(io::Error::from_raw_os_error(if denied {
        libc::EACCES
    } else {
        libc::ENOENT
    }))
}

/// The paths execvp would try for `program`.
fn candidates(program: &OsStr) -> io::Result<Vec<CString>> {
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if program.as_bytes().contains(&b'/') {
        return Ok(vec![c_string(program)?]);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    path.as_bytes()
        .split(|&b| b == b':')
        .map(|dir| {
            let mut full = if dir.is_empty() {
                b".".to_vec()
            } else {
                dir.to_vec()
            };
            full.push(b'/');
            full.extend_from_slice(program.as_bytes());
            CString::new(full).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_follow_execvp() {
        let names = |p: &str| candidates(OsStr::new(p)).unwrap();
        assert_eq!(names("./x"), [CString::new("./x").unwrap()]);
        assert_eq!(names("/bin/sh"), [CString::new("/bin/sh").unwrap()]);
        let found = names("sh");
        assert!(
            found.iter().all(|c| c.to_bytes().ends_with(b"/sh")),
            "{found:?}"
        );
        assert!(candidates(OsStr::new("")).is_err());
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
    fn environment_overrides_inherited_values() {
        let strings = |entries: &[&str]| -> Vec<CString> {
            entries.iter().map(|e| CString::new(*e).unwrap()).collect()
        };
        let inherited = strings(&["A=1", "ZKLOCK_NODE=old", "ZKLOCK_NODEX=2", "B=x=y"]);
        let added = strings(&["ZKLOCK_NODE=new"]);
        let env: Vec<&str> = environment(&inherited, &added)
            .into_iter()
            .map(|e| e.to_str().unwrap())
            .collect();
        assert_eq!(env, ["A=1", "ZKLOCK_NODEX=2", "B=x=y", "ZKLOCK_NODE=new"]);
    }

    #[test]
    fn launches_and_reports_exec_failures() {
        let start = |argv: &[&str]| {
            let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
            launch(&mut Prepared::new(&argv)?, &[], None, 0, 0)
        };
        let pid = start(&["true"]).expect("true starts");
        let mut status = 0;
        // SAFETY: waiting for the child we just started.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        let missing = start(&["/nonexistent/zklock-test"]).unwrap_err();
        assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
        let directory = start(&["/"]).unwrap_err();
        assert_eq!(directory.raw_os_error(), Some(libc::EACCES));
    }
}
