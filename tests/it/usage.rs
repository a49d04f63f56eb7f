//! Bad command lines: exit 64, one line on stderr, and nothing done in ZooKeeper.

use std::time::Duration;

use crate::harness::{Inspector, assert_no_nodes, run_bounded, shared_server, unique_path, zklock};

#[test]
fn usage_errors_exit_64_with_one_line_before_connecting() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    // Every lock path below is under `base`, so anything created would show there.
    let base = unique_path("usage");
    let lock = format!("{base}/lock");
    let relative = lock.trim_start_matches('/').to_string();
    let paths = [
        ("relative path", relative.as_str()),
        ("empty component", &format!("{base}//lock")),
        ("trailing slash", &format!("{lock}/")),
        ("`.` component", &format!("{base}/./lock")),
        ("`..` component", &format!("{lock}/..")),
        ("control character", &format!("{base}/lo\u{1}ck")),
        ("newline", &format!("{base}/lo\nck")),
        ("/zookeeper", "/zookeeper"),
        ("under /zookeeper", "/zookeeper/lock"),
    ]
    .map(|(why, path)| {
        (
            why,
            ["-z", &connect, path, "--", "true"]
                .map(String::from)
                .to_vec(),
        )
    });
    // With a reachable server, so that a wrongly accepted command line would show up
    // as a node under `base`.
    let args = |list: &[&str]| {
        ["-z", connect.as_str()]
            .iter()
            .chain(list)
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
    };
    let others = [
        ("missing command", args(&[&lock])),
        ("missing command after --", args(&[&lock, "--"])),
        ("empty command name", args(&[&lock, "--", "", "x"])),
        (
            "-c and a command",
            args(&[&lock, "-c", "true", "--", "true"]),
        ),
        (
            "bad --timeout",
            args(&["--timeout", "soon", &lock, "--", "true"]),
        ),
        (
            "negative --timeout",
            args(&["-w", "-1", &lock, "--", "true"]),
        ),
        (
            "bad --session-timeout",
            args(&["--session-timeout", "10 parsecs", &lock, "--", "true"]),
        ),
        (
            "bad --connect-timeout",
            args(&["--connect-timeout", "1.2.3", &lock, "--", "true"]),
        ),
        (
            "bad --kill-after",
            args(&["--kill-after", "x", &lock, "--", "true"]),
        ),
        (
            "--kill-after longer than the session allows",
            args(&[
                "--session-timeout",
                "4s",
                "--kill-after",
                "10s",
                &lock,
                "--",
                "true",
            ]),
        ),
        ("-E 256", args(&["-E", "256", &lock, "--", "true"])),
        ("-E -1", args(&["-E", "-1", &lock, "--", "true"])),
        (
            "--timeout with --no-wait",
            args(&["-w", "1", "-n", &lock, "--", "true"]),
        ),
    ];
    let hosts = [
        ("empty host list", ""),
        ("empty host", "127.0.0.1:2181,,127.0.0.1:2182"),
        ("port out of range", "127.0.0.1:99999"),
        ("port zero", "127.0.0.1:0"),
        ("port not a number", "127.0.0.1:zk"),
        ("space in host", "zk 1:2181"),
        ("bad chroot", "127.0.0.1:2181/apps/"),
    ]
    .map(|(why, hosts)| {
        (
            why,
            ["-z", hosts, &lock, "--", "true"]
                .map(String::from)
                .to_vec(),
        )
    });

    for (why, case) in paths.into_iter().chain(others).chain(hosts) {
        let mut cmd = zklock();
        cmd.arg("run").args(&case);
        let out = run_bounded(&mut cmd, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(64), "{why}: {case:?}: {out:?}");
        out.one_error_line();
        assert!(
            out.elapsed < Duration::from_secs(5),
            "{why}: took {:?}",
            out.elapsed
        );
    }
    assert_no_nodes(&zk, &base);
    assert!(!zk.exists(&base), "{base} was created");
}

/// An argument that is not UTF-8 is a usage error like any other: one line
/// and 64, not a panic, whether it stands for a subcommand, a path or an option.
#[test]
fn arguments_that_are_not_utf8_are_usage_errors() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"\xff");
    let path = OsStr::from_bytes(b"/locks/\xff");
    let cases: [Vec<&OsStr>; 4] = [
        vec![bad],
        vec!["run".as_ref(), path, "--".as_ref(), "true".as_ref()],
        vec![
            "run".as_ref(),
            "-w".as_ref(),
            bad,
            "/x".as_ref(),
            "--".as_ref(),
            "true".as_ref(),
        ],
        vec!["status".as_ref(), path],
    ];
    for case in cases {
        let mut cmd = zklock();
        cmd.args(&case).env("ZKLOCK_ZOOKEEPER", "127.0.0.1:1");
        let out = run_bounded(&mut cmd, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(64), "{case:?}: {out:?}");
        out.one_error_line();
    }
}

/// A bad duration says what to write, in one line, without the parser's
/// own wording ("expected number at 0", "unknown time unit").
#[test]
fn duration_errors_say_what_to_write() {
    for (option, value) in [
        ("--timeout", "abc"),
        ("--timeout", "soon"),
        ("--session-timeout", "10 parsecs"),
        ("--kill-after", "1e999"),
        ("--connect-timeout", ""),
    ] {
        let mut cmd = zklock();
        cmd.args(["run", option, value, "/x", "--", "true"]);
        let out = run_bounded(&mut cmd, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(64), "{option} {value:?}: {out:?}");
        let line = out.one_error_line();
        assert!(
            line.contains(option) && line.contains("like 30s, 5m or 1h"),
            "{line}"
        );
        for internal in [
            "expected number",
            "unknown time unit",
            "supported units",
            "value was empty",
        ] {
            assert!(!line.contains(internal), "{line}");
        }
    }
}
