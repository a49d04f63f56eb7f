//! The data stored in our lock nodes (docs/design.md, "Holder data"): who
//! holds or waits, for people; correctness never depends on it. It is
//! shown by present::holder, and in JSON by present::json.

use std::ffi::OsString;

use serde::{Deserialize, Serialize};
use zklock::zk;

use crate::origin::ci::CiJob;
use crate::origin::{hostname, user};

/// What zklock writes into its nodes (every field optional: older versions
/// and other clients write less, or something else).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The command's pid once it runs; zklock's own before that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zklock_pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Set by the write zklock makes once it holds the lock; that write's
    /// mtime is when the lock was taken, on the server's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquired: Option<bool>,
    /// The CI job zklock runs in, when it runs in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci: Option<CiJob>,
    /// `true` when the run was started with --supersede: a newer such run
    /// may remove it from the queue while it waits (supersede.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersede: Option<bool>,
    /// With `supersede`: the czxid of the run's first node, in a node it
    /// created again in a new session (absent in the first: its own czxid).
    /// The run's age on ZooKeeper's clock (supersede.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_czxid: Option<i64>,
    /// Set by `zklock hold`'s holder: what the hold is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<HoldBinding>,
}

/// What a hold (`zklock hold`) is bound to (docs/design.md, "Holds").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldBinding {
    /// The calling process, whose exit releases the hold; none with
    /// `--until-released`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_name: Option<String>,
    /// `--max-hold`'s end, RFC 3339 (the holder's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

/// At most this many bytes of the command line (or label) are stored: the
/// node data must stay far below the server's request limit (jute.maxbuffer,
/// 1 MiB by default), which would otherwise refuse our create.
pub const MAX_COMMAND_BYTES: usize = 4096;

impl HolderData {
    /// zklock's data, if `data` is that: it names a host or a pid.
    pub fn parse(data: &[u8]) -> Option<HolderData> {
        let parsed: HolderData = serde_json::from_slice(data).ok()?;
        (parsed.host.is_some() || parsed.pid.is_some()).then_some(parsed)
    }

    /// This zklock running `argv`, or `label` instead of it, as its node
    /// says while it queues.
    pub fn ours(argv: &[OsString], label: Option<&str>) -> HolderData {
        let stored = |text: &str| Some(truncate(text, MAX_COMMAND_BYTES));
        let (command, label) = match label {
            Some(label) => (None, stored(label)),
            None => {
                let words: Vec<_> = argv.iter().map(|a| a.to_string_lossy()).collect();
                (stored(&words.join(" ")), None)
            }
        };
        HolderData {
            host: Some(hostname()),
            pid: None,
            zklock_pid: Some(std::process::id()),
            user: Some(user()),
            command,
            label,
            version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            acquired: None,
            ci: CiJob::from_env(|name| std::env::var(name).ok()).map(|ci| CiJob {
                url: truncate(&ci.url, MAX_COMMAND_BYTES),
                ..ci
            }),
            supersede: None,
            first_czxid: None,
            hold: None,
        }
    }

    /// The same holder once the command (process `pid`) runs: written once,
    /// that write's mtime is when the lock was taken, by the server's clock.
    pub fn acquired(&self, pid: u32) -> HolderData {
        HolderData {
            pid: Some(pid),
            acquired: Some(true),
            ..self.clone()
        }
    }

    /// A `--supersede` run's age, from its node (created in transaction
    /// `czxid`): when it first queued, on ZooKeeper's clock. None for the
    /// other runs.
    pub fn supersede_age(&self, czxid: i64) -> Option<i64> {
        (self.supersede == Some(true)).then(|| self.first_czxid.unwrap_or(czxid))
    }

    /// The node data: a JSON object.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("holder data always serializes")
    }
}

/// `text`, or its first `max` bytes (cut on a character boundary) followed
/// by `…[+N bytes]` for the N bytes left out.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[+{} bytes]", &text[..end], text.len() - end)
}

/// A node's data as read, with the server times that date it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub data: Vec<u8>,
    /// When the node was created (its holder queued), ms since the epoch.
    pub ctime: i64,
    /// When its data was last written, ms since the epoch.
    pub mtime: i64,
}

impl From<(Vec<u8>, zk::records::Stat)> for Seen {
    fn from((data, stat): (Vec<u8>, zk::records::Stat)) -> Seen {
        Seen {
            data,
            ctime: stat.ctime,
            mtime: stat.mtime,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn stable_fields() {
        let own = HolderData {
            // Not whatever CI these tests run in.
            ci: Some(CiJob {
                provider: "gitlab".into(),
                url: "https://gitlab.example/g/p/-/jobs/7".into(),
            }),
            ..HolderData::ours(
                &["mysqldump".into(), "--password=hunter2".into()],
                Some("nightly"),
            )
        };
        let Ok(Value::Object(fields)) = serde_json::from_slice(&own.acquired(7).to_bytes()) else {
            panic!("not an object");
        };
        let mut keys: Vec<&str> = fields.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys.join(","),
            "acquired,ci,host,label,pid,user,version,zklock_pid"
        );
        assert_eq!(fields["label"], "nightly");
        assert_eq!(
            fields["ci"],
            serde_json::json!({"provider": "gitlab", "url": "https://gitlab.example/g/p/-/jobs/7"})
        );
        // Outside CI: no field at all.
        let plain = HolderData { ci: None, ..own };
        assert!(!String::from_utf8_lossy(&plain.to_bytes()).contains("\"ci\""));
        assert!(!String::from_utf8_lossy(&plain.to_bytes()).contains("hunter2"));
    }

    #[test]
    fn long_commands_are_cut_visibly() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcdef", 4), "abcd…[+2 bytes]");
        // "é" is two bytes: the cut moves back to a character boundary.
        assert_eq!(truncate("aé", 2), "a…[+2 bytes]");
        let argv: Vec<OsString> = (0..100).map(|_| "x".repeat(1000).into()).collect();
        let data = HolderData::ours(&argv, None).acquired(1).to_bytes();
        assert!(data.len() < MAX_COMMAND_BYTES + 512, "{}", data.len());
        let command = HolderData::parse(&data).unwrap().command.unwrap();
        let cut = 100 * 1001 - 1 - MAX_COMMAND_BYTES;
        assert!(command.ends_with(&format!("x…[+{cut} bytes]")), "{command}");
    }
}
