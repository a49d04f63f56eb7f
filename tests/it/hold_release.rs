//! `zklock release` ends only a hold it owns, and never hangs
//! (docs/design.md, "Holds"): by PATH, only a hold of the same CI job, or
//! outside CI of the same session; a holder that takes the connection and
//! never answers costs a deadline and a one-line 69.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;

use crate::harness::{Scene, signal, wait_until};
use crate::hold::{LONG, Place, holder_pid};

const UNTIL_RELEASED: &str = r#""$ZKLOCK" hold --until-released --max-hold 10m -z "$ZK""#;

/// A GitLab job's variables, as its runner sets them.
fn gitlab(job: u32) -> String {
    format!("GITLAB_CI=true CI_JOB_URL=https://gitlab.example/g/deploy/-/jobs/{job}")
}

#[test]
fn release_by_path_in_ci_ends_only_a_hold_of_the_same_job() {
    let place = Place::new("release-job");
    let zk = place.zk();
    let hold = format!(r#"{} {UNTIL_RELEASED} "$P" > "$OUT/vars""#, gitlab(1));
    place.run(&hold).assert_code(0);
    // Job 2's after_script, whose own hold timed out: job 1's hold stays.
    let other = place.run(&format!(r#"{} "$ZKLOCK" release "$P""#, gitlab(2)));
    other.assert_code(64);
    let line = other.one_error_line();
    assert!(line.contains("by this CI job"), "{line}");
    assert!(line.contains("1 of another CI job"), "{line}");
    assert!(!place.is_free(zk));
    // Nor is a shell outside CI job 1's owner.
    place.run(r#""$ZKLOCK" release "$P""#).assert_code(64);
    assert!(!place.is_free(zk));
    place
        .run(&format!(r#"{} "$ZKLOCK" release "$P""#, gitlab(1)))
        .assert_code(0);
    assert!(place.is_free(zk));
    place.assert_clean(zk);
}

#[test]
fn release_by_path_outside_ci_ends_only_a_hold_of_the_same_session() {
    let place = Place::new("release-session");
    let zk = place.zk();
    // Held from this test's session.
    place
        .run(&format!(r#"{UNTIL_RELEASED} "$P" > "$OUT/vars""#))
        .assert_code(0);
    // Another session (another terminal, another cron job) by PATH: no.
    let other = place.run(r#"setsid -w "$ZKLOCK" release "$P""#);
    other.assert_code(64);
    assert!(
        other.one_error_line().contains("by this session"),
        "{}",
        other.stderr
    );
    assert!(!place.is_free(zk));
    // By its ZKLOCK_HOLD, handed to whoever was given the variables: yes.
    place
        .run(r#"eval "$(cat "$OUT/vars")"; setsid -w "$ZKLOCK" release"#)
        .assert_code(0);
    assert!(place.is_free(zk));
    // A script's own hold, released by PATH from the script.
    place
        .run(r#"set -e; eval "$("$ZKLOCK" hold -z "$ZK" "$P")"; "$ZKLOCK" release "$P""#)
        .assert_code(0);
    place.assert_clean(zk);
}

#[test]
fn a_socket_that_never_answers_costs_a_deadline_not_a_hang() {
    let place = Place::new("release-silent");
    let dir = place.runtime_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    // Listening, never accepting, with a backlog of one: the first connect
    // succeeds and nothing answers; the backlog is then full, and a
    // blocking connect would wait for ever (a holder stopped long enough).
    let socket = dir.join("hold-1.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    // SAFETY: listen(2) again, on a descriptor the listener owns and keeps
    // open, only changes its backlog.
    assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
    let by_variable = r#"ZKLOCK_RELEASE_DEADLINE=1s ZKLOCK_HOLD="$XDG_RUNTIME_DIR/zklock/hold-1.sock" \
        "$ZKLOCK" release"#;
    let out = place.run(by_variable);
    out.assert_code(69);
    assert!(
        out.one_error_line().contains("no answer from the holder"),
        "{}",
        out.stderr
    );
    // By PATH, it is asked what it holds: no answer is no hold found, and
    // says which holder kept silent.
    let out = place.run(r#""$ZKLOCK" release "$P""#);
    out.assert_code(69);
    assert!(
        out.one_error_line().contains("hold-1.sock"),
        "{}",
        out.stderr
    );
    place.run(by_variable).assert_code(69);
    drop(listener);
}

#[test]
fn a_stopped_holder_of_another_path_does_not_stop_a_release() {
    let place = Place::new("release-stopped");
    let zk = place.zk();
    let second = Scene::on(place.connect.clone(), "release-stopped-2");
    place
        .run(&format!(r#"{UNTIL_RELEASED} "$P" > "$OUT/vars1""#))
        .assert_code(0);
    let stopped = holder_pid(
        &std::fs::read_dir(place.runtime_dir())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    signal(stopped, libc::SIGSTOP);
    let resume = Resume(stopped);
    let out = place.run(&format!(
        r#"P2={}; {UNTIL_RELEASED} "$P2" > "$OUT/vars2" && "$ZKLOCK" release "$P2""#,
        second.path
    ));
    out.assert_code(0);
    assert!(second.zk().tree(&second.path).is_empty());
    // The stopped holder's own path: no answer, said in one line.
    let out = place.run(r#""$ZKLOCK" release "$P""#);
    out.assert_code(69);
    out.one_error_line();
    let out = place.run(r#"ZKLOCK_RELEASE_DEADLINE=1s; export ZKLOCK_RELEASE_DEADLINE; eval "$(cat "$OUT/vars1")"; "$ZKLOCK" release"#);
    out.assert_code(69);
    out.one_error_line();
    drop(resume);
    wait_until(LONG, "the resumed holder answers", || {
        place.run(r#""$ZKLOCK" release "$P""#).status.code() != Some(69)
    });
    place.assert_clean(zk);
}

/// Sends SIGCONT when dropped: a failed test leaves no stopped holder.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        signal(self.0, libc::SIGCONT);
    }
}
