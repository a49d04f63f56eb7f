//! The keeper: a tiny process that turns zklock's death, by any signal, into
//! SIGKILL of the command's whole process group.
//!
//! Why: the parent-death signal (set on the command in spawn.rs) reaches the
//! command's first process only. After `kill -9` of zklock (or the OOM
//! killer's, which is the same kill) the processes the command started --
//! pipelines, `sh -c 'a; b'`, background jobs -- ran on after the session
//! expired and the next holder started.
//!
//! How:
//!
//! * Before the command, zklock starts the keeper K and makes it the leader
//!   of a new process group G, whose id is K's pid; the command joins G
//!   instead of making its own. K holds the read end of a pipe whose write
//!   end only zklock holds (close-on-exec: the command never has it). When
//!   zklock dies the kernel closes it, K's read() returns EOF, and K sends
//!   SIGKILL to G.
//! * G's id is K's pid, and only the process with that pid can create a
//!   group with that id. So while K lives, G cannot be replaced by a
//!   stranger's group, and K's kill(-G) can never hit a stranger, even once
//!   G is empty. zklock never reaps K (its zombie is left to init once
//!   zklock exits; as PID 1, zklock notes when waitpid(-1) took it), so K's
//!   pid stays reserved for as long as zklock itself might signal G too.
//! * Once the command has joined G, zklock moves K out of G into zklock's
//!   own group. Signals forwarded to G then never reach K (it blocks all
//!   signals anyway, but SIGSTOP cannot be blocked), and "is the group
//!   empty?" stays one kill(-G, 0) that fails with ESRCH, as before the
//!   keeper: with K in G that check would need a scan of every process's
//!   /proc stat file on every run, on the hand-off's path.
//! * Starting K must stay off the hand-off's bill. zklock starts it before
//!   it connects (`Child::prepare`), so a waiter has its K when the lock
//!   comes (queue hand-off 1.90 to 1.77 ms median on the bench machine);
//!   while zklock waits, K blocks in read(), sharing zklock's memory. A fork
//!   copies zklock's page tables and then faults on every page either side
//!   writes (about 0.5 ms here, see spawn.rs). So K is a clone(CLONE_VM) child, without
//!   CLONE_VFORK: zklock does not wait for it. It runs an allocation-free
//!   function on a leaked stack, making system calls directly (it shares our
//!   memory and, having no TLS of its own, our main thread's errno, which it
//!   must not write).
//! * But a process sharing zklock's memory dies with zklock at the hands of
//!   the OOM killer, which kills every process using the victim's memory. So
//!   once zklock has moved it out of G (which the kernel allows only before
//!   exec), and the command still runs 100 ms later, K execs the zklock
//!   binary in a hidden mode that only waits for EOF and kills G: it then
//!   has memory of its own. Until that exec is done (about 100 ms after the
//!   command started), an OOM kill of zklock takes K along, and only the
//!   command's parent-death signal remains; a `kill -9` is covered from the
//!   start. The delay keeps the exec (about 0.3 ms of CPU) away from short
//!   commands, which hand-offs are made of: without it the bench's hand-offs
//!   got slower on a busy machine. If the exec fails (no /proc), K keeps
//!   watching from the shared memory.
//! * zklock kills K when the command could not be started or the run ends
//!   without it. After a command, K ends when zklock does: its read() sees
//!   EOF, the empty group's kill fails harmlessly, K exits. Killing it as
//!   soon as the group was empty, as before, put K's exit (a whole
//!   process's, once it has exec'd) beside the delete the next waiter waits
//!   for: a one-waiter hand-off 0.15 ms slower on the bench machine.
//!
//! Alternatives weighed: a forked keeper (the page-table copy on
//! every run); a keeper started by exec before the command (the exec on the
//! hand-off path, and an exec'd K could not be moved out of G); K staying in
//! G (a /proc scan per run); a keeper outside G that kills the command's
//! pid as a group id (that id is free once init reaps the command).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::command::spawn::clone_sharing_memory;

/// argv[1] of the keeper's hidden mode. Not an option clap knows: `main`
/// checks for it before parsing, and nobody types it by accident.
pub const HIDDEN_MODE: &str = "\u{1}zklock-keeper";
const HIDDEN_MODE_C: &CStr = c"\x01zklock-keeper";
const NAME: &CStr = c"zklock-keeper";
const EXE: &CStr = c"/proc/self/exe";

const STACK_SIZE: usize = 16 * 1024;

