//! The data stored in our lock node: who holds or waits, for people reading
//! `-v` output, "not acquired" messages or `status`. Correctness never
//! depends on it.
//!
//! The fields (a JSON object; README "Holder data" documents them):
//! `host`, `zklock_pid`, `user`, `command` or `label`, `version` from the
//! create; `pid` (the command's) and `acquired: true` added by one write
//! once the command runs. The time the lock was taken is that write's
//! `mtime` (server clock); the time the holder queued is the node's `ctime`.

use std::ffi::OsString;
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};
use zookeeper_client as zk;

/// At most this many bytes of the command line (or label) are stored: the
/// node data must stay far below the server's request limit (jute.maxbuffer,
/// 1 MiB by default), which would otherwise refuse our create.
pub const MAX_COMMAND_BYTES: usize = 4096;

/// What a holder tells about itself.
pub struct OwnData {
    fields: Map<String, Value>,
}

impl OwnData {
    /// Describes this zklock running `argv`, or `label` instead of it.
    pub fn new(argv: &[OsString], label: Option<&str>) -> OwnData {
        let (key, text) = match label {
            Some(label) => ("label", label.to_owned()),
            None => {
                let words: Vec<String> = argv
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect();
                ("command", words.join(" "))
            }
        };
        let Value::Object(mut fields) = json!({
            "host": hostname(),
            "zklock_pid": std::process::id(),
            "user": user(),
            "version": env!("CARGO_PKG_VERSION"),
        }) else {
            unreachable!("json! of an object literal is an object")
        };
        fields.insert(key.into(), truncate(&text, MAX_COMMAND_BYTES).into());
        OwnData { fields }
    }

    /// The data our node is created with, while we queue.
    pub fn queued(&self) -> Vec<u8> {
        Value::Object(self.fields.clone()).to_string().into_bytes()
    }

    /// The data written once the command (process `pid`) runs: the write's
    /// mtime is when the lock was taken, by the server's clock.
    pub fn acquired(&self, pid: u32) -> Vec<u8> {
        let mut fields = self.fields.clone();
        fields.insert("pid".into(), pid.into());
        fields.insert("acquired".into(), true.into());
        Value::Object(fields).to_string().into_bytes()
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

impl From<(Vec<u8>, zk::Stat)> for Seen {
    fn from((data, stat): (Vec<u8>, zk::Stat)) -> Seen {
        Seen {
            data,
            ctime: stat.ctime,
            mtime: stat.mtime,
        }
    }
}

/// A one-line description of a holder from its node, e.g.
/// `pid 4242 (zklock 4240) on web1 (user deploy) since 2026-11-22T10:00:00Z: ./backup.sh`
/// once it runs its command, or
/// `zklock 4240 on web1 (user deploy) queued since ...: ./backup.sh` before.
/// Data written by other clients (Curator, kazoo) is shown as text if short.
pub fn describe(seen: &Seen) -> Option<String> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&seen.data) else {
        let text = std::str::from_utf8(&seen.data).ok()?.trim();
        let printable =
            !text.is_empty() && text.len() <= 120 && !text.chars().any(char::is_control);
        return printable.then(|| format!("data {text:?}"));
    };
    // Node data comes from other hosts: it must not break our one-line
    // messages or send control sequences to the terminal.
    let field = |name: &str| match fields.get(name) {
        Some(Value::String(s)) => Some(escape_controls(s)),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let mut text = match (field("pid"), field("zklock_pid")) {
        (Some(pid), Some(zklock)) => format!("pid {pid} (zklock {zklock})"),
        (Some(pid), None) => format!("pid {pid}"),
        (None, Some(zklock)) => format!("zklock {zklock}"),
        (None, None) => return None,
    };
    if let Some(host) = field("host") {
        text.push_str(&format!(" on {host}"));
    }
    if let Some(user) = field("user") {
        text.push_str(&format!(" (user {user})"));
    }
    // Before its one write, a holder has only queued (or is starting its
    // command); zklock before 0.2 never wrote, and its `start` was the
    // host's clock at queueing, so it is not shown.
    if fields.get("acquired") == Some(&Value::Bool(true)) {
        text.push_str(&format!(" since {}", server_time(seen.mtime)));
    } else {
        text.push_str(&format!(" queued since {}", server_time(seen.ctime)));
    }
    if let Some(what) = field("label").or_else(|| field("command")) {
        text.push_str(&format!(": {what}"));
    }
    Some(text)
}

/// A server timestamp (ms since the epoch) in RFC 3339, to the second.
fn server_time(millis: i64) -> String {
    let time = SystemTime::UNIX_EPOCH + Duration::from_millis(millis.max(0) as u64);
    humantime::format_rfc3339_seconds(time).to_string()
}

/// Shows control characters (newlines, escape sequences) as Rust escapes.
pub fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its whole length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The name of our real user id from the password database (cron and CI do
/// not always set LOGNAME), or the number if it has no entry.
fn user() -> String {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut buf = vec![0u8; 4096];
    // SAFETY: passwd is plain data; getpwuid_r writes only into `entry` and
    // `buf` (bounded by its length) and sets `found` to null or to `entry`.
    unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut entry,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        );
        if rc == 0 && !found.is_null() && !entry.pw_name.is_null() {
            return std::ffi::CStr::from_ptr(entry.pw_name)
                .to_string_lossy()
                .into_owned();
        }
    }
    format!("uid {uid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(data: &[u8]) -> Seen {
        Seen {
            data: data.to_vec(),
            // 2026-11-22T10:00:00Z and 20 minutes later.
            ctime: 1_795_341_600_000,
            mtime: 1_795_342_800_000,
        }
    }

