//! A hold's steps (docs/design.md, "Holds"): the process a hold is bound to
//! (the script's shell), every process descended from it, and, when it
//! leads its process group, every process of that group (a step its parent
//! left behind keeps the group's id); once signalled, a step stays one
//! while it runs, with what it starts. Found by a scan of /proc: holds are
//! not their steps' parents, so no cheaper walk reaches them.

use std::collections::{HashMap, HashSet};

use rustix::process::{Pid, Signal};

use super::process::Stat;

/// The steps of a hold bound to `bound`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steps {
    pub bound: i32,
    /// `bound`'s process group, when `bound` leads it (its own job: started
    /// from a terminal, by cron's shell, by systemd); never a group it only
    /// belongs to, which may hold its caller's caller (a CI runner).
    pub group: Option<i32>,
    /// Every process signalled as a step, by pid and start time (which a
    /// reused pid does not share). A step that traps TERM to clean up
    /// outlives its shell, which the same TERM ends when the bound process
    /// does not lead its group: orphaned, it leaves the tree, but it is
    /// still a step until it exits, so its KILL comes and the lock waits.
    signalled: HashSet<(i32, u64)>,
}

impl Steps {
    pub fn new(bound: i32, group: Option<i32>) -> Steps {
        Steps {
            bound,
            group,
            signalled: HashSet::new(),
        }
    }

    /// The steps of `bound`, as it is now.
    pub fn of(bound: i32) -> Steps {
        let group = Stat::of(bound)
            .filter(|stat| stat.pgrp == bound)
            .map(|stat| stat.pgrp);
        Steps::new(bound, group)
    }

    /// The running steps among `table` (every process's stat; the bound
    /// process counted only while `bound_alive`, whose pid may be reused
    /// once it is gone).
    pub fn running(&self, table: &[Stat], bound_alive: bool) -> Vec<i32> {
        self.found(table, bound_alive)
            .iter()
            .map(|stat| stat.pid)
            .collect()
    }

    /// [`Steps::running`], as their stats, by pid.
    fn found<'t>(&self, table: &'t [Stat], bound_alive: bool) -> Vec<&'t Stat> {
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        for stat in table {
            children.entry(stat.ppid).or_default().push(stat.pid);
        }
        let mut found = HashSet::new();
        let mut todo: Vec<i32> = (table.iter())
            .filter(|stat| self.signalled.contains(&(stat.pid, stat.start_time)))
            .map(|stat| stat.pid)
            .collect();
        if bound_alive {
            todo.push(self.bound);
        }
        while let Some(pid) = todo.pop() {
            if found.insert(pid) {
                todo.extend(children.get(&pid).into_iter().flatten());
            }
        }
        if let Some(group) = self.group {
            found.extend(table.iter().filter(|s| s.pgrp == group).map(|s| s.pid));
        }
        let mut steps: Vec<&Stat> = (table.iter())
            .filter(|stat| !stat.zombie && found.contains(&stat.pid))
            .collect();
        steps.sort_unstable_by_key(|stat| stat.pid);
        steps
    }

    /// The running steps now, but `except` (the holder's own processes).
    pub fn scan(&self, bound_alive: bool, except: &[i32]) -> Vec<i32> {
        let mut steps = self.running(&process_table(), bound_alive);
        steps.retain(|pid| !except.contains(pid));
        steps
    }

    /// Sends `signal` (and CONT after TERM: a stopped step acts on TERM only
    /// once continued) to every running step, a step from now on while it
    /// runs; returns how many there were.
    pub fn signal(&mut self, signal: Signal, bound_alive: bool, except: &[i32]) -> usize {
        let table = process_table();
        let mut steps = self.found(&table, bound_alive);
        steps.retain(|stat| !except.contains(&stat.pid));
        for stat in &steps {
            self.signalled.insert((stat.pid, stat.start_time));
            if let Some(pid) = Pid::from_raw(stat.pid) {
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
        let in_runners_group = Steps::new(20, None);
        assert_eq!(in_runners_group.running(&table, true), vec![20, 21, 22]);
        assert_eq!(in_runners_group.running(&table, false), Vec::<i32>::new());
        let leading = Steps::new(20, Some(20));
        assert_eq!(leading.running(&table, true), vec![20, 21, 22, 30]);
        // Gone, the bound process leaves its group's stragglers.
        assert_eq!(leading.running(&table, false), vec![30]);
    }

    #[test]
    fn zombies_are_no_steps() {
        let mut dead = stat(21, 20, 20);
        dead.zombie = true;
        let table = [stat(20, 1, 20), dead];
        let steps = Steps::new(20, Some(20));
        assert_eq!(steps.running(&table, true), vec![20]);
    }

    #[test]
    fn a_signalled_step_stays_one_while_it_runs() {
        // 20 the script in its runner's group, 21 a step that traps TERM,
        // 22 what 21 starts to clean up.
        let table = [stat(10, 1, 10), stat(20, 10, 10), stat(21, 20, 10)];
        let mut steps = Steps::new(20, None);
        for stat in &table[1..] {
            steps.signalled.insert((stat.pid, stat.start_time));
        }
        // TERM ended the script; 21 was orphaned, and started 22.
        let orphaned = [stat(10, 1, 10), stat(21, 1, 10), stat(22, 21, 10)];
        assert_eq!(steps.running(&orphaned, false), vec![21, 22]);
        // A process that took 21's pid later is not a step.
        let mut reused = stat(21, 1, 10);
        reused.start_time = 2;
        assert_eq!(steps.running(&[reused], false), Vec::<i32>::new());
    }
}
