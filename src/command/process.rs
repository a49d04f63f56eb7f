//! What `/proc/PID/stat` says of a process: the one parser of that line.
//!
//! Ids are read from /proc rather than asked of the kernel by getsid(2) or
//! getpgrp(2) because they can be 0, which rustix's `Pid` cannot hold: in
//! a process whose session and group are the kernel's own (a child of an
//! init that never called setsid, as some CI machines run their jobs), or
//! whose session leader is outside our PID namespace (`docker exec`).

/// The fields of `/proc/PID/stat` that zklock reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub ppid: i32,
    pub pgrp: i32,
    /// The session's id; 0 for the kernel's own session or one led from
    /// outside our PID namespace.
    pub session: i32,
    /// Exited but not reaped (`Z`, `X`): no longer running anything. Not
    /// for a leader that exited while other threads of its process run on
    /// ([`Stat::of`] looks): its process has not exited.
    pub zombie: bool,
    /// When the process started, in clock ticks since boot: with the pid,
    /// it names one process even after the pid is reused.
    pub start_time: u64,
}

impl Stat {
    /// Parses `pid (comm) state ppid pgrp session ... starttime ...`,
    /// where comm may itself contain spaces and parentheses.
    pub fn parse(stat: &str) -> Option<Stat> {
        let (pid, rest) = stat.split_once(" (")?;
        let (_, after_comm) = rest.rsplit_once(')')?;
        // Fields 3 (state) onwards, numbered as in proc(5).
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3).copied();
        let number = |n: usize| field(n)?.parse().ok();
        Some(Stat {
            pid: pid.trim().parse().ok()?,
            ppid: number(4)?,
            pgrp: number(5)?,
            session: number(6)?,
            zombie: matches!(field(3)?, "Z" | "X"),
            start_time: field(22)?.parse().ok()?,
        })
    }

    /// The process `pid`, or `self`.
    pub fn of(pid: impl std::fmt::Display) -> Option<Stat> {
        let mut stat = Stat::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
        // The leader's line says Z once its own thread exits (pthread_exit
        // in main), while the others run on.
        if stat.zombie {
            stat.zombie = !other_threads_run(stat.pid);
        }
        Some(stat)
    }
}

/// Whether a thread of process `pid` but its leader is still running.
fn other_threads_run(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .flatten()
        .filter(|task| task.file_name().to_str() != Some(&pid.to_string()))
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .filter_map(|line| Stat::parse(&line))
        .any(|thread| !thread.zombie)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_names() {
        let line = "4242 (my (odd) name) S 4000 4242 4000 34816 4242 4194304 0 0 0 0 1 2 0 0 \
                    20 0 1 0 987654 1000 100";
        assert_eq!(
            Stat::parse(line),
            Some(Stat {
                pid: 4242,
                ppid: 4000,
                pgrp: 4242,
                session: 4000,
                zombie: false,
                start_time: 987_654,
            })
        );
        let zombie = "1 (init) Z 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0";
        assert!(Stat::parse(zombie).is_some_and(|s| s.zombie));
        assert_eq!(Stat::parse("4242 (x) S 1"), None);
        assert_eq!(Stat::parse("garbage"), None);
    }

    #[test]
    fn a_session_led_from_outside_the_namespace_reads_as_0() {
        let line = "7 (sh) S 0 0 0 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 42 1000 100";
        let stat = Stat::parse(line).unwrap();
        assert_eq!((stat.ppid, stat.pgrp, stat.session), (0, 0, 0));
    }

    #[test]
    fn our_own_stat_is_read() {
        let mine = Stat::of("self").unwrap();
        assert_eq!(mine.pid, std::process::id() as i32);
        assert!(mine.start_time > 0);
    }
}
