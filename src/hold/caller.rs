//! Which process a hold binds to (docs/design.md, "Holds"): the script's
//! shell, which is not always zklock's parent. A command substitution runs
//! in a subshell that ends as soon as zklock prints: bash, dash, zsh and
//! busybox sh exec zklock in it only when it is a lone simple command, and
//! fork it otherwise (a redirection, `|| exit`, an ERR trap with `set -E`,
//! a function, a pipeline). Such a subshell writes its stdout into a pipe
//! its parent reads, and is a fork of that parent (the same command line):
//! the hold goes up to the process that reads what zklock prints, past
//! any subshell or wrapper (`sh -c`, `timeout`) in between, and on past
//! that reader while it is itself such a subshell (a function or a second
//! `$(...)` that captures zklock's output). Otherwise it
//! goes up from its parent past a substitution's subshells (a pipeline's
//! stage inside one), and refuses a wrapper that waits for zklock and then
//! ends (`timeout`, `sudo`): nothing then shows who runs the steps.

use std::os::fd::OwnedFd;

use anyhow::{Context, Result};
use rustix::process::{Pid, PidfdFlags};

use crate::command::process::Stat;
use crate::exit::Failure;

/// Programs that run zklock as their child and end when it does.
const WRAPPERS: &[&str] = &[
    "timeout", "sudo", "su", "doas", "runuser", "flock", "time", "strace", "ltrace", "xargs",
    "chronic", "setsid",
];

/// What is known of one process on the way up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub pid: i32,
    pub ppid: i32,
    pub name: String,
    pub cmdline: Vec<u8>,
    /// The pipe its stdout is (`pipe:[INODE]`), if it is one.
    pub stdout_pipe: Option<String>,
}

/// One step up from `process`, whose parent is `parent`: whether the hold
/// goes on past `process` to `parent`.
pub fn passes_over(process: &Seen, parent: &Seen, parent_reads: bool) -> bool {
    let inside_substitution = process.stdout_pipe.is_some() && parent_reads;
    let subshell = !process.cmdline.is_empty() && process.cmdline == parent.cmdline;
    inside_substitution && (subshell || is_wrapper(&process.name))
}

pub fn is_wrapper(name: &str) -> bool {
    WRAPPERS.contains(&name)
}

/// The process to bind to, with a pidfd taken while it was surely the one
/// seen (its child, whose pidfd we hold, still had it as its parent).
pub fn bound_process() -> Result<(i32, OwnedFd)> {
    let me = rustix::process::getpid().as_raw_pid();
    let me = (
        seen(me).context("reading this process in /proc")?,
        pidfd(me)?,
    );
    let (mut child, mut child_fd) = match reader_of_our_output(&me)? {
        Some(reader) => reader,
        None => {
            let parent = up(&me.0, &me.1)?;
            if is_wrapper(&parent.0.name) {
                return Err(Failure::usage(format!(
                    "zklock hold is run by {} (pid {}), which ends with it: the hold would \
                     end at once. Call zklock hold from the script's shell itself (-w bounds \
                     the wait)",
                    parent.0.name, parent.0.pid
                )));
            }
            parent
        }
    };
    // The reader may itself be a substitution's subshell (a function or a
    // second `$(...)` around the call), ending as soon as it prints.
    while child.ppid > 1 {
        let (parent, parent_fd) = up(&child, &child_fd)?;
        let reads = child
            .stdout_pipe
            .as_ref()
            .is_some_and(|pipe| reads_pipe(parent.pid, pipe));
        if !passes_over(&child, &parent, reads) {
            break;
        }
        (child, child_fd) = (parent, parent_fd);
    }
    Ok((child.pid, child_fd))
}

/// The ancestor that reads what we print, when our stdout is a pipe: the
/// shell of `eval "$(zklock hold ...)"` or `vars=$(...)`, however many
/// subshells and wrappers stand between it and us (`sh -c`, `timeout`).
fn reader_of_our_output(me: &(Seen, OwnedFd)) -> Result<Option<(Seen, OwnedFd)>> {
    let Some(pipe) = &me.0.stdout_pipe else {
        return Ok(None);
    };
    let (mut child, mut child_fd) = (me.0.clone(), me.1.try_clone()?);
    for _ in 0..64 {
        if child.ppid <= 1 {
            break;
        }
        let (parent, parent_fd) = up(&child, &child_fd)?;
        if reads_pipe(parent.pid, pipe) {
            return Ok(Some((parent, parent_fd)));
        }
        (child, child_fd) = (parent, parent_fd);
    }
    Ok(None)
}

