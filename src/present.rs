//! How the operator commands (`status`, `list`, `break`) show a lock: the
//! JSON documents (serde structs; field names are a public contract, listed
//! in docs/design.md, "Operator commands") and the text lines.

use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::lock::directory::{Client, Entry, EntryKind, LockView, PathKind};
use crate::lock::holder::HolderData;
use crate::lock::holder::{Detail, escape_controls, on_host};
use crate::lock::record::RunRecord;
use crate::values::{Precision, human_duration, rfc3339, server_time};

/// One lock path in `zklock status --json`.
#[derive(Debug, Serialize)]
pub struct LockJson {
    pub path: String,
    /// `free`, `exclusive`, `shared` or `semaphore`.
    pub kind: &'static str,
    pub held: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits_used: Option<usize>,
    pub holders: Vec<EntryJson>,
    pub waiting: Vec<EntryJson>,
    /// From the `--once-per` run record (`zklock status` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_success: Option<RunRecord>,
    /// Why anyone may delete the lock's nodes (`zklock status` with an ACL
    /// that does not let anyone delete, as `run` refuses such a path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unprotected: Option<String>,
}

/// A holder or waiter.
#[derive(Debug, Serialize)]
pub struct EntryJson {
    pub node: String,
    /// `lock`, `read`, `write` or `lease`.
    pub kind: EntryKind,
    /// 1 for the first holder, counting on through the queue.
    pub position: usize,
    /// `zklock`, `curator` or `kazoo`.
    pub client: Client,
    pub fencing_token: i64,
    pub session_id: String,
    /// When it took the lock (a zklock holder) or queued: server clock.
    pub since: String,
    /// Seconds from `since` to now (this host's clock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited_seconds: Option<f64>,
    /// What a zklock holder wrote into its node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderData>,
    /// Another client's node data, as text, when it is not zklock's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

fn kind_name(kind: PathKind) -> &'static str {
    match kind {
        PathKind::Free => "free",
        PathKind::Exclusive => "exclusive",
        PathKind::Shared => "shared",
        PathKind::Semaphore { .. } => "semaphore",
    }
}

pub fn lock_json(path: &str, view: &LockView, now: SystemTime) -> LockJson {
    let limit = match view.kind {
        PathKind::Semaphore { limit } => Some(limit),
        _ => None,
    };
    let entries = |list: &[Entry], held: bool, first: usize| {
        list.iter()
            .enumerate()
            .map(|(i, e)| entry_json(e, first + i, held, now))
            .collect()
    };
    LockJson {
        path: path.to_owned(),
        kind: kind_name(view.kind),
        held: !view.holders.is_empty(),
        limit,
        permits_used: limit.map(|_| view.holders.len()),
        holders: entries(&view.holders, true, 1),
        waiting: entries(&view.waiting, false, view.holders.len() + 1),
        last_run: None,
        last_success: None,
        unprotected: None,
    }
}

fn entry_json(entry: &Entry, position: usize, held: bool, now: SystemTime) -> EntryJson {
    let age = age_seconds(entry.since, now);
    EntryJson {
        node: entry.node.name.clone(),
        kind: entry.kind,
        position,
        client: entry.client,
        fencing_token: entry.node.stat.czxid,
        session_id: format!("{:#x}", entry.node.stat.ephemeral_owner),
        since: rfc3339(server_time(entry.since), Precision::Seconds),
        held_seconds: held.then_some(age),
        waited_seconds: (!held).then_some(age),
        holder: entry.holder.clone(),
        data: match entry.holder {
            Some(_) => None,
            None => foreign_data(&entry.node.data),
        },
    }
}

