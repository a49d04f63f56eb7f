//! The JSON documents of `status --json` and `list --json`: their own
//! structs, whose field names are a public contract (docs/design.md,
//! "Operator commands"), converted from the domain types. Node data
//! (lock::holder, lock::record) and this JSON change apart: a field added
//! to node data appears here only when added here.

use serde::Serialize;

use super::{LockStatus, age, client_name, entry_kind_name, path_kind_name};
use crate::lock::directory::{Entry, LockView, PathKind};
use crate::lock::holder::{HoldBinding, HolderData};
use crate::lock::record::RunRecord;
use crate::origin::ci::CiJob;
use crate::values::{Precision, rfc3339, server_time};

/// `zklock status --json`.
#[derive(Debug, Serialize)]
pub struct StatusJson {
    pub locks: Vec<LockJson>,
}

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
    /// From the `--once-per` run record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<RunJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_success: Option<RunJson>,
    /// Why anyone may delete the lock's nodes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unprotected: Option<String>,
}

/// A holder or waiter.
#[derive(Debug, Serialize)]
pub struct EntryJson {
    pub node: String,
    /// `lock`, `read`, `write` or `lease`.
    pub kind: &'static str,
    /// 1 for the first holder, counting on through the queue.
    pub position: usize,
    /// `zklock`, `curator` or `kazoo`.
    pub client: &'static str,
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
    pub holder: Option<HolderJson>,
    /// Another client's node data, as text, when it is not zklock's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

/// A zklock holder's node data, as `status --json` shows it.
#[derive(Debug, PartialEq, Serialize)]
pub struct HolderJson {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zklock_pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acquired: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci: Option<CiJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supersede: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_czxid: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<HoldJson>,
}

/// What a hold (`zklock hold`) is bound to.
#[derive(Debug, PartialEq, Serialize)]
pub struct HoldJson {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// The CI job a holder runs in.
#[derive(Debug, PartialEq, Serialize)]
pub struct CiJson {
    pub provider: String,
    pub url: String,
}

/// A run of the run record.
#[derive(Debug, PartialEq, Serialize)]
pub struct RunJson {
    pub start_ms: i64,
    pub start: String,
    pub end_ms: i64,
    pub end: String,
    pub host: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub exit_status: u8,
    pub fencing_token: i64,
}

/// `zklock list --json`.
#[derive(Debug, Serialize)]
pub struct ListJson {
    pub locks: Vec<ListEntry>,
}

/// One lock in `zklock list --json`.
#[derive(Debug, Serialize)]
pub struct ListEntry {
    pub path: String,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    pub holders: usize,
    pub waiting: usize,
    /// Seconds the longest-holding holder has held (or, for other clients'
    /// holders, been queued), none when nobody holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_held_seconds: Option<f64>,
}

impl From<&HolderData> for HolderJson {
    fn from(data: &HolderData) -> HolderJson {
        let HolderData {
            host,
            pid,
            zklock_pid,
            user,
            command,
            label,
            version,
            acquired,
            ci,
            supersede,
            first_czxid,
            hold,
        } = data.clone();
        HolderJson {
            host,
            pid,
            zklock_pid,
            user,
            command,
            label,
            version,
            acquired,
            ci: ci.map(|CiJob { provider, url }| CiJson { provider, url }),
            supersede,
            first_czxid,
            hold: hold.map(
                |HoldBinding {
                     bound_pid,
                     bound_name,
                     until,
                 }| HoldJson {
                    bound_pid,
                    bound_name,
                    until,
                },
            ),
        }
    }
}

impl From<&RunRecord> for RunJson {
    fn from(run: &RunRecord) -> RunJson {
        let run = run.clone();
        RunJson {
            start_ms: run.start_ms,
            start: run.start,
            end_ms: run.end_ms,
            end: run.end,
            host: run.host,
            user: run.user,
            exit_status: run.exit_status,
            fencing_token: run.fencing_token,
        }
    }
}

fn limit(view: &LockView) -> Option<u32> {
    match view.kind {
        PathKind::Semaphore { limit } => Some(limit),
        _ => None,
    }
}

/// A lock as `status --json` shows it.
pub fn lock(status: &LockStatus) -> LockJson {
    let view = &status.view;
    let limit = limit(view);
    let (mut holders, mut waiting) = (Vec::new(), Vec::new());
    for (position, held, entry) in status.entries() {
        let json = entry_json(entry, position, held, status);
        match held {
            true => holders.push(json),
            false => waiting.push(json),
        }
    }
    LockJson {
        path: status.path.clone(),
        kind: path_kind_name(view.kind),
        held: !view.holders.is_empty(),
        limit,
        permits_used: limit.map(|_| view.holders.len()),
        holders,
        waiting,
        last_run: status.record.last_run.as_ref().map(RunJson::from),
        last_success: status.record.last_success.as_ref().map(RunJson::from),
        unprotected: status.unprotected.clone(),
    }
}

fn entry_json(entry: &Entry, position: usize, held: bool, status: &LockStatus) -> EntryJson {
    let age = age(entry.since, status.now).as_millis() as f64 / 1000.0;
    EntryJson {
        node: entry.node.name.clone(),
        kind: entry_kind_name(entry.kind),
        position,
        client: client_name(entry.client),
        fencing_token: entry.node.stat.czxid,
        session_id: format!("{:#x}", entry.node.stat.ephemeral_owner),
        since: rfc3339(server_time(entry.since), Precision::Seconds),
        held_seconds: held.then_some(age),
        waited_seconds: (!held).then_some(age),
        holder: entry.holder.as_ref().map(HolderJson::from),
        data: match entry.holder {
            Some(_) => None,
            None => foreign_data(&entry.node.data),
        },
    }
}

/// Another client's data as text: Curator stores the client's IP address,
/// kazoo an identifier; binary data is not shown.
pub fn foreign_data(data: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(data).ok()?.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// A lock as `list --json` shows it.
pub fn list_entry(status: &LockStatus) -> ListEntry {
    let view = &status.view;
    let oldest = (view.holders.iter())
        .map(|holder| age(holder.since, status.now))
        .max();
    ListEntry {
        path: status.path.clone(),
        kind: path_kind_name(view.kind),
        limit: limit(view),
        holders: view.holders.len(),
        waiting: view.waiting.len(),
        oldest_held_seconds: oldest.map(|age| age.as_millis() as f64 / 1000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::record::Record;
    use crate::present::tests::holder_and_waiter as status;

    #[test]
    fn fields_and_positions() {
        // The holder's write at 5.5 s, the waiter queued at 6 s.
        let value = serde_json::to_value(lock(&status(65_500))).unwrap();
        assert_eq!(value["kind"], "exclusive");
        assert_eq!(value["held"], true);
        let holder = &value["holders"][0];
        assert_eq!(holder["position"], 1);
        assert_eq!(holder["kind"], "lock");
        assert_eq!(holder["client"], "zklock");
        assert_eq!(holder["fencing_token"], 5);
        assert_eq!(holder["session_id"], "0x1234");
        assert_eq!(holder["since"], "1970-01-01T00:00:05Z");
        assert_eq!(holder["held_seconds"], 60.0);
        assert_eq!(holder["holder"]["pid"], 9);
        assert_eq!(holder["holder"]["command"], "x\ny");
        let waiter = &value["waiting"][0];
        assert_eq!(waiter["position"], 2);
        assert_eq!(waiter["client"], "curator");
        assert_eq!(waiter["waited_seconds"], 59.5);
        assert_eq!(waiter["data"], "10.0.0.1");
        assert!(waiter.get("holder").is_none());
        // Clocks differ: never a negative age.
        let early = serde_json::to_value(lock(&status(0))).unwrap();
        assert_eq!(early["holders"][0]["held_seconds"], 0.0);
    }

    #[test]
    fn node_data_converts_field_by_field() {
        let data = HolderData {
            ci: Some(CiJob {
                provider: "gitlab".into(),
                url: "https://gl/j/1".into(),
            }),
            supersede: Some(true),
            first_czxid: Some(3),
            ..HolderData::parse(br#"{"host":"h","pid":9,"zklock_pid":8,"user":"u"}"#).unwrap()
        };
        let json = serde_json::to_value(HolderJson::from(&data)).unwrap();
        // Every field of the node data is in the contract, by the same name:
        // node data read back from the JSON is what was converted.
        let back: HolderData = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, data);
        assert_eq!(json["ci"]["provider"], "gitlab");
        assert!(json.get("label").is_none());
    }

    #[test]
    fn run_records_convert() {
        let run = RunRecord {
            start_ms: 1_000,
            start: "1970-01-01T00:00:01.000Z".into(),
            end_ms: 3_500,
            end: "1970-01-01T00:00:03.500Z".into(),
            host: "h".into(),
            user: None,
            exit_status: 3,
            fencing_token: 42,
        };
        let mut with_record = status(65_500);
        with_record.record = Record {
            last_run: Some(run.clone()),
            last_success: None,
            running: None,
        };
        let value = serde_json::to_value(lock(&with_record)).unwrap();
        assert_eq!(
            value["last_run"],
            serde_json::json!({"start_ms": 1000, "start": "1970-01-01T00:00:01.000Z",
                "end_ms": 3500, "end": "1970-01-01T00:00:03.500Z", "host": "h",
                "exit_status": 3, "fencing_token": 42})
        );
        assert!(value.get("last_success").is_none());
    }

    #[test]
    fn list_entries() {
        let value = serde_json::to_value(list_entry(&status(65_500))).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"path": "/l", "kind": "exclusive", "holders": 1,
                "waiting": 1, "oldest_held_seconds": 60.0})
        );
    }
}
