//! The holder's runtime directory and what it keeps of its caller
//! (docs/design.md, "Holds"): the directory is checked before the wait, a
//! `zklock-UID` another user took first denies no hold, and the holder
//! keeps none of the caller's descriptors.

use crate::harness::wait_until;
use crate::hold::{LONG, Place, holder_pid, read};

/// `mkdir PATH` as another user (nobody), as a squatter would.
const SQUAT: &str = "setpriv --reuid=65534 --regid=65534 --clear-groups mkdir -m 0777";

#[test]
fn a_runtime_directory_of_another_user_is_refused_before_the_wait() {
    let place = Place::new("runtime-before");
    let zk = place.zk();
    let mut holder = place.held_by_a_shell();
    // The lock is held: a refusal after the wait would be 75 here.
    let out = place.run(&format!(
        r#"mkdir -m 0777 "$OUT/xdg" && {SQUAT} "$OUT/xdg/zklock" || exit 99
        XDG_RUNTIME_DIR="$OUT/xdg" "$ZKLOCK" hold -n -z "$ZK" "$P""#
    ));
    out.assert_code(70);
    assert!(
        out.one_error_line().contains("is not a directory of uid"),
        "{}",
        out.stderr
    );
    assert_eq!(out.stdout, "(exit 70)\n");
    crate::harness::signal(holder.0.id() as i32, libc::SIGKILL);
    let _ = holder.0.wait();
    place.assert_clean(zk);
}

#[test]
fn a_squatted_tmp_directory_leads_to_a_private_one_that_release_finds() {
    let place = Place::new("runtime-squat");
    let zk = place.zk();
    // Without XDG_RUNTIME_DIR, as in cron and most CI; the temporary
    // directory is the test's own, shared as /tmp is.
    let out = place.run(&format!(
        r#"unset XDG_RUNTIME_DIR; export TMPDIR="$OUT/tmp"
        mkdir -m 1777 "$TMPDIR" && {SQUAT} "$TMPDIR/zklock-$(id -u)" || exit 99
        set -e
        eval "$("$ZKLOCK" hold -z "$ZK" "$P")"
        echo "$ZKLOCK_HOLD"
        ls -A "$TMPDIR/zklock-$(id -u)" > "$OUT/squatted"
        "$ZKLOCK" release "$P""#
    ));
    out.assert_code(0);
    let socket = out.stdout.trim();
    let tmp = place.file("tmp");
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(place.dir.path()).unwrap());
    let private = format!("{}/zklock-{uid}.", tmp.display());
    assert!(socket.starts_with(&private), "{socket}");
    // Nothing of ours went into the other user's directory.
    assert_eq!(read(&place.file("squatted")), "");
    assert!(place.is_free(zk));
    place.assert_clean(zk);
}

#[test]
fn the_holder_is_named_and_keeps_none_of_the_callers_descriptors() {
    let place = Place::new("runtime-fds");
    let zk = place.zk();
    // The script takes a flock(1) lock on descriptor 9, holds, and ends.
    place
        .run(
            r#"exec 9> "$OUT/flock"; flock 9
            "$ZKLOCK" hold --until-released --max-hold 10m -z "$ZK" "$P" > "$OUT/vars""#,
        )
        .assert_code(0);
    assert!(!place.is_free(zk));
    // The script is gone; its flock lock must be too.
    place.run(r#"flock -n "$OUT/flock" true"#).assert_code(0);
    let socket = std::fs::read_dir(place.runtime_dir())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let pid = holder_pid(&socket).unwrap();
    // `ps` names it.
    assert_eq!(
        read(format!("/proc/{pid}/comm").as_ref()).trim(),
        "zklock-holder"
    );
    place
        .run(r#"eval "$(cat "$OUT/vars")"; "$ZKLOCK" release"#)
        .assert_code(0);
    wait_until(LONG, "the holder ends", || !crate::harness::pid_alive(pid));
    place.assert_clean(zk);
}
