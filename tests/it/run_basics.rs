//! One `zklock run` at a time: exit statuses, the two command forms, what the command
//! gets (environment, signal state), and how fast the lock passes to the next waiter.

use std::os::unix::fs::symlink;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{
    Gated, Inspector, Outcome, Scene, TempDir, assert_no_nodes, run_bounded, shared_server,
    unique_path, wait_until, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// `zklock run` against the shared server with a fresh lock path; returns its scene too.
fn run_once(tag: &str, configure: impl FnOnce(&mut Command)) -> (Scene, Outcome) {
    let s = Scene::new(tag);
    let mut cmd = s.run();
    configure(&mut cmd);
    let out = run_bounded(&mut cmd, LONG);
    (s, out)
}

fn inspector() -> Inspector {
    Inspector::connect(&shared_server().connect_string())
}

#[test]
fn exit_status_of_the_command_passes_through() {
    for code in [0, 1, 42] {
        let (s, out) = run_once("exit-code", |cmd| {
            cmd.args(["--", "sh", "-c", &format!("exit {code}")]);
        });
        out.assert_code(code);
        s.assert_nothing_left();
    }
}

#[test]
fn command_killed_by_a_signal_gives_128_plus_n() {
    for (signal, name) in [(libc::SIGUSR1, "USR1"), (libc::SIGKILL, "KILL")] {
        let (s, out) = run_once("exit-signal", |cmd| {
            cmd.args(["--", "sh", "-c", &format!("kill -{name} $$")]);
        });
        out.assert_code(128 + signal);
        s.assert_nothing_left();
    }
}

#[test]
fn command_not_found_is_127() {
    for missing in [
        "/nonexistent/zklock-it-command",
        "zklock-it-no-such-command",
    ] {
        let (s, out) = run_once("not-found", |cmd| {
            cmd.args(["--", missing]);
        });
        out.assert_code(127);
        let line = out.one_error_line();
        assert!(line.contains(missing), "{line}");
        s.assert_nothing_left();
    }
}

#[test]
fn command_not_executable_is_126() {
    let dir = TempDir::new();
    let plain_file = dir.path().join("not-executable");
    std::fs::write(&plain_file, "#!/bin/sh\nexit 0\n").unwrap();
    for target in [&plain_file, dir.path()] {
        let (s, out) = run_once("not-executable", |cmd| {
            cmd.arg("--").arg(target);
        });
        out.assert_code(126);
        out.one_error_line();
        s.assert_nothing_left();
    }
}

#[test]
fn executable_file_without_interpreter_line_runs_with_bin_sh() {
    // As execvp does: the kernel refuses it (ENOEXEC), /bin/sh runs it.
    let dir = TempDir::new();
    let script = dir.path().join("no-interpreter-line");
    std::fs::write(&script, "echo \"ran $0 $1\"\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (s, out) = run_once("enoexec", |cmd| {
        cmd.arg("--").arg(&script).arg("an-argument");
    });
    out.assert_code(0);
    assert_eq!(
        out.stdout.trim(),
        format!("ran {} an-argument", script.display())
    );
    s.assert_nothing_left();
}

#[test]
fn shell_string_runs_with_dollar_shell_falling_back_to_bin_sh() {
    let dir = TempDir::new();
    // Another name for sh: `$0` shows which name the shell was started as.
    let own_shell = dir.path().join("own-shell");
    symlink("/bin/sh", &own_shell).unwrap();
    let own_shell = own_shell.to_str().unwrap().to_string();
    for (shell, expected) in [
        (Some("/bin/sh"), "/bin/sh"),
        (Some(own_shell.as_str()), own_shell.as_str()),
        (None, "/bin/sh"),
    ] {
        let (s, out) = run_once("shell-string", |cmd| {
            match shell {
                Some(shell) => cmd.env("SHELL", shell),
                None => cmd.env_remove("SHELL"),
            };
            cmd.args(["-c", "echo \"$0\"; exit 3"]);
        });
        out.assert_code(3);
        assert_eq!(out.stdout, format!("{expected}\n"), "SHELL={shell:?}");
        s.assert_nothing_left();
    }
}

#[test]
fn environment_names_the_held_node_and_overrides_inherited_values() {
    let zk = inspector();
    let path = unique_path("env");
    let mut cmd = zklock_run(&shared_server().connect_string(), &path);
    cmd.env("ZKLOCK_PATH", "/inherited/junk")
        .env("ZKLOCK_NODE", "/inherited/junk/node")
        .env("ZKLOCK_FENCING_TOKEN", "-1")
        .env("ZKLOCK_SESSION_ID", "0xjunk");
    let holder = Gated::start(cmd);
    let env = holder.env();
    let var = |name: &str| {
        env.get(name)
            .unwrap_or_else(|| panic!("{name} missing from {env:?}"))
            .as_str()
    };

    assert_eq!(var("ZKLOCK_PATH"), path);
    let node = var("ZKLOCK_NODE");
    let name = node
        .strip_prefix(&format!("{path}/"))
        .unwrap_or_else(|| panic!("ZKLOCK_NODE {node} is not under {path}"));
    assert!(
        name.starts_with("_c_") && name.contains("-lock-"),
        "not a Curator lock node name: {name}"
    );
    assert_eq!(zk.children(&path), vec![name.to_string()]);
    let (_, stat) = zk
        .get_data(node)
        .expect("ZKLOCK_NODE exists while the command runs");
    assert_eq!(var("ZKLOCK_FENCING_TOKEN"), stat.czxid.to_string());
    let session = var("ZKLOCK_SESSION_ID");
    let hex = session
        .strip_prefix("0x")
        .unwrap_or_else(|| panic!("ZKLOCK_SESSION_ID {session} is not 0x-prefixed hex"));
    let session_id = u64::from_str_radix(hex, 16)
        .unwrap_or_else(|_| panic!("ZKLOCK_SESSION_ID {session} is not hex"));
    assert_eq!(session_id as i64, stat.ephemeral_owner, "{session}");

    assert!(holder.finish().success());
    assert_no_nodes(&zk, &path);
}

