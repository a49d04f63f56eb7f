//! The one renderer of a holder for people (docs/design.md, "Holder
//! data"): in `status` and `break`, in the wait line and its `-v` lines,
//! and where a run ends because of another one. Node data comes from other
//! hosts: every field is escaped to one line.

use std::time::SystemTime;

use serde_json::Value;

use super::{escape_controls, whole_seconds};
use crate::lock::holder::{HoldBinding, HolderData, Seen};
use crate::values::{Precision, rfc3339, server_time};

/// How much of a holder a line has room for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// `pid 4242 (zklock 4240) on web1 (user deploy)`, then
    /// `, CI job https://...` when it runs in one (both details).
    Full,
    /// `pid 4242 on web1`, the process that holds (or, queued, zklock): the
    /// status line while waiting.
    Brief,
}

/// Who holds or waits, escaped to one line (node data comes from other
/// hosts: it must not break our one-line messages or send control
/// sequences to the terminal). Empty when the data names nobody.
pub fn who(holder: &HolderData, detail: Detail) -> String {
    let held = holder.acquired == Some(true);
    let process = match (detail, holder.pid, holder.zklock_pid) {
        (Detail::Full, Some(pid), Some(zklock)) if zklock != pid => {
            format!("pid {pid} (zklock {zklock})")
        }
        // Queued (or starting its command): zklock is the process to name.
        (Detail::Brief, Some(_), Some(zklock)) if !held => format!("zklock {zklock}"),
        (_, Some(pid), _) => format!("pid {pid}"),
        (_, None, Some(zklock)) => format!("zklock {zklock}"),
        (_, None, None) => String::new(),
    };
    let user = holder.user.as_deref().filter(|_| detail == Detail::Full);
    let mut parts = vec![process];
    if let Some(host) = &holder.host {
        parts.push(on_host(host, user));
    }
    parts.retain(|part| !part.is_empty());
    let mut who = parts.join(" ");
    if let Some(hold) = holder.hold.as_ref().filter(|_| detail == Detail::Full) {
        who.push_str(&format!(", {}", bound(hold)));
    }
    // Last, and followed by a space or the end of the line, never by a
    // bracket: CI logs and terminals then link the whole URL.
    if let Some(ci) = &holder.ci {
        if !who.is_empty() {
            who.push_str(", ");
        }
        who.push_str(&format!("CI job {}", escape_controls(&ci.url)));
    }
    who
}

/// What a hold is bound to (docs/design.md, "Holds"): `bound to pid 4242
/// (bash)`, or `until released`, then `, at most until ...` with
/// --max-hold.
fn bound(hold: &HoldBinding) -> String {
    let bound = match (hold.bound_pid, &hold.bound_name) {
        (Some(pid), Some(name)) => format!("bound to pid {pid} ({})", escape_controls(name)),
        (Some(pid), None) => format!("bound to pid {pid}"),
        (None, _) => "until released".to_owned(),
    };
    match &hold.until {
        Some(until) => format!("{bound}, at most until {}", escape_controls(until)),
        None => bound,
    }
}

/// What it runs: its label, or its command line, escaped to one line.
pub fn what(holder: &HolderData) -> Option<String> {
    holder
        .label
        .as_deref()
        .or(holder.command.as_deref())
        .map(escape_controls)
}

/// `on web1 (user deploy)`, escaped to one line: where a holder (or a
/// recorded run) ran.
pub fn on_host(host: &str, user: Option<&str>) -> String {
    let host = escape_controls(host);
    match user {
        Some(user) => format!("on {host} (user {})", escape_controls(user)),
        None => format!("on {host}"),
    }
}

