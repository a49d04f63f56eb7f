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
