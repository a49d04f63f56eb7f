//! A hold's steps (docs/design.md, "Holds"): the process a hold is bound to
//! (the script's shell), every process descended from it, and, when it
//! leads its process group, every process of that group (a step its parent
//! left behind keeps the group's id). Found by a scan of /proc: holds are
//! not their steps' parents, so no cheaper walk reaches them.

use std::collections::{HashMap, HashSet};

use rustix::process::{Pid, Signal};

use super::process::Stat;

/// The steps of a hold bound to `bound`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    pub bound: i32,
    /// `bound`'s process group, when `bound` leads it (its own job: started
    /// from a terminal, by cron's shell, by systemd); never a group it only
    /// belongs to, which may hold its caller's caller (a CI runner).
    pub group: Option<i32>,
}

impl Steps {
    /// The steps of `bound`, as it is now.
    pub fn of(bound: i32) -> Steps {
        let group = Stat::of(bound)
            .filter(|stat| stat.pgrp == bound)
            .map(|stat| stat.pgrp);
        Steps { bound, group }
    }

    /// The running steps among `table` (every process's stat; the bound
    /// process counted only while `bound_alive`, whose pid may be reused
    /// once it is gone).
    pub fn running(&self, table: &[Stat], bound_alive: bool) -> Vec<i32> {
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for stat in table {
            children.entry(stat.ppid).or_default().push(stat.pid);
        }
        let mut found = HashSet::new();
        if bound_alive {
            let mut todo = vec![self.bound];
            while let Some(pid) = todo.pop() {
                if found.insert(pid) {
                    todo.extend(children.get(&pid).into_iter().flatten());
                }
            }
        }
        if let Some(group) = self.group {
            found.extend(table.iter().filter(|s| s.pgrp == group).map(|s| s.pid));
        }
        let running: HashSet<i32> = table.iter().filter(|s| !s.zombie).map(|s| s.pid).collect();
        let mut steps: Vec<i32> = found
            .into_iter()
            .filter(|pid| running.contains(pid))
            .collect();
        steps.sort_unstable();
        steps
    }

    /// The running steps now, but `except` (the holder's own processes).
    pub fn scan(&self, bound_alive: bool, except: &[i32]) -> Vec<i32> {
        let mut steps = self.running(&process_table(), bound_alive);
        steps.retain(|pid| !except.contains(pid));
        steps
    }

    /// Sends `signal` (and CONT after TERM: a stopped step acts on TERM only
    /// once continued) to every running step; returns how many there were.
    pub fn signal(&self, signal: Signal, bound_alive: bool, except: &[i32]) -> usize {
        let steps = self.scan(bound_alive, except);
        for &pid in &steps {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, signal);
                if signal == Signal::TERM {
                    let _ = rustix::process::kill_process(pid, Signal::CONT);
                }
            }
        }
        steps.len()
    }
}

/// Every process's stat (those that vanish meanwhile are left out).
pub fn process_table() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(Stat::of)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: i32, ppid: i32, pgrp: i32) -> Stat {
        Stat {
            pid,
            ppid,
            pgrp,
            session: 1,
            zombie: false,
            start_time: 1,
        }
    }

    #[test]
    fn steps_are_the_tree_and_a_led_group() {
        // 10 is the runner (group 10), 20 the script in the runner's group
        // with two steps, 30 an orphaned step of group 20, 40 a stranger.
        let table = [
            stat(10, 1, 10),
            stat(20, 10, 10),
            stat(21, 20, 10),
            stat(22, 21, 10),
            stat(30, 1, 20),
            stat(40, 1, 40),
        ];
        let in_runners_group = Steps {
            bound: 20,
            group: None,
        };
        assert_eq!(in_runners_group.running(&table, true), vec![20, 21, 22]);
        assert_eq!(in_runners_group.running(&table, false), Vec::<i32>::new());
        let leading = Steps {
            bound: 20,
            group: Some(20),
        };
        assert_eq!(leading.running(&table, true), vec![20, 21, 22, 30]);
        // Gone, the bound process leaves its group's stragglers.
        assert_eq!(leading.running(&table, false), vec![30]);
    }

    #[test]
    fn zombies_are_no_steps() {
        let mut dead = stat(21, 20, 20);
        dead.zombie = true;
        let table = [stat(20, 1, 20), dead];
        let steps = Steps {
            bound: 20,
            group: Some(20),
        };
        assert_eq!(steps.running(&table, true), vec![20]);
    }
}
