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
    ("pipe inside", r#"eval "$("$ZKLOCK" hold $H | cat)""#),
    (
        "sh -c inside",
        r#"eval "$(sh -c '"$ZKLOCK" hold "$@"' sh $H)""#,
    ),
    // The reader of zklock's output is itself a substitution's subshell.
    // `|| :`: under `set -e`, dash and zsh end that subshell at a failed
    // hold, before it prints zklock's `(exit N)` (docs/holds.md).
    (
        "function of its own",
        r#"lock() { v=$("$ZKLOCK" hold $H) || :; echo "$v"; }; eval "$(lock)""#,
    ),
    (
        "nested substitution",
        r#"eval "$(v=$("$ZKLOCK" hold $H) || :; echo "$v")""#,
    ),
];

/// Forms of the shells that have them (bash, and zsh for `<(...)`).
const BASH_FORMS: &[(&str, &str)] = &[
    (
        "set -eE with an ERR trap",
        r#"set -eE; trap 'echo failed >&2' ERR; eval "$("$ZKLOCK" hold $H)""#,
    ),
    ("source of <(...)", r#". <("$ZKLOCK" hold $H)"#),
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

/// Every form in every shell that has it.
fn cases() -> Vec<(&'static [&'static str], &'static str, &'static str)> {
    let mut cases = Vec::new();
    for sh in SHELLS {
        for (name, form) in FORMS {
            cases.push((*sh, *name, *form));
        }
    }
    for sh in [&["bash"][..], &["zsh"]] {
        for (name, form) in BASH_FORMS {
            cases.push((sh, *name, *form));
        }
    }
    cases
}

/// `check` of each case, each in a place of its own, all at once; what
/// went wrong, one line per case.
fn in_parallel(
    cases: &[(&[&str], &str, &str)],
    check: impl Fn(&Place, &[&str], &str, &str) -> Option<String> + Sync,
) -> Vec<String> {
    let _turn = crate::harness::heavy();
    let mut wrong = Vec::new();
    // A dozen at a time: each case is a shell, zklock and a holder.
    for batch in cases.chunks(12) {
        wrong.extend(thread::scope(|scope| {
            let handles: Vec<_> = (batch.iter())
                .map(|&(sh, name, form)| {
                    let check = &check;
                    scope.spawn(move || {
                        let place = Place::new("hold-form");
                        let form = form.replace("$H", r#"-z "$ZK" "$P""#);
                        let wrong = check(&place, sh, name, &form);
                        place.assert_clean(place.zk());
                        wrong.map(|wrong| format!("{} / {name}: {wrong}", sh.join(" ")))
                    })
                })
                .collect();
            (handles.into_iter())
                .filter_map(|h| h.join().unwrap())
                .collect::<Vec<String>>()
        }));
    }
    wrong
}

/// Whether the lock is held a second after `form` (a step that runs then
/// still finds it held), as a script in `sh`; what went wrong if not.
/// `status` exits 1 when held (0 free, 69 or 70 unanswered).
fn holds_for_the_next_step(place: &Place, sh: &[&str], form: &str) -> Option<String> {
    let script = format!(
        "{form}\nsleep 1\n\
         if \"$ZKLOCK\" status -z \"$ZK\" \"$P\" > /dev/null; then echo 0; \
         else echo $?; fi > \"$OUT/status\""
    );
    let out = run_in(place, sh, &script);
    let status = read(&place.file("status"));
    (out.code() != 0 || status.trim() != "1").then(|| {
        format!(
            "exit {}, status's exit after a second {:?}; {}",
            out.code(),
            status.trim(),
            out.stderr
        )
    })
}

/// Each form in each shell holds the lock for the step after it, and the
/// lock is free once the script has ended.
#[test]
fn every_calling_form_holds_for_the_next_steps_in_every_shell() {
    let failures = in_parallel(&cases(), |place, sh, _, form| {
        holds_for_the_next_step(place, sh, form)
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The same when the lock is held elsewhere first and freed while the
/// form waits: what the hold is bound to is found before the wait.
#[test]
fn every_calling_form_that_waits_holds_for_the_next_steps() {
    let failures = in_parallel(&cases(), |place, sh, _, form| {
        let holder = place.held_by_a_shell();
        let form = form.replace(" hold ", " hold -w 30s ");
        let freeing = thread::spawn(move || {
            thread::sleep(std::time::Duration::from_secs(1));
            drop(holder);
        });
        let wrong = holds_for_the_next_step(place, sh, &form);
        freeing.join().unwrap();
        wrong
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Each form stops the script under `set -e` when the lock is held
/// elsewhere (`-n`): the step after it never runs, and the script ends
/// with zklock's status.
#[test]
fn every_calling_form_that_fails_stops_the_script() {
    let failures = in_parallel(&cases(), |place, sh, _, form| {
        let _holder = place.held_by_a_shell();
        let form = form.replace(" hold ", " hold -n ");
        let out = run_in(
            place,
            sh,
            &format!("set -e\n{form}\necho ran > \"$OUT/ran\""),
        );
        let ran = place.file("ran").exists();
        (out.code() != 75 || ran).then(|| {
            format!(
                "exit {} (want 75), step ran: {ran}; {}",
                out.code(),
                out.stderr
            )
        })
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
                // What the lock was just before, should the hold be taken.
                let before = place.run(r#""$ZKLOCK" status -z "$ZK" "$P""#);
                let step = format!("{script}\necho ran > \"$OUT/ran\"");
                let out = run_in(&place, sh, &step);
                let ran = place.file("ran").exists();
                if out.code() != code || ran {
                    wrong.push(format!(
                        "{} / {what} / {style}: exit {} (want {code}), step ran: {ran}; \
                         {}; the lock before: {} {}",
                        sh.join(" "),
                        out.code(),
                        out.stderr.trim(),
                        before.code(),
                        before.stdout.trim()
                    ));
                }
                let _ = std::fs::remove_file(place.file("ran"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A wrapper that would be the bound process and ends with zklock is
/// refused with one line saying how to call it; nothing is held; in each
/// shell.
#[test]
fn a_wrapper_that_ends_with_zklock_is_refused() {
    let place = Place::new("hold-wrapper");
    for sh in SHELLS {
        let out = run_in(
            &place,
            sh,
            r#"timeout 60 "$ZKLOCK" hold -z "$ZK" "$P" > "$OUT/vars""#,
        );
        out.assert_code(64);
        assert!(
            out.one_error_line().contains("script's shell itself"),
            "{}: {}",
            sh.join(" "),
            out.stderr
        );
        place.assert_clean(place.zk());
    }
}
