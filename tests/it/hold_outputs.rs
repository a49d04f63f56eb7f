//! What follows a hold's life besides its variables (docs/design.md,
//! "Holds"): the metrics file (systemd's notification is in systemd.rs).

use crate::harness::wait_until;
use crate::hold::{LONG, Place, read};

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
