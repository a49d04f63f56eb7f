//! Every way of calling `zklock hold` that the docs show, in the shells
//! users have (bash, dash, zsh, busybox sh): it either holds for the
//! script's next steps, or stops the script (docs/design.md, "Holds").
//! Each shell runs the command substitution its own way (exec of a lone
//! command, a fork otherwise), so each form runs in each.

use std::process::Command;
use std::thread;

use crate::harness::{Outcome, run_bounded};
use crate::hold::{LONG, Place, read};

/// The shells, as a script names them: every one must be installed
/// (.ci/setup installs them).
const SHELLS: &[&[&str]] = &[&["bash"], &["dash"], &["zsh"], &["busybox", "sh"]];

/// The calling forms, POSIX sh; `$H` stands for the hold's arguments.
const FORMS: &[(&str, &str)] = &[
    ("plain", r#"eval "$("$ZKLOCK" hold $H)""#),
    ("redirection", r#"eval "$("$ZKLOCK" hold $H 2>/dev/null)""#),
    ("or-exit inside", r#"eval "$("$ZKLOCK" hold $H || exit 1)""#),
    (
        "two lines",
        r#"vars=$("$ZKLOCK" hold $H) || exit; eval "$vars""#,
    ),
    (
        "function",
        r#"zk() { "$ZKLOCK" "$@"; }; eval "$(zk hold $H)""#,
    ),
    (
        "timeout inside",
        r#"eval "$(timeout 60 "$ZKLOCK" hold $H)""#,
    ),
    ("set -e", r#"set -e; eval "$("$ZKLOCK" hold $H)""#),
];

/// `SHELL -c SCRIPT` with the place's environment ([`Place::bash`]'s).
fn shell(place: &Place, shell: &[&str], script: &str) -> Command {
    let bash = place.bash(script);
    let mut cmd = Command::new(shell[0]);
    cmd.args(&shell[1..]).arg("-c").arg(script);
    for (key, value) in bash.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    cmd.stdin(std::process::Stdio::null());
    cmd
}

fn run_in(place: &Place, sh: &[&str], script: &str) -> Outcome {
    run_bounded(&mut shell(place, sh, script), LONG)
}

/// Each form in each shell holds the lock for the step after it: a step
/// that runs a second later still finds it held (`status` exits 1), and
/// the lock is free once the script has ended.
#[test]
fn every_calling_form_holds_for_the_next_steps_in_every_shell() {
    let mut cases = Vec::new();
    for sh in SHELLS {
        for (name, form) in FORMS {
            cases.push((sh, name, form));
        }
    }
    let failures: Vec<String> = thread::scope(|scope| {
        let handles: Vec<_> = cases
            .iter()
            .map(|(sh, name, form)| {
                scope.spawn(move || {
                    let place = Place::new("hold-form");
                    let form = form.replace("$H", r#"-z "$ZK" "$P""#);
                    let script = format!(
                        "{form}\nsleep 1\n\
                         if \"$ZKLOCK\" status -z \"$ZK\" \"$P\" > /dev/null; then echo free; \
                         else echo held; fi > \"$OUT/status\""
                    );
                    let out = run_in(&place, sh, &script);
                    let held = read(&place.file("status"));
                    let verdict = if out.code() != 0 || held.trim() != "held" {
                        Some(format!(
                            "{} / {name}: exit {}, status after a second {:?}; {}",
                            sh.join(" "),
                            out.code(),
                            held.trim(),
                            out.stderr
                        ))
                    } else {
                        None
                    };
                    place.assert_clean(place.zk());
                    verdict
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A hold that does not hold stops the script, whatever went wrong, in
/// each shell: with `set -e`, and with `|| exit` after the eval; the step
/// after it never runs, and the script ends with zklock's status.
#[test]
fn a_failed_hold_stops_the_script_in_every_shell() {
    let place = Place::new("hold-fails");
    let _holder = place.held_by_a_shell();
    let failures = [
        ("held elsewhere", r#"-n -z "$ZK" "$P""#, 75),
        ("a refused option", r#"--bogus -z "$ZK" "$P""#, 64),
        (
            "no server",
            r#"--connect-timeout 1s -z 127.0.0.1:1 "$P""#,
            69,
        ),
    ];
    let mut wrong = Vec::new();
    for sh in SHELLS {
        for (what, args, code) in failures {
            for (style, script) in [
                (
                    "set -e",
                    format!(r#"set -e; eval "$("$ZKLOCK" hold {args})""#),
                ),
                (
                    "|| exit",
                    format!(r#"eval "$("$ZKLOCK" hold {args})" || exit"#),
                ),
            ] {
                let step = format!("{script}\necho ran > \"$OUT/ran\"");
                let out = run_in(&place, sh, &step);
                let ran = place.file("ran").exists();
                if out.code() != code || ran {
                    wrong.push(format!(
                        "{} / {what} / {style}: exit {} (want {code}), step ran: {ran}",
                        sh.join(" "),
                        out.code()
                    ));
                }
                let _ = std::fs::remove_file(place.file("ran"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A wrapper that would be the bound process and ends with zklock is
/// refused with one line saying how to call it; nothing is held.
#[test]
fn a_wrapper_that_ends_with_zklock_is_refused() {
    let place = Place::new("hold-wrapper");
    let out = place.run(r#"timeout 60 "$ZKLOCK" hold -z "$ZK" "$P" > "$OUT/vars""#);
    out.assert_code(64);
    assert!(
        out.one_error_line().contains("script's shell itself"),
        "{}",
        out.stderr
    );
    place.assert_clean(place.zk());
}