/// How long K waits, after the command started, before its exec. Short
/// commands (the ones lock hand-offs are made of) end before it and never
/// pay for the exec, whose CPU would otherwise compete with the next
/// hand-off on a busy machine; for the rest it is the OOM window below.
const EXEC_DELAY_NS: libc::c_long = 100_000_000;

/// The keeper of one command's process group.
pub struct Keeper {
    pid: libc::pid_t,
    /// The write end of the pipe K watches; closing it (by dropping, or by
    /// zklock's death) makes K kill the group.
    write: OwnedFd,
    /// Reaped already (PID 1 reaps everything): its pid may be reused.
    reaped: bool,
}

impl Keeper {
    /// Starts K as the leader of a new process group, whose id is
    /// [`Keeper::pid`]. K kills that group when zklock dies.
    pub fn start() -> io::Result<Keeper> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here only.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // K reads these after we returned, and runs on this stack until it
        // execs or exits, at a time we do not know: both are leaked (16 KiB
        // and 8 bytes, once per run).
        let pipe: &'static [libc::c_int; 2] = Box::leak(Box::new(fds));
        let stack: &'static mut [u8] = Box::leak(vec![0u8; STACK_SIZE].into_boxed_slice());
        // Grows down; 16-byte aligned as the ABIs require.
        // SAFETY: K starts with every signal blocked and keeps them so: our
        // handlers (copied into K) never run there, and signals sent to K
        // cannot end it, except SIGKILL. K runs only `keeper_main`, which
        // allocates nothing, writes nothing of ours, and reads only the
        // leaked `pipe`; its stack is leaked too.
        let pid = unsafe {
            clone_sharing_memory(
                keeper_main,
                stack,
                0,
                (pipe as *const [libc::c_int; 2]).cast_mut().cast(),
            )?
        };
        drop(read);
        let keeper = Keeper {
            pid,
            write,
            reaped: false,
        };
        // Here, not in K: K may not have run yet when the command joins the
        // group, nor when we move it out again (it would then come back).
        // SAFETY: setpgid on our own child that has not exec'd.
        if unsafe { libc::setpgid(pid, pid) } != 0 {
            return Err(io::Error::last_os_error()); // dropping `keeper` kills K
        }
        Ok(keeper)
    }

    /// K's pid: the id of the command's process group.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Call once the command has joined the group: moves K out of it (see
    /// the module comment) and lets it exec its hidden mode.
    pub fn command_joined(&self) {
        // SAFETY: plain syscalls; K is our child and has not exec'd (it waits
        // for the byte below), so the kernel allows moving it.
        unsafe {
            libc::setpgid(self.pid, libc::getpgrp());
            libc::write(self.write.as_raw_fd(), b"x".as_ptr().cast(), 1);
        }
    }

    /// Lets K end when zklock does (see the module comment), once the
    /// command's group is empty.
    pub fn end_with_zklock(self) {
        // The write end stays open until zklock exits, and K is not killed.
        std::mem::forget(self);
    }

    /// Whether `pid` was K, now reaped by waitpid(-1); its pid is free then.
    pub fn note_reaped(&mut self, pid: libc::pid_t) -> bool {
        let ours = pid == self.pid;
        self.reaped |= ours;
        ours
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if !self.reaped {
            // Not reaped, so the pid is still K's. Not waited for: K is
            // harmless now and off the release's path; a zombie until we exit.
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
        }
    }
}

/// K before its exec: in our memory, on its own stack, system calls only.
extern "C" fn keeper_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the leaked pipe array, never written after the clone.
    let [read, write] = unsafe { *arg.cast::<[libc::c_int; 2]>() };
    // SAFETY: raw system calls on K's own process state and descriptors.
    unsafe {
        // Only zklock may hold the write end, or its death is not an EOF.
        sys(libc::SYS_close, write as usize, 0, 0);
        // Descriptor 0 becomes the read end, kept across exec; every other
        // descriptor (zklock's socket, stdout, ...) goes.
        if read != 0 {
            sys(libc::SYS_dup3, read as usize, 0, 0);
            sys(libc::SYS_close, read as usize, 0, 0);
        } else {
            sys(libc::SYS_fcntl, 0, libc::F_SETFD as usize, 0);
        }
        // Before Linux 5.9 (ENOSYS) the close-on-exec ones go at exec.
        sys(libc::SYS_close_range, 1, u32::MAX as usize, 0);
    }
    watch(true)
}

/// Whether this process is K after its exec: exactly one argument, ours.
pub fn is_hidden_mode() -> bool {
    let mut args = std::env::args_os().skip(1);
    args.next().is_some_and(|arg| arg == HIDDEN_MODE) && args.next().is_none()
}