    #[test]
    fn own_data_round_trips() {
        let own = OwnData::new(&["./backup.sh".into(), "--full".into()], None);
        let queued = describe(&seen(&own.queued())).unwrap();
        let me = std::process::id();
        assert!(queued.starts_with(&format!("zklock {me} on ")), "{queued}");
        assert!(
            queued.ends_with(" queued since 2026-11-22T10:00:00Z: ./backup.sh --full"),
            "{queued}"
        );
        let held = describe(&seen(&own.acquired(4242))).unwrap();
        assert!(
            held.starts_with(&format!("pid 4242 (zklock {me}) on ")),
            "{held}"
        );
        assert!(
            held.ends_with(" since 2026-11-22T10:20:00Z: ./backup.sh --full"),
            "{held}"
        );
    }

    #[test]
    fn stable_fields() {
        let own = OwnData::new(
            &["mysqldump".into(), "--password=hunter2".into()],
            Some("nightly"),
        );
        let Ok(Value::Object(fields)) = serde_json::from_slice(&own.acquired(7)) else {
            panic!("not an object");
        };
        let mut keys: Vec<&str> = fields.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "acquired",
                "host",
                "label",
                "pid",
                "user",
                "version",
                "zklock_pid"
            ]
        );
        assert_eq!(fields["label"], "nightly");
        assert!(!String::from_utf8_lossy(&own.queued()).contains("hunter2"));
    }

    #[test]
    fn long_commands_are_cut_visibly() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcdef", 4), "abcd…[+2 bytes]");
        // "é" is two bytes: the cut moves back to a character boundary.
        assert_eq!(truncate("aé", 2), "a…[+2 bytes]");
        let argv: Vec<OsString> = (0..100).map(|_| "x".repeat(1000).into()).collect();
        let data = OwnData::new(&argv, None).acquired(1);
        assert!(data.len() < MAX_COMMAND_BYTES + 512, "{}", data.len());
        let text = describe(&seen(&data)).unwrap();
        assert!(
            text.ends_with(&format!(
                "x…[+{} bytes]",
                100 * 1001 - 1 - MAX_COMMAND_BYTES
            )),
            "{}",
            &text[text.len() - 40..]
        );
    }

    #[test]
    fn fields_stay_on_one_line() {
        let data = br#"{"pid":7,"host":"a\nb","acquired":true,"command":"sh -c 'echo a\nsleep 1\u001b[2J'"}"#;
        let text = describe(&seen(data)).unwrap();
        assert_eq!(
            text,
            r"pid 7 on a\nb since 2026-11-22T10:20:00Z: sh -c 'echo a\nsleep 1\u{1b}[2J'"
        );
    }

    #[test]
    fn foreign_data() {
        assert_eq!(
            describe(&seen(b"10.0.0.7")),
            Some("data \"10.0.0.7\"".into())
        );
        assert_eq!(describe(&seen(b"")), None);
        assert_eq!(describe(&seen(&[0xff, 0xfe])), None);
        assert_eq!(describe(&seen(br#"{"host":"a"}"#)), None);
    }
}
