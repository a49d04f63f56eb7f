//! `zklock hold` at a terminal (docs/design.md, "Holds"): its holder shows
//! the wait as `zklock run` does, and Ctrl-C ends the wait with cleanup.

use crate::harness::{Pty, wait_for_exit};
use crate::hold::{LONG, Place};

#[test]
fn the_wait_shows_at_the_terminal_and_ctrl_c_ends_it() {
    let place = Place::new("hold-terminal");
    let zk = place.zk();
    let mut holder = place.spawn(
        r#"eval "$("$ZKLOCK" hold --label 'nightly deploy' -z "$ZK" "$P")"; echo x > "$OUT/held"
        while true; do sleep 0.1; done"#,
    );
    assert!(crate::harness::wait_for_file(place.file("held"), LONG));
    let mut pty = Pty::open();
    pty.set_size(24, 120);
    let mut waiter = pty
        .spawn(place.bash(r#"eval "$("$ZKLOCK" hold -z "$ZK" "$P")"; echo "held: $ZKLOCK_NODE""#));
    // The status line of a visible wait, drawn by the holder on the
    // caller's terminal; it names the holder's --label.
    pty.read_until(&format!("for {}: 1 ahead, held by", place.path), LONG);
    pty.read_until(": nightly deploy", LONG);
    pty.write(&[0x03]);
    let status = wait_for_exit(&mut waiter.0, LONG).expect("the waiting shell still runs");
    let shown = pty.read_to_end(LONG);
    assert!(!status.success(), "{status}; terminal showed:\n{shown}");
    assert!(!shown.contains("held: "), "terminal showed:\n{shown}");
    crate::harness::wait_until(LONG, "only the holder's node is left", || {
        zk.tree(&place.path).len() == 1
    });
    crate::harness::signal(holder.0.id() as i32, libc::SIGKILL);
    let _ = holder.0.wait();
    place.assert_clean(zk);
}
