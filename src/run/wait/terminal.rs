//! The status line's terminal: indicatif drawing on stderr, a few columns
//! narrower than the terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::Report;

/// A spinner with a message on stderr; `report`'s lines are printed above it.
pub(super) fn new_bar(report: &Report) -> ProgressBar {
    let target = ProgressDrawTarget::term_like_with_hz(Box::new(Stderr::default()), 20);
    let bar = ProgressBar::with_draw_target(None, target);
    // The template is a constant: it parses.
    if let Ok(style) = ProgressStyle::with_template("{spinner} {wide_msg}") {
        bar.set_style(style);
    }
    report.show_above(Some(bar.clone()));
    bar
}

/// Columns the status line leaves free at the end of the terminal's line
/// for what the terminal echoes (`^C`): at full width the echo would wrap
/// onto a line of its own, which erasing the status line would miss.
const LINE_ROOM: u16 = 4;

/// stderr as indicatif draws on it, narrower by [`LINE_ROOM`]; a draw is
/// written at once, on flush.
#[derive(Debug, Default)]
struct Stderr {
    pending: std::sync::Mutex<Vec<u8>>,
}

impl Stderr {
    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        (self.pending.lock()).unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn put(&self, text: &str) -> std::io::Result<()> {
        self.pending().extend_from_slice(text.as_bytes());
        Ok(())
    }

    fn moved(&self, n: usize, code: char) -> std::io::Result<()> {
        match n {
            0 => Ok(()),
            n => self.put(&format!("\x1b[{n}{code}")),
        }
    }
}

impl indicatif::TermLike for Stderr {
    fn width(&self) -> u16 {
        terminal_size().1.saturating_sub(LINE_ROOM).max(1)
    }

    fn height(&self) -> u16 {
        terminal_size().0
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.moved(n, 'A')
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.moved(n, 'B')
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.moved(n, 'C')
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.moved(n, 'D')
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.put(s)?;
        self.put("\n")
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.put("\r\x1b[2K")
    }

    fn flush(&self) -> std::io::Result<()> {
        use std::io::Write;
        let bytes = std::mem::take(&mut *self.pending());
        let mut stderr = std::io::stderr().lock();
        stderr.write_all(&bytes)?;
        stderr.flush()
    }
}

/// Rows and columns of the terminal on stderr (24 x 80 if it does not say),
/// read at every draw so that a resized window is followed.
fn terminal_size() -> (u16, u16) {
    match rustix::termios::tcgetwinsize(std::io::stderr()) {
        Ok(size) if size.ws_row > 0 && size.ws_col > 0 => (size.ws_row, size.ws_col),
        _ => (24, 80),
    }
}
