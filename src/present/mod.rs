//! Everything zklock tells people about a lock, in one place: the holder
//! (holder.rs), the run record, the text of `status`, `list` and `break`,
//! and their JSON (json.rs, a public contract of its own). Durations and
//! times are written by values::human_duration and values::rfc3339, the
//! one format each, which every layer uses.

pub mod holder;
pub mod json;

use std::time::{Duration, SystemTime};

use crate::lock::directory::{Client, Entry, EntryKind, LockView, PathKind};
use crate::lock::record::{Record, RunRecord};
use crate::values::{Precision, human_duration, rfc3339, server_time};

use self::holder::{Detail, on_host, what, who};

/// What `status` knows of one lock path.
#[derive(Debug)]
pub struct LockStatus {
    pub path: String,
    pub view: LockView,
    /// This host's clock, against which ages are measured.
    pub now: SystemTime,
    /// The `--once-per` run record (`status` only).
    pub record: Record,
    /// Why anyone may delete the lock's nodes (`status` with an ACL that
    /// does not let anyone delete, as `run` refuses such a path).
    pub unprotected: Option<String>,
}

impl LockStatus {
    pub fn new(path: &str, view: LockView, now: SystemTime) -> LockStatus {
        LockStatus {
            path: path.to_owned(),
            view,
            now,
            record: Record::default(),
            unprotected: None,
        }
    }

    /// Holders, then waiters: each with its position (1 for the first
    /// holder, counting on through the queue) and whether it holds.
    pub fn entries(&self) -> impl Iterator<Item = (usize, bool, &Entry)> {
        let holders = self.view.holders.iter().map(|e| (true, e));
        let waiting = self.view.waiting.iter().map(|e| (false, e));
        (holders.chain(waiting))
            .enumerate()
            .map(|(i, (held, entry))| (i + 1, held, entry))
    }
}

pub fn path_kind_name(kind: PathKind) -> &'static str {
    match kind {
        PathKind::Free => "free",
        PathKind::Exclusive => "exclusive",
        PathKind::Shared => "shared",
        PathKind::Semaphore { .. } => "semaphore",
    }
}

pub fn entry_kind_name(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::Lock => "lock",
        EntryKind::Read => "read",
        EntryKind::Write => "write",
        EntryKind::Lease => "lease",
    }
}

pub fn client_name(client: Client) -> &'static str {
    match client {
        Client::Zklock => "zklock",
        Client::Curator => "curator",
        Client::Kazoo => "kazoo",
    }
}

/// From a server time to `now`, never negative (clocks differ).
pub fn age(millis: i64, now: SystemTime) -> Duration {
    now.duration_since(server_time(millis)).unwrap_or_default()
}

/// A time on a line redrawn every second, in the one format of its whole
/// seconds: milliseconds would only flicker.
pub fn whole_seconds(duration: Duration) -> String {
    human_duration(Duration::from_secs(duration.as_secs()))
}

/// Shows control characters (newlines, escape sequences) as Rust escapes:
/// text from other hosts, or given by the user, stays on its line.
pub fn escape_controls(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c.is_control() {
            true => escaped.extend(c.escape_debug()),
            false => escaped.push(c),
        }
    }
    escaped
}

/// `/l: exclusive, held, 1 waiting`: the first line of `status`.
pub fn lock_header(status: &LockStatus) -> String {
    let view = &status.view;
    let waiting = view.waiting.len();
    let state = match (view.holders.is_empty(), waiting) {
        (true, 0) => "free".to_owned(),
        (false, _) => format!("held, {waiting} waiting"),
        (true, _) => format!("{waiting} waiting, no holder"),
    };
    let kind = match view.kind {
        PathKind::Free => String::new(),
        PathKind::Semaphore { limit } => {
            format!("semaphore of {limit} ({} used), ", view.holders.len())
        }
        kind => format!("{}, ", path_kind_name(kind)),
    };
    format!("{}: {kind}{state}", escape_controls(&status.path))
}

/// The text block of `zklock status` for one path.
pub fn lock_text(status: &LockStatus) -> String {
    let mut out = format!("{}\n", lock_header(status));
    for (position, held, entry) in status.entries() {
        out.push_str(&entry_text(entry, position, held, status.now));
    }
    out.push_str(&runs_text(&status.record));
    if let Some(problem) = &status.unprotected {
        out.push_str(&format!("  warning: {}\n", escape_controls(problem)));
    }
    out
}

/// A holder or waiter: its place, node and who it is.
pub fn entry_text(entry: &Entry, position: usize, held: bool, now: SystemTime) -> String {
    let age = human_duration(age(entry.since, now));
    let role = match held {
        true => format!("holds for {age}"),
        false => format!("waits for {age}"),
    };
    let client = match entry.client {
        Client::Zklock => String::new(),
        other => format!(" ({})", client_name(other)),
    };
    let mut text = format!(
        "  {position:>2}. {role} (since {}), {}{client}, token {}, session {:#x}\n      {}\n",
        rfc3339(server_time(entry.since), Precision::Seconds),
        entry_kind_name(entry.kind),
        entry.node.stat.czxid,
        entry.node.stat.ephemeral_owner,
        entry.node.name
    );
    if let Some(data) = &entry.holder {
        // `pid 812 on web1 (user deploy): ./backup.sh`.
        let who = who(data, Detail::Full);
        match what(data) {
            Some(what) => text.push_str(&format!("      {who}: {what}\n")),
            None => text.push_str(&format!("      {who}\n")),
        }
    } else if let Some(data) = json::foreign_data(&entry.node.data) {
        text.push_str(&format!("      data: {}\n", escape_controls(&data)));
    }
    text
}

