//! Which process a hold binds to (docs/design.md, "Holds"): the script's
//! shell, which is not always zklock's parent. A command substitution runs
//! in a subshell that ends as soon as zklock prints: bash, dash, zsh and
//! busybox sh exec zklock in it only when it is a lone simple command, and
//! fork it otherwise (a redirection, `|| exit`, an ERR trap with `set -E`,
//! a function, a pipeline). Such a subshell writes its stdout into a pipe
//! its parent reads, and is a fork of that parent (the same command line):
//! the hold goes up past it. A wrapper that waits for zklock and then ends
//! (`timeout`, `sudo`) is passed over inside a substitution the same way,
//! and refused outside one, where nothing shows who runs the steps.

use std::os::fd::OwnedFd;

use anyhow::{Context, Result};
use rustix::process::{Pid, PidfdFlags};

use crate::command::steps::Stat;
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
    let mut child = seen(me).context("reading this process in /proc")?;
    let mut child_fd = pidfd(me)?;
    loop {
        let parent_pid = child.ppid;
        let parent_fd = pidfd(parent_pid)?;
        // Still the child's parent after the pidfd was taken: it is the
        // process the pidfd names, not a later one with its pid.
        let parent = seen(parent_pid);
        let still = Stat::of(child.pid).is_some_and(|s| s.ppid == parent_pid) && alive(&child_fd);
        let Some(parent) = parent.filter(|_| still) else {
            return Err(Failure::usage(
                "the process that called zklock hold has exited",
            ));
        };
        let goes_on = child.pid != me
            && parent.ppid > 0
            && passes_over(&child, &parent, reads_pipe(parent_pid, &child));
        if !goes_on {
            if child.pid == me {
                // Our parent, unless it is about to end.
                if is_wrapper(&parent.name) && !reads_pipe(parent.ppid, &parent) {
                    return Err(Failure::usage(format!(
                        "zklock hold is run by {} (pid {}), which ends with it: the hold \
                         would end at once. Call zklock hold from the script's shell itself \
                         (-w bounds the wait)",
                        parent.name, parent.pid
                    )));
                }
                child = parent;
                child_fd = parent_fd;
                continue;
            }
            return Ok((child.pid, child_fd));
        }
        child = parent;
        child_fd = parent_fd;
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

/// Whether `reader` has the pipe `process` writes its stdout to open (so
/// it waits for what `process` prints: a command substitution).
fn reads_pipe(reader: i32, process: &Seen) -> bool {
    let Some(pipe) = &process.stdout_pipe else {
        return false;
    };
    let Ok(fds) = std::fs::read_dir(format!("/proc/{reader}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|link| link.to_str() == Some(pipe.as_str()))
    })
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
