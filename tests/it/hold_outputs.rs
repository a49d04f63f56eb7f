//! What follows a hold's life besides its variables (docs/design.md,
//! "Holds"): the metrics file and health-check pings (systemd's
//! notification is in systemd.rs).

use crate::harness::wait_until;
use crate::hold::{LONG, Place, read};
use crate::ping::PingServer;

#[test]
fn the_metrics_file_follows_the_hold() {
    let place = Place::new("hold-metrics");
    let zk = place.zk();
    let exit_line = |code: u8| format!("zklock_exit_status{{path=\"{}\"}} {code}\n", place.path);
    place
        .run(
            r#"eval "$("$ZKLOCK" hold --metrics-file "$OUT/released.prom" -z "$ZK" "$P")"
            "$ZKLOCK" release"#,
        )
        .assert_code(0);
    // Written as the holder ends, right after its answer to the release.
    wait_until(LONG, "the metrics file says 0", || {
        read(&place.file("released.prom")).contains(&exit_line(0))
    });
    // Lost at --max-hold: written then, before any release.
    place
        .run(
            r#""$ZKLOCK" hold --until-released --max-hold 1s --metrics-file "$OUT/lost.prom" \
            -z "$ZK" "$P" > "$OUT/vars""#,
        )
        .assert_code(0);
    wait_until(LONG, "the metrics file says 76", || {
        read(&place.file("lost.prom")).contains(&exit_line(76))
    });
    place
        .run(r#"eval "$(cat "$OUT/vars")"; "$ZKLOCK" release"#)
        .assert_code(76);
    place.assert_clean(zk);
}

/// `--ping`: the start when the hold is held, success when it is released,
/// `/76` when it is lost (at `--max-hold`, before any release).
#[test]
fn pings_follow_the_hold() {
    let place = Place::new("hold-ping");
    let zk = place.zk();
    let released = PingServer::start(200);
    place
        .run(&format!(
            r#"eval "$("$ZKLOCK" hold --ping '{}' -z "$ZK" "$P")"
            "$ZKLOCK" release"#,
            released.url
        ))
        .assert_code(0);
    wait_until(LONG, "the start and the success pings", || {
        released.requests().len() >= 2
    });
    assert_eq!(
        released.requests(),
        [
            "GET /ping/secret-uuid/start HTTP/1.1",
            "GET /ping/secret-uuid HTTP/1.1"
        ]
    );
    let lost = PingServer::start(200);
    place
        .run(&format!(
            r#""$ZKLOCK" hold --until-released --max-hold 1s --ping '{}' \
            -z "$ZK" "$P" > "$OUT/vars""#,
            lost.url
        ))
        .assert_code(0);
    wait_until(LONG, "the start and the failure pings", || {
        lost.requests().len() >= 2
    });
    assert_eq!(
        lost.requests(),
        [
            "GET /ping/secret-uuid/start HTTP/1.1",
            "GET /ping/secret-uuid/76 HTTP/1.1"
        ]
    );
    place
        .run(r#"eval "$(cat "$OUT/vars")"; "$ZKLOCK" release"#)
        .assert_code(76);
    place.assert_clean(zk);
}

/// `-v`: the holder says what it acquired, as `run` does (the same events;
/// docs/design.md, "Holds": it waits exactly as `run` does).
#[test]
fn a_verbose_hold_says_what_it_acquired() {
    let place = Place::new("hold-verbose");
    let zk = place.zk();
    let out = place.run(
        r#"eval "$("$ZKLOCK" hold -v -z "$ZK" "$P")"
        echo "$ZKLOCK_NODE $ZKLOCK_FENCING_TOKEN"
        "$ZKLOCK" release"#,
    );
    out.assert_code(0);
    let (node, token) = out.stdout.trim().split_once(' ').expect("node and token");
    assert!(
        out.stderr
            .contains(&format!("acquired {node} (fencing token {token}) after ")),
        "{}",
        out.stderr
    );
    place.assert_clean(zk);
}

/// A hold lost while ZooKeeper is unreachable reports its loss when it is
/// lost, not once its session's end is given up on: with 20 s sessions
/// that end is waited for 6 s, and the metrics file says 76 well before.
#[test]
fn a_loss_in_an_outage_reaches_the_metrics_file_at_once() {
    let server = crate::harness::shared_server();
    let proxy = crate::harness::FaultProxy::start(server.addr());
    let place = Place::at(&proxy.connect_string(), "hold-metrics-outage");
    place
        .run(
            r#""$ZKLOCK" hold --until-released --max-hold 1s --session-timeout 20s \
            --metrics-file "$OUT/lost.prom" -z "$ZK" "$P" > "$OUT/vars""#,
        )
        .assert_code(0);
    let held = std::time::Instant::now();
    proxy.set_mode(crate::harness::Mode::Blackhole);
    let exit_line = format!("zklock_exit_status{{path=\"{}\"}} 76\n", place.path);
    wait_until(LONG, "the metrics file says 76", || {
        read(&place.file("lost.prom")).contains(&exit_line)
    });
    assert!(
        held.elapsed() < std::time::Duration::from_secs(4),
        "the loss at --max-hold 1s was written after {:?}",
        held.elapsed()
    );
    proxy.set_mode(crate::harness::Mode::Pass);
    place
        .run(r#"eval "$(cat "$OUT/vars")"; "$ZKLOCK" release"#)
        .assert_code(76);
    place.assert_clean(place.zk());
}

/// `-v` names only options `zklock hold` has (it once told of a
/// `--kill-after` that hold refused): every `--option` in what a verbose
/// hold says is one of `zklock hold --help`'s.
#[test]
fn a_verbose_hold_names_only_options_hold_has() {
    let place = Place::new("hold-verbose-options");
    let zk = place.zk();
    let out = place.run(r#"eval "$("$ZKLOCK" hold -v -z "$ZK" "$P")"; "$ZKLOCK" release"#);
    out.assert_code(0);
    let help = place.run(r#""$ZKLOCK" hold --help"#);
    help.assert_code(0);
    let options = |text: &str| -> Vec<String> {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .filter(|word| word.starts_with("--") && word.len() > 2)
            .map(str::to_owned)
            .collect()
    };
    let known = options(&help.stdout);
    let said = options(&out.stderr);
    assert!(said.iter().any(|o| o == "--kill-after"), "{}", out.stderr);
    for option in said {
        assert!(
            known.contains(&option),
            "{option} is not hold's: {}",
            out.stderr
        );
    }
    place.assert_clean(zk);
}

/// `hold --kill-after`: the steps that outlive their TERM are killed that
/// long after it (a step that ignores TERM, the hold lost at --max-hold);
/// a value that does not fit the session is refused (64), and the script
/// is stopped.
#[test]
fn kill_after_bounds_the_steps_that_ignore_term() {
    let place = Place::new("hold-kill-after");
    let zk = place.zk();
    // The step says when TERM came, then beats until it is killed.
    let out = place.run(
        r#"eval "$("$ZKLOCK" hold --max-hold 2s --kill-after 1s -z "$ZK" "$P")"
        sh -c 'trap "date +%s.%N >> \"$OUT/term\"" TERM
               while true; do date +%s.%N >> "$OUT/beat"; sleep 0.05; done'"#,
    );
    // Stopped: its shell too is a step (KILLed with the rest, or ended
    // by the TERM).
    assert!(!out.status.success(), "{:?}", out.status);
    // Appended, so that a KILL in the middle of a write leaves the lines
    // before it whole: the last whole one.
    let seconds = |name: &str| {
        let text = read(&place.file(name));
        let line = text.lines().rev().find(|line| line.len() > 10);
        line.and_then(|line| line.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no time in {name}: {text:?}"))
    };
    let (term, last) = (seconds("term"), seconds("beat"));
    // KILL one second after TERM, not the default five.
    assert!(
        (0.8..3.0).contains(&(last - term)),
        "killed {:.2} s after TERM",
        last - term
    );
    place.assert_clean(zk);
    let refused =
        place.run(r#"eval "$("$ZKLOCK" hold --kill-after 60s -z "$ZK" "$P")" || exit; echo ran"#);
    refused.assert_code(64);
    assert!(!refused.stdout.contains("ran"), "{}", refused.stdout);
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("--kill-after"),
        "{}",
        refused.stderr
    );
    place.assert_clean(zk);
}
