//! The data stored in our lock node: who holds or waits, for people reading
//! `-v` output or looking at the tree. Correctness never depends on it.

use std::ffi::OsString;

use serde_json::{Value, json};

/// A small JSON object describing this zklock process.
pub fn describe_self(argv: &[OsString]) -> Vec<u8> {
    let command: Vec<String> = argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    json!({
        "host": hostname(),
        "pid": std::process::id(),
        "user": user(),
        "command": command.join(" "),
        "start": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "version": env!("CARGO_PKG_VERSION"),
    })
    .to_string()
    .into_bytes()
}

/// A one-line description of a holder from its node data, e.g.
/// `pid 812 on web1 (user deploy) since 2026-11-22T10:00:00Z: ./backup.sh`.
/// Data written by other clients (Curator, kazoo) is shown as text if short.
pub fn describe(data: &[u8]) -> Option<String> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(data) else {
        let text = std::str::from_utf8(data).ok()?.trim();
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
    let mut text = format!("pid {}", field("pid")?);
    if let Some(host) = field("host") {
        text.push_str(&format!(" on {host}"));
    }
    if let Some(user) = field("user") {
        text.push_str(&format!(" (user {user})"));
    }
    if let Some(start) = field("start") {
        text.push_str(&format!(" since {start}"));
    }
    if let Some(command) = field("command") {
        text.push_str(&format!(": {command}"));
    }
    Some(text)
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

    #[test]
    fn own_data_round_trips() {
        let data = describe_self(&["./backup.sh".into(), "--full".into()]);
        let text = describe(&data).unwrap();
        assert!(
            text.starts_with(&format!("pid {} on ", std::process::id())),
            "{text}"
        );
        assert!(text.ends_with(": ./backup.sh --full"), "{text}");
    }

    #[test]
    fn fields_stay_on_one_line() {
        let data = br#"{"pid":7,"host":"a\nb","command":"sh -c 'echo a\nsleep 1\u001b[2J'"}"#;
        let text = describe(data).unwrap();
        assert_eq!(text, r"pid 7 on a\nb: sh -c 'echo a\nsleep 1\u{1b}[2J'");
    }

    #[test]
    fn foreign_data() {
        assert_eq!(describe(b"10.0.0.7"), Some("data \"10.0.0.7\"".into()));
        assert_eq!(describe(b""), None);
        assert_eq!(describe(&[0xff, 0xfe]), None);
        assert_eq!(describe(br#"{"host":"a"}"#), None);
    }
}