/// The hidden mode of the zklock binary: K after its exec.
pub fn run_hidden_mode() -> ! {
    // SAFETY: names this process for ps and top; the string is static.
    unsafe { libc::prctl(libc::PR_SET_NAME, NAME.as_ptr()) };
    watch(false)
}

/// Waits on descriptor 0 for EOF (zklock gone or done), then kills the
/// group K made. A byte means "moved out of the group, exec now".
fn watch(mut exec_on_byte: bool) -> ! {
    let mut byte = 0u8;
    loop {
        // SAFETY: reads at most one byte into a local.
        let n = unsafe { sys(libc::SYS_read, 0, (&raw mut byte) as usize, 1) };
        if n == 1 {
            if exec_on_byte && !readable_within(EXEC_DELAY_NS) {
                exec_on_byte = false;
                let argv = [NAME.as_ptr(), HIDDEN_MODE_C.as_ptr(), std::ptr::null()];
                let envp: [*const libc::c_char; 1] = [std::ptr::null()];
                // SAFETY: NUL-terminated static strings in null-terminated
                // arrays on this stack. On failure, keep watching from here.
                unsafe {
                    sys(
                        libc::SYS_execve,
                        EXE.as_ptr() as usize,
                        argv.as_ptr() as usize,
                        envp.as_ptr() as usize,
                    )
                };
            }
            continue;
        }
        if n != -(libc::EINTR as isize) {
            break;
        }
    }
    // SAFETY: K's own pid is the group's id (see the module comment).
    unsafe {
        let group = sys(libc::SYS_getpid, 0, 0, 0);
        sys(libc::SYS_kill, (-group) as usize, libc::SIGKILL as usize, 0);
        sys(libc::SYS_exit_group, 0, 0, 0);
    }
    unreachable!("exit_group returned")
}

/// Whether descriptor 0 becomes readable (EOF included) within `ns`.
fn readable_within(ns: libc::c_long) -> bool {
    let mut poll = libc::pollfd {
        fd: 0,
        events: libc::POLLIN,
        revents: 0,
    };
    let timeout = libc::timespec {
        tv_sec: 0,
        tv_nsec: ns,
    };
    // SAFETY: ppoll reads and writes the locals; no signal mask (null).
    let n = unsafe {
        sys4(
            libc::SYS_ppoll,
            (&raw mut poll) as usize,
            1,
            (&raw const timeout) as usize,
            0,
        )
    };
    n != 0
}

/// [`sys4`] with three arguments.
///
/// # Safety
/// As for the system call made.
unsafe fn sys(number: libc::c_long, a: usize, b: usize, c: usize) -> isize {
    // SAFETY: the caller vouches for the call.
    unsafe { sys4(number, a, b, c, 0) }
}

/// A system call that returns -errno instead of writing errno: before its
/// exec K shares our main thread's TLS, and with it errno.
///
/// # Safety
/// As for the system call made.
#[cfg(target_arch = "x86_64")]
unsafe fn sys4(number: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the x86_64 Linux system call convention; the caller vouches
    // for the call itself.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") number as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// See the x86_64 version.
///
/// # Safety
/// As for the system call made.
#[cfg(target_arch = "aarch64")]
unsafe fn sys4(number: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the aarch64 Linux system call convention; the caller vouches
    // for the call itself.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") a as isize => ret,
            in("x1") b,
            in("x2") c,
            in("x3") d,
            options(nostack),
        );
    }
    ret
}

/// Elsewhere libc's wrapper, which writes errno when a call fails. K's
/// calls do not fail in practice (execve without /proc is the exception),
/// and a stray errno in zklock's main thread is read only right after a
/// failed call of its own.
///
/// # Safety
/// As for the system call made.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn sys4(number: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    // SAFETY: the caller vouches for the call.
    let ret = unsafe { libc::syscall(number, a, b, c, d) };
    if ret == -1 {
        // SAFETY: reading errno after a failed call.
        -(unsafe { *libc::__errno_location() } as isize)
    } else {
        ret as isize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_field(pid: libc::pid_t, index: usize) -> Option<String> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        rest.split_whitespace().nth(index).map(str::to_owned)
    }

    #[test]
    fn leads_a_group_and_dies_when_dropped() {
        let keeper = Keeper::start().expect("keeper starts");
        let pid = keeper.pid();
        // Field 2 after the name is the process group.
        assert_eq!(stat_field(pid, 2), Some(pid.to_string()));
        drop(keeper);
        let mut status = 0;
        // SAFETY: waiting for the child we started.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
    }
}