/// A one-line description of a holder from its node, e.g.
/// `pid 4242 (zklock 4240) on web1 (user deploy) since 2026-11-22T10:00:00Z: ./backup.sh`
/// once it runs its command, or
/// `zklock 4240 on web1 (user deploy) queued since ...: ./backup.sh` before.
/// Data written by other clients (Curator, kazoo) is shown as text if short.
pub fn describe(seen: &Seen) -> Option<String> {
    let Some(data) = HolderData::parse(&seen.data) else {
        if serde_json::from_slice::<Value>(&seen.data).is_ok_and(|v| v.is_object()) {
            return None;
        }
        let text = std::str::from_utf8(&seen.data).ok()?.trim();
        let printable =
            !text.is_empty() && text.len() <= 120 && !text.chars().any(char::is_control);
        return printable.then(|| format!("data {text:?}"));
    };
    if data.pid.is_none() && data.zklock_pid.is_none() {
        return None;
    }
    // Before its one write, a holder has only queued (or is starting its
    // command).
    let (since, at) = match data.acquired == Some(true) {
        true => ("since", seen.mtime),
        false => ("queued since", seen.ctime),
    };
    let at = rfc3339(server_time(at), Precision::Seconds);
    let what = what(&data)
        .map(|what| format!(": {what}"))
        .unwrap_or_default();
    // After what a hold is bound to (`until released`), a comma; after a
    // CI job's URL, only a space (see `who`).
    let comma = match data.hold.is_some() && data.ci.is_none() {
        true => ",",
        false => "",
    };
    Some(format!(
        "{}{comma} {since} {at}{what}",
        who(&data, Detail::Full)
    ))
}

/// `pid 4242 on web1 for 14m` from a holder's node, for the wait line,
/// then `: LABEL` when it has a --label (a command line is too long for
/// the line; a label is what its holder chose to be known by). How long it
/// has held is counted from its acquisition write's mtime (server clock)
/// to `now` (this host's clock, as `zklock status` does), never negative.
pub fn brief(seen: &Seen, now: SystemTime) -> Option<String> {
    let Some(data) = HolderData::parse(&seen.data) else {
        return describe(seen);
    };
    if data.pid.is_none() && data.zklock_pid.is_none() {
        return None;
    }
    let mut text = who(&data, Detail::Brief);
    if data.acquired == Some(true) {
        let held = now.duration_since(server_time(seen.mtime));
        text.push_str(&format!(" for {}", whole_seconds(held.unwrap_or_default())));
    }
    if let Some(label) = &data.label {
        text.push_str(&format!(": {}", escape_controls(label)));
    }
    Some(text)
}