/// Another client's data as text: Curator stores the client's IP address,
/// kazoo an identifier; binary data is not shown.
fn foreign_data(data: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(data).ok()?.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// Seconds from a server time to `now`, never negative (clocks differ).
fn age_seconds(millis: i64, now: SystemTime) -> f64 {
    let age = now.duration_since(server_time(millis)).unwrap_or_default();
    age.as_millis() as f64 / 1000.0
}

/// Seconds (as the JSON gives them) in the one duration format.
pub fn human_age(seconds: f64) -> String {
    human_duration(Duration::from_secs_f64(seconds.max(0.0)))
}

/// The text block of `zklock status` for one path.
pub fn lock_text(json: &LockJson) -> String {
    let mut out = String::new();
    let state = match (json.held, json.waiting.is_empty()) {
        (false, true) => "free".to_owned(),
        (true, _) => format!("held, {} waiting", json.waiting.len()),
        (false, false) => format!("{} waiting, no holder", json.waiting.len()),
    };
    let kind = match (json.kind, json.limit, json.permits_used) {
        ("free", ..) => String::new(),
        (_, Some(limit), Some(used)) => format!("semaphore of {limit} ({used} used), "),
        (kind, ..) => format!("{kind}, "),
    };
    out.push_str(&format!("{}: {kind}{state}\n", escape_controls(&json.path)));
    for entry in json.holders.iter().chain(&json.waiting) {
        out.push_str(&entry_text(entry));
    }
    out.push_str(&runs_text(&json.last_run, &json.last_success));
    if let Some(problem) = &json.unprotected {
        out.push_str(&format!("  warning: {}\n", escape_controls(problem)));
    }
    out
}

/// The lines of a run record, as `status` and `break --record` show it.
pub fn runs_text(last_run: &Option<RunRecord>, last_success: &Option<RunRecord>) -> String {
    let runs = [("last run", last_run), ("last success", last_success)];
    let lines = runs.into_iter().filter_map(|(what, run)| {
        let run = run.as_ref()?;
        Some(format!("  {what}: {}\n", run_text(run)))
    });
    lines.collect()
}

/// `2026-11-23T02:00:00.123Z for 3m 2s on web1 (user deploy), exit 0, token 42`.
fn run_text(run: &RunRecord) -> String {
    let took = (run.end_ms - run.start_ms) as f64 / 1000.0;
    format!(
        "{} for {} {}, exit {}, token {}",
        run.start,
        human_age(took),
        on_host(&run.host, run.user.as_deref()),
        run.exit_status,
        run.fencing_token
    )
}

pub fn entry_text(entry: &EntryJson) -> String {
    let role = match (entry.held_seconds, entry.waited_seconds) {
        (Some(held), _) => format!("holds for {}", human_age(held)),
        (_, Some(waited)) => format!("waits for {}", human_age(waited)),
        _ => String::new(),
    };
    // Their names in the JSON: `read`, `curator`, ...
    let name = |value: serde_json::Value| value.as_str().unwrap_or_default().to_owned();
    let kind = name(serde_json::json!(entry.kind));
    let client = match entry.client {
        Client::Zklock => String::new(),
        other => format!(" ({})", name(serde_json::json!(other))),
    };
    let mut text = format!(
        "  {:>2}. {role} (since {}), {kind}{client}, token {}, session {}\n      {}\n",
        entry.position, entry.since, entry.fencing_token, entry.session_id, entry.node
    );
    if let Some(who) = entry.holder.as_ref().map(holder_text) {
        text.push_str(&format!("      {who}\n"));
    } else if let Some(data) = &entry.data {
        text.push_str(&format!("      data: {}\n", escape_controls(data)));
    }
    text
}

/// `pid 812 on web1 (user deploy): ./backup.sh`, escaped to one line.
fn holder_text(holder: &HolderData) -> String {
    let who = holder.who(Detail::Full);
    match holder.what() {
        Some(what) => format!("{who}: {what}"),
        None => who,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    use crate::lock::directory::plain_lock;
    use crate::lock::directory::tests::node;

    #[test]
    fn json_fields_and_positions() {
        let view = plain_lock(vec![
            node(
                "_c_a-lock-0000000001",
                5,
                0x1234,
                r#"{"host":"h","pid":9,"zklock_pid":8,"acquired":true,"command":"x\ny"}"#,
            ),
            node("_c_b-lock-0000000002", 6, 0x1234, "10.0.0.1"),
        ]);
        // The holder's write at 5.5 s, the waiter queued at 6 s.
        let now = UNIX_EPOCH + Duration::from_millis(65_500);
        let json = lock_json("/l", &view, now);
        let value = serde_json::to_value(&json).unwrap();
        assert_eq!(value["kind"], "exclusive");
        assert_eq!(value["held"], true);
        let holder = &value["holders"][0];
        assert_eq!(holder["position"], 1);
        assert_eq!(holder["fencing_token"], 5);
        assert_eq!(holder["session_id"], "0x1234");
        assert_eq!(holder["since"], "1970-01-01T00:00:05Z");
        assert_eq!(holder["held_seconds"], 60.0);
        assert_eq!(holder["holder"]["pid"], 9);
        let waiter = &value["waiting"][0];
        assert_eq!(waiter["position"], 2);
        assert_eq!(waiter["client"], "curator");
        assert_eq!(waiter["waited_seconds"], 59.5);
        assert_eq!(waiter["data"], "10.0.0.1");
        let text = lock_text(&json);
        assert!(
            text.starts_with("/l: exclusive, held, 1 waiting\n"),
            "{text}"
        );
        assert!(text.contains("pid 9 (zklock 8) on h: x\\ny"), "{text}");
        assert_eq!(text.lines().count(), 7, "{text}");
        assert!(text.ends_with("      data: 10.0.0.1\n"), "{text}");
    }
}
