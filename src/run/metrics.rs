//! `--metrics-file FILE`: a report of the run in the Prometheus text
//! format, written at every exit, atomically (docs/design.md, "Metrics
//! file").

use std::cell::Cell;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use tokio::time::Instant;

use crate::exit::{Exit, Failure};
use crate::report;

/// Why a run that held the lock did not run the command (`--once-per`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The job ran successfully within the window.
    Recent,
    /// The last run failed, within `--retry-after`.
    Failed,
}

/// What the lifecycle learned, for the report; shared with the parts that
/// learn it.
#[derive(Debug)]
pub struct Facts {
    started: Instant,
    /// When the lock was taken, and its fencing token.
    acquired: Cell<Option<(Instant, SystemTime, i64)>>,
    /// Server milliseconds of the last successful run's start, from the
    /// `--once-per` record (including this run once it is recorded), never
    /// after the server's time (`record::reported_success`).
    last_success_ms: Cell<Option<i64>>,
    skipped: Cell<Option<Skip>>,
    ran: Cell<bool>,
    /// Failed `--ping`s, when it is given.
    ping_failures: Cell<Option<u32>>,
}

impl Facts {
    pub fn new() -> Facts {
        Facts {
            started: Instant::now(),
            acquired: Cell::new(None),
            last_success_ms: Cell::new(None),
            skipped: Cell::new(None),
            ran: Cell::new(false),
            ping_failures: Cell::new(None),
        }
    }

    pub fn acquired(&self, fencing_token: i64) {
        let now = (Instant::now(), SystemTime::now(), fencing_token);
        self.acquired.set(Some(now));
    }

    /// The fencing token recorded as acquired, if any.
    #[cfg(test)]
    pub fn token(&self) -> Option<i64> {
        self.acquired.get().map(|(_, _, token)| token)
    }

    pub fn last_success(&self, server_ms: Option<i64>) {
        self.last_success_ms.set(server_ms);
    }

    pub fn skipped(&self, why: Skip) {
        self.skipped.set(Some(why));
    }

    /// Why the command was skipped, if it was.
    pub fn skip(&self) -> Option<Skip> {
        self.skipped.get()
    }

    pub fn ran(&self) {
        self.ran.set(true);
    }

    /// Whether this host ran the command.
    pub fn has_run(&self) -> bool {
        self.ran.get()
    }

    pub fn ping_failures(&self, failures: Option<u32>) {
        self.ping_failures.set(failures);
    }
}

/// Every value of the `outcome` label.
const OUTCOMES: [&str; 6] = [
    "ran",
    "skipped",
    "not-acquired",
    "lost",
    "timed-out",
    "error",
];

/// The outcome (one of [`OUTCOMES`]) and exit status of a finished lifecycle.
fn outcome(result: &Result<Exit>, facts: &Facts) -> (&'static str, u8) {
    let exit = match result {
        Ok(exit) => *exit,
        Err(err) => return ("error", Exit::for_error(err).code()),
    };
    let outcome = match exit {
        Exit::LockLost => "lost",
        Exit::TimedOut => "timed-out",
        Exit::Conflict(_) if facts.skipped.get().is_some() => "skipped",
        Exit::Command(_) => "ran",
        // A signal while waiting, or one that killed the command.
        Exit::Signal(_) if facts.ran.get() => "ran",
        Exit::Conflict(_) | Exit::Signal(_) => "not-acquired",
        _ => "error",
    };
    (outcome, exit.code())
}

/// The metrics file, once its directory is known to be writable.
#[derive(Debug)]
pub struct MetricsFile {
    path: PathBuf,
    temp: PathBuf,
    /// The `path` label: the lock paths as given, separated by spaces.
    label: String,
}

impl MetricsFile {
    /// Checks that FILE's directory takes a new file (and that FILE is not
    /// a directory), by creating and removing the temporary file; a usage
    /// error (64) otherwise, before zklock does anything else.
    pub fn prepare(path: &Path, lock_paths: &[&str]) -> Result<MetricsFile> {
        let name = path.file_name().filter(|_| !path.is_dir()).ok_or_else(|| {
            Failure::usage(format!(
                "--metrics-file {} is not a file name",
                path.display()
            ))
        })?;
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".{}.tmp", std::process::id()));
        let file = MetricsFile {
            path: path.to_path_buf(),
            temp: dir.join(temp_name),
            label: lock_paths.join(" "),
        };
        std::fs::File::create(&file.temp).map_err(|err| {
            Failure::usage(format!(
                "cannot write the metrics file {}: {err}",
                path.display()
            ))
        })?;
        let _ = std::fs::remove_file(&file.temp);
        Ok(file)
    }

    /// Says (hidden by `-q`, for a FILE named so on purpose) when FILE is
    /// not one node_exporter's textfile collector reads: it reads `*.prom`
    /// only, and skips everything else without a word.
    pub fn warn_if_uncollected(&self, report: &report::Report) {
        if self.path.extension().is_none_or(|ext| ext != "prom") {
            report.note(format_args!(
                "--metrics-file {} does not end in .prom: node_exporter's textfile \
                 collector reads only *.prom files",
                self.path.display()
            ));
        }
    }

    /// Writes the report of a finished lifecycle; a failure is reported,
    /// never changes zklock's exit status.
    pub fn write(&self, result: &Result<Exit>, facts: &Facts) -> std::io::Result<()> {
        let (outcome, code) = outcome(result, facts);
        let previous = std::fs::read_to_string(&self.path).ok();
        // Never a time ahead of this host's clock (which is what alerts
        // compare it with): a future date would silence a staleness alert.
        let now_seconds = unix_seconds(SystemTime::now());
        let last_success = facts
            .last_success_ms
            .get()
            .map(|ms| (ms as f64 / 1000.0).min(now_seconds))
            .or_else(|| {
                let acquired = facts.acquired.get()?.1;
                (outcome == "ran" && code == 0).then(|| unix_seconds(acquired))
            })
            .or_else(|| {
                previous
                    .as_deref()
                    .and_then(|p| previous_last_success(p, &self.label))
                    .filter(|&seconds| seconds <= now_seconds)
            });
        let now = Instant::now();
        let acquired = facts.acquired.get();
        self.replace(&render(
            &self.label,
            outcome,
            code,
            acquired.map_or(now, |a| a.0) - facts.started,
            acquired.map_or(Duration::ZERO, |a| now - a.0),
            acquired.map(|a| a.2),
            last_success,
            facts.ping_failures.get(),
        ))
    }

    fn replace(&self, text: &str) -> std::io::Result<()> {
        let result = (|| {
            let mut file = std::fs::File::create(&self.temp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&self.temp, &self.path)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&self.temp);
        }
        result
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_millis() as f64 / 1000.0)
}