/// Parses `grep -E 'Sig(Blk|Ign)' /proc/self/status` output into (name, mask) pairs.
fn signal_masks(out: &Outcome) -> Vec<(String, u64)> {
    out.stdout
        .lines()
        .map(|line| {
            let (name, mask) = line.split_once(':').expect("`Name:\tmask` line");
            let mask = u64::from_str_radix(mask.trim(), 16).expect("hex mask");
            (name.to_string(), mask)
        })
        .collect()
}

const SHOW_SIGNAL_STATE: [&str; 4] = ["grep", "-E", "Sig(Blk|Ign)", "/proc/self/status"];

/// Starts the process the way `nohup` and non-interactive shells start background jobs:
/// HUP, INT and PIPE ignored; and with USR2 blocked, as some supervisors leave it.
fn start_with_signals_ignored_and_blocked(cmd: &mut Command) {
    // SAFETY: signal, sigemptyset, sigaddset and sigprocmask are async-signal-safe and
    // only touch a sigset_t on the stack of the forked child.
    unsafe {
        cmd.pre_exec(|| {
            for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGPIPE] {
                libc::signal(signal, libc::SIG_IGN);
            }
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR2);
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
}

/// glibc reserves signals 32 (SIGCANCEL) and 33 (SIGSETXID) and refuses to change their
/// disposition through sigaction(); its posix_spawn (behind std's `Command::spawn`
/// without `pre_exec`, and Python's `os.posix_spawn`) leaves them ignored in the child.
const GLIBC_INTERNAL_SIGNALS: u64 = 0b11 << 31;

/// Runs the signal-state command under zklock and returns the masks the command saw.
fn command_signal_masks(tag: &str, configure: impl FnOnce(&mut Command)) -> Vec<(String, u64)> {
    let (s, out) = run_once(tag, |cmd| {
        configure(cmd);
        cmd.arg("--").args(SHOW_SIGNAL_STATE);
    });
    out.assert_code(0);
    s.assert_nothing_left();
    let masks = signal_masks(&out);
    assert_eq!(masks.len(), 2, "{}", out.stdout);
    masks
}

#[test]
fn command_starts_with_no_signal_blocked_and_only_inherited_ignores() {
    let standard_signals_clear = |masks: &[(String, u64)]| {
        masks
            .iter()
            .all(|(_, mask)| mask & !GLIBC_INTERNAL_SIGNALS == 0)
    };
    let masks = command_signal_masks("sigstate", |_| {});
    assert!(standard_signals_clear(&masks), "{masks:x?}");

    // Check that the setup really hands such a state down without zklock in between.
    let mut direct = Command::new(SHOW_SIGNAL_STATE[0]);
    direct.args(&SHOW_SIGNAL_STATE[1..]);
    start_with_signals_ignored_and_blocked(&mut direct);
    let out = run_bounded(&mut direct, LONG);
    assert!(
        signal_masks(&out)
            .iter()
            .all(|(_, mask)| mask & !GLIBC_INTERNAL_SIGNALS != 0),
        "setup did not take: {}",
        out.stdout
    );

    // Signals ignored when zklock started stay ignored (nohup's HUP, a background
    // job's INT), except PIPE; blocked ones are not passed on.
    let masks = command_signal_masks("sigstate-inherited", start_with_signals_ignored_and_blocked);
    let hup_and_int = 1 << (libc::SIGHUP - 1) | 1 << (libc::SIGINT - 1);
    assert_eq!(
        masks
            .iter()
            .map(|(name, mask)| (name.as_str(), mask & !GLIBC_INTERNAL_SIGNALS))
            .collect::<Vec<_>>(),
        [("SigBlk", 0), ("SigIgn", hup_and_int)],
        "zklock passed on the wrong signal state: {masks:x?}"
    );
}

#[test]
fn command_starts_with_glibc_reserved_signals_not_ignored() {
    // zklock spawned through posix_spawn starts with 32 and 33 ignored.
    let masks = command_signal_masks("sigstate-reserved", |_| {});
    assert!(
        masks.iter().all(|(_, mask)| *mask == 0),
        "signals ignored or blocked in the command: {masks:x?}"
    );
}

#[test]
fn next_waiter_starts_promptly_after_the_holder_ends() {
    // With a 10 s session, a release that left our node to die with the session would
    // keep the next waiter out for seconds.
    let zk = inspector();
    let path = unique_path("hand-off");
    let connect = shared_server().connect_string();
    let queue = || {
        let mut cmd = zklock_run(&connect, &path);
        cmd.args(["--session-timeout", "10s"]);
        cmd
    };
    let first = Gated::start(queue());
    let mut second = Gated::spawn(queue());
    wait_until(LONG, "second zklock queued", || {
        zk.children(&path).len() == 2
    });
    assert!(!second.started());

    let released = Instant::now();
    first.release();
    second.wait_started(LONG);
    let hand_off = released.elapsed();
    eprintln!("hand-off took {hand_off:?}");
    assert!(
        hand_off < Duration::from_secs(2),
        "next command started {hand_off:?} after the release"
    );

    assert!(first.finish().success());
    assert!(second.finish().success());
    assert_no_nodes(&zk, &path);
}
