//! Commands that write down when they ran, for tests that check intervals
//! across hosts of one machine (network namespaces share the clock and the
//! files): bash's $EPOCHREALTIME, seconds since the epoch, on every line.

use std::path::Path;

/// A recording command: start, a heartbeat every 20 ms, end on TERM.
pub fn recording(log: &Path, name: &str) -> String {
    let line = |kind: &str| {
        format!(
            "echo \"{kind} {name} $EPOCHREALTIME\" >> '{}'",
            log.display()
        )
    };
    format!(
        "trap '{end}; exit 143' TERM\n{start}\nfor i in $(seq 3000); do {beat}; sleep 0.02; done\n{end}\n",
        start = line("start"),
        beat = line("beat"),
        end = line("end"),
    )
}

/// `name`'s (first start, last line) in the log, as seconds since the epoch.
pub fn interval(log: &str, name: &str) -> Option<(f64, f64)> {
    let times: Vec<(&str, f64)> = (log.lines())
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let kind = words.next()?;
            (words.next()? == name).then_some(())?;
            Some((kind, words.next()?.parse().ok()?))
        })
        .collect();
    let start = times.iter().find(|(kind, _)| *kind == "start")?.1;
    Some((start, times.last()?.1))
}

/// A command that writes only its start.
pub fn stamped_start(log: &Path, name: &str) -> String {
    format!(
        "echo \"start {name} $EPOCHREALTIME\" >> '{}'",
        log.display()
    )
}
