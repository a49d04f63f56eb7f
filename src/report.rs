//! What zklock says on stderr: one line each, `zklock: ` first, by
//! verbosity.

use std::sync::{Mutex, PoisonError};

use indicatif::ProgressBar;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

/// Messages on stderr, by verbosity.
#[derive(Clone, Copy)]
pub struct Report(pub Verbosity);

impl Report {
    /// Progress, shown with `-v`.
    pub fn info(self, message: std::fmt::Arguments<'_>) {
        if self.0 >= Verbosity::Verbose {
            say(message);
        }
    }

    /// Expected outcomes worth a line (gave up waiting), hidden by `-q`.
    pub fn note(self, message: std::fmt::Arguments<'_>) {
        if self.0 >= Verbosity::Normal {
            say(message);
        }
    }

    /// Always shown.
    pub fn error(self, message: std::fmt::Arguments<'_>) {
        say(message);
    }
}

/// The status line shown while waiting (run/wait/), if any.
static STATUS_LINE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// While `bar` is shown, lines are printed above it, not into it.
pub fn show_above(bar: Option<ProgressBar>) {
    *STATUS_LINE.lock().unwrap_or_else(PoisonError::into_inner) = bar;
}

/// One line on stderr. Unlike `eprintln!`, a closed or broken stderr is
/// ignored: panicking there would skip the cleanup of our nodes.
pub fn say(message: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let line = format!("zklock: {message}\n");
    let write = || {
        let _ = std::io::stderr().write_all(line.as_bytes());
    };
    let bar = STATUS_LINE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    match bar {
        Some(bar) => bar.suspend(write),
        None => write(),
    }
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