/// The newer `--supersede` run that superseded ours, from its node or
/// record (None: nothing was read of it).
pub fn superseder(seen: Option<&Seen>) -> String {
    seen.and_then(describe)
        .unwrap_or_else(|| "a newer --supersede run".to_owned())
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
    fn a_hold_says_what_it_is_bound_to() {
        let data = HolderData {
            hold: Some(HoldBinding {
                bound_pid: Some(4242),
                bound_name: Some("bash\n".into()),
                until: None,
            }),
            ..HolderData::ours(&["zklock".into(), "hold".into()], None)
        };
        let me = std::process::id();
        let held = describe(&seen(&data.acquired(me).to_bytes())).unwrap();
        assert!(held.starts_with(&format!("pid {me} on ")), "{held}");
        assert!(
            held.contains(", bound to pid 4242 (bash\\n), since 2026-11-22T10:20:00Z: zklock hold"),
            "{held}"
        );
        let unbound = HoldBinding {
            bound_pid: None,
            bound_name: None,
            until: Some("2026-11-22T11:00:00Z".into()),
        };
        assert_eq!(
            bound(&unbound),
            "until released, at most until 2026-11-22T11:00:00Z"
        );
        // Queued (a newer --supersede hold, as its predecessor names it).
        let queued = HolderData {
            hold: Some(HoldBinding {
                until: None,
                ..unbound
            }),
            ..HolderData::ours(&["zklock".into(), "hold".into()], None)
        };
        let text = describe(&seen(&queued.to_bytes())).unwrap();
        assert!(
            text.contains(", until released, queued since 2026-11-22T10:00:00Z: zklock hold"),
            "{text}"
        );
    }

    #[test]
    fn own_data_round_trips() {
        let own = HolderData::ours(&["./backup.sh".into(), "--full".into()], None);
        let queued = describe(&seen(&own.to_bytes())).unwrap();
        let me = std::process::id();
        assert!(queued.starts_with(&format!("zklock {me} on ")), "{queued}");
        assert!(
            queued.ends_with(" queued since 2026-11-22T10:00:00Z: ./backup.sh --full"),
            "{queued}"
        );
        let held = describe(&seen(&own.acquired(4242).to_bytes())).unwrap();
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
    fn fields_stay_on_one_line() {
        let data = br#"{"pid":7,"host":"a\nb","acquired":true,"command":"sh -c 'echo a\nsleep 1\u001b[2J'"}"#;
        let text = describe(&seen(data)).unwrap();
        assert_eq!(
            text,
            r"pid 7 on a\nb since 2026-11-22T10:20:00Z: sh -c 'echo a\nsleep 1\u{1b}[2J'"
        );
    }

    #[test]
    fn one_renderer_in_two_details() {
        let parse = |json: &str| HolderData::parse(json.as_bytes()).unwrap();
        let held = parse(r#"{"host":"h","pid":9,"zklock_pid":8,"user":"u","acquired":true}"#);
        assert_eq!(who(&held, Detail::Full), "pid 9 (zklock 8) on h (user u)");
        assert_eq!(who(&held, Detail::Brief), "pid 9 on h");
        let queued = parse(r#"{"host":"h","zklock_pid":8,"user":"u","command":"x"}"#);
        assert_eq!(who(&queued, Detail::Full), "zklock 8 on h (user u)");
        assert_eq!(who(&queued, Detail::Brief), "zklock 8 on h");
        assert_eq!(what(&queued).as_deref(), Some("x"));
        // Data that gave zklock's own pid as `pid` too: named once.
        assert_eq!(
            who(&parse(r#"{"pid":8,"zklock_pid":8}"#), Detail::Full),
            "pid 8"
        );
        assert_eq!(who(&parse(r#"{"host":"h"}"#), Detail::Full), "on h");
    }

    #[test]
    fn the_ci_job_is_part_of_the_one_renderer() {
        let parse = |json: &str| HolderData::parse(json.as_bytes()).unwrap();
        let held = parse(
            r#"{"host":"h","pid":9,"zklock_pid":8,"user":"u","acquired":true,
                "ci":{"provider":"gitlab","url":"https://gl/j/1\u001b[2J"}}"#,
        );
        assert_eq!(
            who(&held, Detail::Full),
            r"pid 9 (zklock 8) on h (user u), CI job https://gl/j/1\u{1b}[2J"
        );
        assert_eq!(
            who(&held, Detail::Brief),
            r"pid 9 on h, CI job https://gl/j/1\u{1b}[2J"
        );
        assert_eq!(
            describe(&seen(&held.to_bytes())).unwrap(),
            r"pid 9 (zklock 8) on h (user u), CI job https://gl/j/1\u{1b}[2J since 2026-11-22T10:20:00Z"
        );
        // An unknown provider (a newer zklock's) still shows.
        let other = parse(r#"{"pid":9,"ci":{"provider":"x","url":"u"}}"#);
        assert_eq!(who(&other, Detail::Brief), "pid 9, CI job u");
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

    #[test]
    fn long_commands_are_cut_visibly() {
        let argv: Vec<std::ffi::OsString> = (0..100).map(|_| "x".repeat(1000).into()).collect();
        let data = HolderData::ours(&argv, None).acquired(1).to_bytes();
        let text = describe(&seen(&data)).unwrap();
        let cut = 100 * 1001 - 1 - crate::lock::holder::MAX_COMMAND_BYTES;
        let end = &text[text.len() - 40..];
        assert!(text.ends_with(&format!("x…[+{cut} bytes]")), "{end}");
    }

    #[test]
    fn supersedes_named() {
        assert_eq!(superseder(None), "a newer --supersede run");
        assert_eq!(superseder(Some(&seen(b""))), "a newer --supersede run");
        let run = br#"{"pid":9,"host":"h","acquired":true}"#;
        assert_eq!(
            superseder(Some(&seen(run))),
            "pid 9 on h since 2026-11-22T10:20:00Z"
        );
    }
}
