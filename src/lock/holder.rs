//! The data stored in our lock nodes (docs/design.md, "Holder data"): who
//! holds or waits, for people; correctness never depends on it. The one
//! renderer of a holder for people is [`HolderData::who`].

use std::ffi::OsString;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use zklock::zk;

use crate::values::{Precision, rfc3339, server_time};

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
}

/// The CI job a zklock runs in, from its provider's documented environment
/// (docs/design.md, "Holder data"): a waiter's log then links to the job
/// it waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CiJob {
    /// `github-actions`, `gitlab`, `jenkins`, `buildkite` or `circleci`.
    pub provider: String,
    pub url: String,
}

impl CiJob {
    /// The job named by the variables `var` gives (None for unset, empty or
    /// not UTF-8), or None outside a CI job we know. Each provider is
    /// recognised by its own marker variable, so that a URL variable left
    /// over from elsewhere (`BUILD_URL` is a common name) names no job.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<CiJob> {
        let var = |name: &str| var(name).filter(|value| !value.is_empty());
        let is_true = |name: &str| var(name).as_deref() == Some("true");
        let job = |provider: &str, url: Option<String>| {
            url.map(|url| CiJob {
                provider: provider.to_owned(),
                url: truncate(&url, MAX_COMMAND_BYTES),
            })
        };
        if is_true("GITHUB_ACTIONS") {
            let run = match (
                var("GITHUB_SERVER_URL"),
                var("GITHUB_REPOSITORY"),
                var("GITHUB_RUN_ID"),
            ) {
                (Some(server), Some(repository), Some(run)) => Some(format!(
                    "{}/{repository}/actions/runs/{run}{}",
                    server.trim_end_matches('/'),
                    // A re-run keeps the run's id: the attempt's own page
                    // is the one that ran this.
                    (var("GITHUB_RUN_ATTEMPT"))
                        .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
                        .map(|n| format!("/attempts/{n}"))
                        .unwrap_or_default()
                )),
                _ => None,
            };
            return job("github-actions", run);
        }
        if is_true("GITLAB_CI") {
            return job("gitlab", var("CI_JOB_URL"));
        }
        if is_true("BUILDKITE") {
            return job("buildkite", var("BUILDKITE_BUILD_URL"));
        }
        if is_true("CIRCLECI") {
            return job("circleci", var("CIRCLE_BUILD_URL"));
        }
        // Jenkins sets no `true` marker; its URL and home are always set.
        if var("JENKINS_URL").is_some() || var("JENKINS_HOME").is_some() {
            return job("jenkins", var("BUILD_URL"));
        }
        None
    }
}

/// At most this many bytes of the command line (or label) are stored: the
/// node data must stay far below the server's request limit (jute.maxbuffer,
/// 1 MiB by default), which would otherwise refuse our create.
pub const MAX_COMMAND_BYTES: usize = 4096;

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
            ci: CiJob::from_env(|name| std::env::var(name).ok()),
            supersede: None,
            first_czxid: None,
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

    /// Who holds or waits, escaped to one line (node data comes from other
    /// hosts: it must not break our one-line messages or send control
    /// sequences to the terminal). Empty when the data names nobody.
    pub fn who(&self, detail: Detail) -> String {
        let held = self.acquired == Some(true);
        let process = match (detail, self.pid, self.zklock_pid) {
            (Detail::Full, Some(pid), Some(zklock)) if zklock != pid => {
                format!("pid {pid} (zklock {zklock})")
            }
            // Queued (or starting its command): zklock is the process to name.
            (Detail::Brief, Some(_), Some(zklock)) if !held => format!("zklock {zklock}"),
            (_, Some(pid), _) => format!("pid {pid}"),
            (_, None, Some(zklock)) => format!("zklock {zklock}"),
            (_, None, None) => String::new(),
        };
        let user = self.user.as_deref().filter(|_| detail == Detail::Full);
        let mut parts = vec![process];
        if let Some(host) = &self.host {
            parts.push(on_host(host, user));
        }
        parts.retain(|part| !part.is_empty());
        let mut who = parts.join(" ");
        // Last, and followed by a space or the end of the line, never by a
        // bracket: CI logs and terminals then link the whole URL.
        if let Some(ci) = &self.ci {
            if !who.is_empty() {
                who.push_str(", ");
            }
            who.push_str(&format!("CI job {}", escape_controls(&ci.url)));
        }
        who
    }

    /// What it runs: its label, or its command line, escaped to one line.
    pub fn what(&self) -> Option<String> {
        self.label
            .as_deref()
            .or(self.command.as_deref())
            .map(escape_controls)
    }
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
    let what = data
        .what()
        .map(|what| format!(": {what}"))
        .unwrap_or_default();
    Some(format!("{} {since} {at}{what}", data.who(Detail::Full)))
}

/// Shows control characters (newlines, escape sequences) as Rust escapes.
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

fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The name of our real user id from the password database (cron and CI do
/// not always set LOGNAME), or the number if it has no entry.
fn user() -> String {
    let uid = rustix::process::getuid().as_raw();
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
        let text = describe(&seen(&data)).unwrap();
        let cut = 100 * 1001 - 1 - MAX_COMMAND_BYTES;
        let end = &text[text.len() - 40..];
        assert!(text.ends_with(&format!("x…[+{cut} bytes]")), "{end}");
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
        assert_eq!(held.who(Detail::Full), "pid 9 (zklock 8) on h (user u)");
        assert_eq!(held.who(Detail::Brief), "pid 9 on h");
        let queued = parse(r#"{"host":"h","zklock_pid":8,"user":"u","command":"x"}"#);
        assert_eq!(queued.who(Detail::Full), "zklock 8 on h (user u)");
        assert_eq!(queued.who(Detail::Brief), "zklock 8 on h");
        assert_eq!(queued.what().as_deref(), Some("x"));
        // Data that gave zklock's own pid as `pid` too: named once.
        assert_eq!(
            parse(r#"{"pid":8,"zklock_pid":8}"#).who(Detail::Full),
            "pid 8"
        );
        assert_eq!(parse(r#"{"host":"h"}"#).who(Detail::Full), "on h");
    }

    /// `from_env` over exactly these variables.
    fn ci(vars: &[(&str, &str)]) -> Option<(String, String)> {
        let found = CiJob::from_env(|name| {
            (vars.iter())
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        });
        found.map(|job| (job.provider, job.url))
    }

    fn job(provider: &str, url: &str) -> Option<(String, String)> {
        Some((provider.to_owned(), url.to_owned()))
    }

    #[test]
    fn ci_jobs_from_each_providers_variables() {
        let github = [
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_SERVER_URL", "https://github.com"),
            ("GITHUB_REPOSITORY", "octo/app"),
            ("GITHUB_RUN_ID", "1234"),
        ];
        let run = "https://github.com/octo/app/actions/runs/1234";
        assert_eq!(ci(&github), job("github-actions", run));
        // GitHub Enterprise Server: its own server URL.
        let mut ghes = github;
        ghes[1].1 = "https://git.corp.example/";
        assert_eq!(
            ci(&ghes),
            job(
                "github-actions",
                "https://git.corp.example/octo/app/actions/runs/1234"
            )
        );
        for missing in 1..github.len() {
            let mut partial = github.to_vec();
            partial[missing].1 = "";
            assert_eq!(ci(&partial), None, "{} empty", github[missing].0);
            partial.remove(missing);
            assert_eq!(ci(&partial), None, "without {}", github[missing].0);
        }
        assert_eq!(ci(&github[1..]), None, "GITHUB_ACTIONS unset");
        // A re-run is its own attempt: its page, not the first attempt's.
        let attempt =
            |n: &'static str| ci(&[github.as_slice(), &[("GITHUB_RUN_ATTEMPT", n)]].concat());
        let second = "https://github.com/octo/app/actions/runs/1234/attempts/2";
        assert_eq!(attempt("2"), job("github-actions", second));
        assert_eq!(
            attempt("1"),
            job("github-actions", &format!("{run}/attempts/1"))
        );
        // Empty or not a number: the run's page.
        assert_eq!(attempt(""), job("github-actions", run));
        assert_eq!(attempt("2x"), job("github-actions", run));

        let gitlab_job = "https://gitlab.com/g/p/-/jobs/42";
        assert_eq!(
            ci(&[("GITLAB_CI", "true"), ("CI_JOB_URL", gitlab_job)]),
            job("gitlab", gitlab_job)
        );
        assert_eq!(ci(&[("GITLAB_CI", "true"), ("CI_JOB_URL", "")]), None);
        assert_eq!(ci(&[("CI_JOB_URL", gitlab_job)]), None);

        let jenkins_build = "https://ci.example/job/deploy/17/";
        for marker in ["JENKINS_URL", "JENKINS_HOME"] {
            assert_eq!(
                ci(&[(marker, "x"), ("BUILD_URL", jenkins_build)]),
                job("jenkins", jenkins_build)
            );
        }
        assert_eq!(ci(&[("BUILD_URL", jenkins_build)]), None);
        assert_eq!(
            ci(&[("JENKINS_URL", ""), ("BUILD_URL", jenkins_build)]),
            None
        );
        assert_eq!(ci(&[("JENKINS_URL", "x")]), None);

        let buildkite_build = "https://buildkite.com/acme/app/builds/88";
        assert_eq!(
            ci(&[
                ("BUILDKITE", "true"),
                ("BUILDKITE_BUILD_URL", buildkite_build)
            ]),
            job("buildkite", buildkite_build)
        );
        assert_eq!(ci(&[("BUILDKITE_BUILD_URL", buildkite_build)]), None);

        let circle_build = "https://circleci.com/gh/acme/app/99";
        assert_eq!(
            ci(&[("CIRCLECI", "true"), ("CIRCLE_BUILD_URL", circle_build)]),
            job("circleci", circle_build)
        );
        assert_eq!(
            ci(&[("CIRCLECI", "false"), ("CIRCLE_BUILD_URL", circle_build)]),
            None
        );

        // Outside CI (a generic `CI=true` names no job).
        assert_eq!(ci(&[]), None);
        assert_eq!(ci(&[("CI", "true")]), None);
    }

    #[test]
    fn the_ci_job_is_part_of_the_one_renderer() {
        let parse = |json: &str| HolderData::parse(json.as_bytes()).unwrap();
        let held = parse(
            r#"{"host":"h","pid":9,"zklock_pid":8,"user":"u","acquired":true,
                "ci":{"provider":"gitlab","url":"https://gl/j/1\u001b[2J"}}"#,
        );
        assert_eq!(
            held.who(Detail::Full),
            r"pid 9 (zklock 8) on h (user u), CI job https://gl/j/1\u{1b}[2J"
        );
        assert_eq!(
            held.who(Detail::Brief),
            r"pid 9 on h, CI job https://gl/j/1\u{1b}[2J"
        );
        assert_eq!(
            describe(&seen(&held.to_bytes())).unwrap(),
            r"pid 9 (zklock 8) on h (user u), CI job https://gl/j/1\u{1b}[2J since 2026-11-22T10:20:00Z"
        );
        // An unknown provider (a newer zklock's) still shows.
        let other = parse(r#"{"pid":9,"ci":{"provider":"x","url":"u"}}"#);
        assert_eq!(other.who(Detail::Brief), "pid 9, CI job u");
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