/// The lines of a run record, as `status` and `break --record` show it.
pub fn runs_text(record: &Record) -> String {
    let runs = [
        ("last run", &record.last_run),
        ("last success", &record.last_success),
    ];
    let lines = runs.into_iter().filter_map(|(what, run)| {
        let run = run.as_ref()?;
        let took = Duration::from_millis(run.end_ms.saturating_sub(run.start_ms).max(0) as u64);
        Some(format!(
            "  {what}: {}, took {}, exit {}\n",
            run_text(run),
            human_duration(took),
            run.exit_status
        ))
    });
    lines.collect()
}

/// `on web1 (user deploy) at 2026-11-23T02:00:00.123Z (fencing token 42)`:
/// which run a record names.
pub fn run_text(run: &RunRecord) -> String {
    format!(
        "{} at {} (fencing token {})",
        on_host(&run.host, run.user.as_deref()),
        escape_controls(&run.start),
        run.fencing_token
    )
}

/// One line of `zklock list`.
pub fn list_line(lock: &json::ListEntry) -> String {
    let kind = match lock.limit {
        Some(limit) => format!("semaphore of {limit}"),
        None => lock.kind.to_owned(),
    };
    let held = match lock.oldest_held_seconds {
        Some(age) => format!(", held {}", human_duration(Duration::from_secs_f64(age))),
        None => String::new(),
    };
    format!(
        "{}  {kind}, {} holding, {} waiting{held}",
        escape_controls(&lock.path),
        lock.holders,
        lock.waiting
    )
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    use crate::lock::directory::plain_lock;
    use crate::lock::directory::tests::node;

    /// A zklock holder (its write at 5.5 s, token 5) and a Curator waiter
    /// (queued at 6 s), seen at `now_ms`.
    pub fn holder_and_waiter(now_ms: u64) -> LockStatus {
        let view = plain_lock(vec![
            node(
                "_c_a-lock-0000000001",
                5,
                0x1234,
                r#"{"host":"h","pid":9,"zklock_pid":8,"acquired":true,"command":"x\ny"}"#,
            ),
            node("_c_b-lock-0000000002", 6, 0x1234, "10.0.0.1"),
        ]);
        LockStatus::new("/l", view, UNIX_EPOCH + Duration::from_millis(now_ms))
    }

    #[test]
    fn status_text() {
        let mut status = holder_and_waiter(65_500);
        status.record.last_run = Some(RunRecord {
            start_ms: 1_000,
            start: "1970-01-01T00:00:01.000Z".into(),
            end_ms: 185_500,
            end: "1970-01-01T00:03:05.500Z".into(),
            host: "h".into(),
            user: Some("u".into()),
            exit_status: 0,
            fencing_token: 42,
        });
        let text = lock_text(&status);
        assert!(
            text.starts_with("/l: exclusive, held, 1 waiting\n"),
            "{text}"
        );
        // The one duration format: 60 s exactly, and 59.5 s.
        assert!(
            text.contains(
                "   1. holds for 1m (since 1970-01-01T00:00:05Z), lock, token 5, session 0x1234\n"
            ),
            "{text}"
        );
        assert!(text.contains("   2. waits for 59s 500ms (since"), "{text}");
        assert!(text.contains("pid 9 (zklock 8) on h: x\\ny"), "{text}");
        assert!(text.contains("      data: 10.0.0.1\n"), "{text}");
        assert!(
            text.ends_with(
                "  last run: on h (user u) at 1970-01-01T00:00:01.000Z (fencing token 42), \
                 took 3m 4s, exit 0\n"
            ),
            "{text}"
        );
        assert_eq!(text.lines().count(), 8, "{text}");
    }

    #[test]
    fn whole_seconds_on_a_redrawn_line() {
        assert_eq!(whole_seconds(Duration::from_millis(999)), "0s");
        assert_eq!(whole_seconds(Duration::from_millis(59_999)), "59s");
        assert_eq!(whole_seconds(Duration::from_millis(185_500)), "3m 5s");
    }

    #[test]
    fn list_lines() {
        let entry = json::ListEntry {
            path: "/a\nb".into(),
            kind: "semaphore",
            limit: Some(3),
            holders: 2,
            waiting: 0,
            oldest_held_seconds: Some(8054.5),
        };
        assert_eq!(
            list_line(&entry),
            r"/a\nb  semaphore of 3, 2 holding, 0 waiting, held 2h 14m"
        );
    }
}