/// `child`'s parent, with a pidfd on it taken while `child` (alive, behind
/// `child_fd`) still had it as its parent: the pidfd names that process,
/// not a later one with its pid.
fn up(child: &Seen, child_fd: &OwnedFd) -> Result<(Seen, OwnedFd)> {
    let parent_fd = pidfd(child.ppid)?;
    let parent = seen(child.ppid);
    let still = Stat::of(child.pid).is_some_and(|s| s.ppid == child.ppid) && alive(child_fd);
    match parent.filter(|_| still) {
        Some(parent) => Ok((parent, parent_fd)),
        None => Err(Failure::usage(
            "the process that called zklock hold has exited",
        )),
    }
}

fn pidfd(pid: i32) -> Result<OwnedFd> {
    let pid =
        Pid::from_raw(pid).ok_or_else(|| Failure::usage("zklock hold has no calling process"))?;
    rustix::process::pidfd_open(pid, PidfdFlags::empty()).context("watching the calling process")
}

/// Whether the process behind `pidfd` is still running.
fn alive(pidfd: &OwnedFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        pidfd,
        rustix::event::PollFlags::IN,
    )];
    rustix::event::poll(&mut fds, Some(&rustix::time::Timespec::default())) == Ok(0)
}

fn seen(pid: i32) -> Option<Seen> {
    let stat = Stat::of(pid)?;
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let stdout = std::fs::read_link(format!("/proc/{pid}/fd/1")).ok();
    let stdout_pipe = stdout
        .and_then(|link| link.to_str().map(str::to_owned))
        .filter(|link| link.starts_with("pipe:"));
    Some(Seen {
        pid,
        ppid: stat.ppid,
        name: name.trim_end().to_owned(),
        cmdline,
        stdout_pipe,
    })
}

/// Whether `reader` has the read end of `pipe` (`pipe:[INODE]`) open: it
/// waits for what is written there (a command substitution). Subshells
/// between hold the write end, as their stdout.
fn reads_pipe(reader: i32, pipe: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{reader}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        let same = std::fs::read_link(fd.path()).is_ok_and(|link| link.to_str() == Some(pipe));
        same && read_only(reader, &fd.file_name().to_string_lossy())
    })
}

/// Whether descriptor `fd` of `pid` is open for reading only (its flags in
/// /proc/PID/fdinfo, octal).
fn read_only(pid: i32, fd: &str) -> bool {
    let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
        return false;
    };
    info.lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
        .is_some_and(|flags| flags & 0o3 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: i32, name: &str, cmdline: &str, pipe: Option<&str>) -> Seen {
        Seen {
            pid,
            ppid: pid - 1,
            name: name.into(),
            cmdline: cmdline.as_bytes().to_vec(),
            stdout_pipe: pipe.map(str::to_owned),
        }
    }

    #[test]
    fn a_substitution_subshell_is_passed_over() {
        let script = process(10, "bash", "bash\0deploy.sh\0", None);
        let subshell = process(11, "bash", "bash\0deploy.sh\0", Some("pipe:[7]"));
        assert!(passes_over(&subshell, &script, true));
        // Not read by the script: a pipeline stage, which runs the steps.
        assert!(!passes_over(&subshell, &script, false));
    }

    #[test]
    fn a_script_whose_output_is_captured_is_not() {
        // `out=$(./deploy.sh)`: deploy.sh's shell runs the steps.
        let outer = process(10, "bash", "bash\0ci.sh\0", None);
        let script = process(11, "bash", "bash\0deploy.sh\0", Some("pipe:[7]"));
        assert!(!passes_over(&script, &outer, true));
    }

    #[test]
    fn a_wrapper_inside_a_substitution_is_passed_over() {
        let script = process(10, "bash", "bash\0deploy.sh\0", None);
        let timeout = process(11, "timeout", "timeout\x0060\0zklock\0", Some("pipe:[7]"));
        assert!(passes_over(&timeout, &script, true));
        let other = process(11, "python3", "python3\0x.py\0", Some("pipe:[7]"));
        assert!(!passes_over(&other, &script, true));
    }
}
