//! The command `bench/run` runs under every lock: a `true` that leaves
//! evidence. It appends `start PID NS OVERLAP TOKEN` and `end PID NS` lines
//! (CLOCK_MONOTONIC nanoseconds, one `write` each to an O_APPEND file, so
//! concurrent writers never interleave) to LOG.
//!
//!   --guard FILE  take an flock on FILE, held until we exit; OVERLAP is 1
//!                 when another stamp still holds it, i.e. a previous
//!                 holder's command was still running when ours started
//!   --gate FIFO   between start and end, block until someone opens FIFO
//!                 for writing (zero CPU while held; never opened means
//!                 "hold until killed")
//!
//! Built by `bench/run` with plain rustc: it needs only std, and starts in
//! well under a millisecond, so it adds little to what is measured.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::process::ExitCode;

unsafe extern "C" {
    fn clock_gettime(clock: i32, ts: *mut [i64; 2]) -> i32;
}

const CLOCK_MONOTONIC: i32 = 1;

/// The clock Python's `time.monotonic_ns()` reads, so the orchestrator's
/// timestamps (a kill, a release) compare with ours.
fn now_ns() -> i64 {
    let mut ts = [0i64; 2];
    // SAFETY: ts is a valid timespec-shaped buffer for the duration of the call.
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    ts[0] * 1_000_000_000 + ts[1]
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(log) = args.next() else {
        eprintln!("usage: stamp LOG [--guard FILE] [--gate FIFO]");
        return ExitCode::from(64);
    };
    let (mut guard, mut gate) = (None, None);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--guard", Some(path)) => guard = Some(path),
            ("--gate", Some(path)) => gate = Some(path),
            _ => {
                eprintln!("stamp: bad argument {flag}");
                return ExitCode::from(64);
            }
        }
    }
    let mut log = match OpenOptions::new().create(true).append(true).open(&log) {
        Ok(file) => file,
        Err(err) => {
            eprintln!("stamp: {log}: {err}");
            return ExitCode::from(70);
        }
    };
    // Kept open, and so locked, until we exit: the kernel drops the lock
    // only when this process is gone. A failed try_lock means another
    // command still holds it.
    let guard = guard.map(|path| File::create(path).expect("stamp: cannot open the guard file"));
    let overlap = guard.as_ref().is_some_and(|file| file.try_lock().is_err()) as u8;
    let token = std::env::var("ZKLOCK_FENCING_TOKEN").unwrap_or_else(|_| "-".into());
    let pid = std::process::id();
    let line = format!("start {pid} {} {overlap} {token}\n", now_ns());
    log.write_all(line.as_bytes()).expect("stamp: write");
    if let Some(fifo) = gate {
        // Blocks in open until a writer appears; then read to its close.
        let mut byte = [0u8; 1];
        let _ = File::open(fifo).and_then(|mut f| f.read(&mut byte));
    }
    let line = format!("end {pid} {}\n", now_ns());
    log.write_all(line.as_bytes()).expect("stamp: write");
    ExitCode::SUCCESS
}
