//! What zklock says on stderr: one line each, `zklock: ` first, by
//! verbosity, above the visible wait's status line while it is shown.

use std::sync::{Arc, Mutex, PoisonError};

use indicatif::ProgressBar;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

/// Messages on stderr, by verbosity: one of a run's outputs, chosen once
/// when it starts (run::Outputs). Clones share the status line.
#[derive(Clone)]
pub struct Report {
    verbosity: Verbosity,
    line: StatusLine,
}

impl Report {
    /// Messages at `verbosity`, with no status line shown yet.
    pub fn new(verbosity: Verbosity) -> Report {
        Report {
            verbosity,
            line: StatusLine::default(),
        }
    }

    pub fn verbosity(&self) -> Verbosity {
        self.verbosity
    }

    /// Progress, shown with `-v`.
    pub fn info(&self, message: std::fmt::Arguments<'_>) {
        if self.verbosity >= Verbosity::Verbose {
            self.line.say(message);
        }
    }

    /// Expected outcomes worth a line (gave up waiting), hidden by `-q`.
    pub fn note(&self, message: std::fmt::Arguments<'_>) {
        if self.verbosity >= Verbosity::Normal {
            self.line.say(message);
        }
    }

    /// Always shown.
    pub fn error(&self, message: std::fmt::Arguments<'_>) {
        self.line.say(message);
    }

    /// While `bar` (run/wait/'s status line) is shown, this report's lines,
    /// and its clones', are printed above it, not into it.
    pub fn show_above(&self, bar: Option<ProgressBar>) {
        *self.line.0.lock().unwrap_or_else(PoisonError::into_inner) = bar;
    }
}

/// The status line shown while waiting, if any: a handle shared by a
/// run's reports (a ping failure is reported from the ping's thread).
#[derive(Clone, Default)]
struct StatusLine(Arc<Mutex<Option<ProgressBar>>>);

impl StatusLine {
    fn say(&self, message: std::fmt::Arguments<'_>) {
        let bar = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match bar {
            Some(bar) => bar.suspend(|| say(message)),
            None => say(message),
        }
    }
}

/// One line on stderr. Unlike `eprintln!`, a closed or broken stderr is
/// ignored: panicking there would skip the cleanup of our nodes.
pub fn say(message: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let line = format!("zklock: {message}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// A command's answer on stdout (status, list), with a final newline;
/// nothing for empty text. A closed stdout (`| head`) is not an error.
pub fn print_stdout(text: &str) {
    if !text.is_empty() {
        let _ = write_stdout(format!("{text}\n").as_bytes());
    }
}

/// Bytes on stdout as they are (generated scripts and pages). A closed
/// stdout (`| head`) is not an error.
pub fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => result,
    }
}