/// The last-success timestamp a previous report gave for `label`, so that
/// a failed run without `--once-per` does not make it disappear.
fn previous_last_success(text: &str, label: &str) -> Option<f64> {
    let prefix = format!(
        "zklock_last_success_timestamp_seconds{{path=\"{}\"}} ",
        escape_label(label)
    );
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
}

/// The report of one run, every metric a gauge.
// One argument per metric: a struct would only repeat their names.
#[expect(clippy::too_many_arguments)]
fn render(
    label: &str,
    outcome: &str,
    exit_status: u8,
    waited: Duration,
    held: Duration,
    fencing_token: Option<i64>,
    last_success: Option<f64>,
    ping_failures: Option<u32>,
) -> String {
    let path = format!("path=\"{}\"", escape_label(label));
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, samples: &[(String, &str)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    };
    let outcomes: Vec<(String, &str)> = OUTCOMES
        .iter()
        .map(|name| {
            let value = if *name == outcome { "1" } else { "0" };
            (format!("{path},outcome=\"{name}\""), value)
        })
        .collect();
    gauge(
        "zklock_outcome",
        "How the last zklock run ended: 1 for its outcome, 0 for the others.",
        &outcomes,
    );
    // The others have one sample; an unknown one is left out.
    let singles = [
        (
            "zklock_exit_status",
            "The exit status of the last zklock run.",
            Some(exit_status.to_string()),
        ),
        (
            "zklock_wait_seconds",
            "Seconds the last run waited for the lock (connecting included).",
            Some(format!("{:.3}", waited.as_secs_f64())),
        ),
        (
            "zklock_held_seconds",
            "Seconds the last run held the lock (0 if it never did).",
            Some(format!("{:.3}", held.as_secs_f64())),
        ),
        (
            "zklock_fencing_token",
            "The fencing token of the last run's lock node (first PATH given).",
            fencing_token.map(|token| token.to_string()),
        ),
        (
            "zklock_last_success_timestamp_seconds",
            "When the last successful run started, in seconds since the epoch.",
            last_success.map(|seconds| format!("{seconds:.3}")),
        ),
        (
            "zklock_ping_failures",
            "Health-check pings (--ping) of the last run that failed.",
            ping_failures.map(|failures| failures.to_string()),
        ),
    ];
    for (name, help, value) in singles {
        if let Some(value) = value {
            gauge(name, help, &[(path.clone(), &value)]);
        }
    }
    out
}

/// A label value as the exposition format wants it: backslash, double
/// quote and newline escaped.
fn escape_label(value: &str) -> String {
    (value.replace('\\', "\\\\"))
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape_label(r#"/a"b\c"#), r#"/a\"b\\c"#);
        assert_eq!(escape_label("/a\nb"), r"/a\nb");
    }

    #[test]
    fn renders_every_outcome_and_reads_back_the_last_success() {
        let text = render(
            "/locks/x",
            "skipped",
            75,
            Duration::from_millis(1500),
            Duration::from_millis(20),
            Some(42),
            Some(1_700_000_000.5),
            Some(1),
        );
        assert!(text.contains("zklock_outcome{path=\"/locks/x\",outcome=\"skipped\"} 1\n"));
        assert!(text.contains("zklock_outcome{path=\"/locks/x\",outcome=\"ran\"} 0\n"));
        assert!(text.contains("# TYPE zklock_exit_status gauge\n"));
        assert!(text.contains("zklock_exit_status{path=\"/locks/x\"} 75\n"));
        assert!(text.contains("zklock_wait_seconds{path=\"/locks/x\"} 1.500\n"));
        assert!(text.contains("zklock_fencing_token{path=\"/locks/x\"} 42\n"));
        assert!(text.contains("zklock_ping_failures{path=\"/locks/x\"} 1\n"));
        assert_eq!(
            previous_last_success(&text, "/locks/x"),
            Some(1_700_000_000.5)
        );
        assert_eq!(previous_last_success(&text, "/locks/y"), None);
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("zklock_outcome"))
                .count(),
            6
        );
    }

    #[test]
    fn the_man_page_describes_every_metric_and_outcome() {
        let all_known = render(
            "/x",
            "ran",
            0,
            Duration::ZERO,
            Duration::ZERO,
            Some(1),
            Some(1.0),
            Some(0),
        );
        let page = crate::cli::reference::METRICS;
        for line in all_known.lines() {
            if let Some(name) = line.strip_prefix("# TYPE ") {
                let name = name.split(' ').next().unwrap_or_default();
                assert!(page.contains(&format!("\n  {name}")), "{name} missing");
            }
        }
        for outcome in OUTCOMES {
            assert!(page.contains(outcome), "outcome {outcome} missing");
        }
    }
}
