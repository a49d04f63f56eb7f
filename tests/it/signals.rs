//! Signals to zklock: forwarded to the command's process group while it runs, an abort
//! while waiting, escalation to SIGKILL, and zklock itself killed.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{
    Gated, KillGroupOnDrop, KillOnDrop, Scene, TempDir, pid_alive, read_pid_file, shared_server,
    signal, wait_for_exit, wait_for_file, wait_pid_gone, wait_until, zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// Generous bound for "at once" on a busy two-core machine.
const PROMPTLY: Duration = Duration::from_secs(2);

/// Kill-after long enough that it never fires by accident while a test looks, with a
/// session long enough for zklock to accept it.
const PATIENT: [&str; 4] = ["--kill-after", "20s", "--session-timeout", "40s"];

/// Spawns `zklock run [options] PATH -- sh -c SCRIPT sh DIR`.
fn spawn_script(path: &str, options: &[&str], script: &str, dir: &Path) -> KillOnDrop {
    let mut cmd: Command = zklock_run(&shared_server().connect_string(), path);
    cmd.args(options)
        .args(["--", "sh", "-c", script, "sh"])
        .arg(dir)
        .stdout(Stdio::null());
    KillOnDrop(cmd.spawn().expect("spawn zklock"))
}

fn exit_of(child: &mut Child) -> i32 {
    let status = wait_for_exit(child, LONG).expect("zklock still running");
    status
        .code()
        .unwrap_or_else(|| panic!("zklock itself died: {status}"))
}

/// The command traps the signal and holds out until the test says `go`; its child (the
/// test's "grandchild", running in the foreground so that a non-interactive shell does
/// not make it ignore INT) must die of the forwarded signal. Then the command dies of
/// the same signal.
fn forwarded_to_the_group_and_released_after_it(sig: libc::c_int, name: &str) {
    let s = Scene::new(&format!("forward-{name}"));
    let dir = TempDir::new();
    let script = format!(
        r#"trap 'touch "$1/trapped"; while [ ! -e "$1/go" ]; do sleep 0.02; done; touch "$1/finished"; trap - {name}; kill -{name} $$' {name}
echo $$ > "$1/command"
sh -c 'echo $$ > "$1/grandchild"; exec sleep 300' sh "$1"
"#
    );
    let mut zklock = spawn_script(&s.path, &PATIENT, &script, dir.path());
    let _group = KillGroupOnDrop::of(read_pid_file(&dir.path().join("command"), LONG));
    let grandchild = read_pid_file(&dir.path().join("grandchild"), LONG);
    let held = s.zk().children(&s.path);
    assert_eq!(held.len(), 1, "{held:?}");

    signal(zklock.id() as i32, sig);
    assert!(
        wait_for_file(dir.path().join("trapped"), LONG),
        "the command never got SIG{name}"
    );
    assert!(
        wait_pid_gone(grandchild, LONG),
        "the command's child survived SIG{name}"
    );
    // The command is provably still running (it waits for `go`): the lock is still ours.
    assert!(zklock.try_wait().unwrap().is_none(), "zklock left early");
    assert_eq!(
        s.zk().children(&s.path),
        held,
        "node deleted while the group ran"
    );

    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(exit_of(&mut zklock), 128 + sig);
    assert!(dir.path().join("finished").exists());
    s.assert_nothing_left();
}

#[test]
fn sigterm_is_forwarded_to_the_group_and_the_lock_released_after_it() {
    forwarded_to_the_group_and_released_after_it(libc::SIGTERM, "TERM");
}

#[test]
fn sigint_is_forwarded_to_the_group_and_the_lock_released_after_it() {
    forwarded_to_the_group_and_released_after_it(libc::SIGINT, "INT");
}

#[test]
fn sighup_is_forwarded_to_the_group_and_the_lock_released_after_it() {
    forwarded_to_the_group_and_released_after_it(libc::SIGHUP, "HUP");
}

#[test]
fn background_job_started_by_the_command_is_signalled_too() {
    // The common `sh -c 'job & ...; wait'` shape: the job is in the command's group.
    let s = Scene::new("forward-bg");
    let dir = TempDir::new();
    let script = r#"echo $$ > "$1/command"; sleep 300 & echo $! > "$1/grandchild"; wait"#;
    let mut zklock = spawn_script(&s.path, &PATIENT, script, dir.path());
    let _group = KillGroupOnDrop::of(read_pid_file(&dir.path().join("command"), LONG));
    let grandchild = read_pid_file(&dir.path().join("grandchild"), LONG);
    let sent = Instant::now();
    signal(zklock.id() as i32, libc::SIGTERM);
    assert_eq!(exit_of(&mut zklock), 128 + libc::SIGTERM);
    // Not by --kill-after: the job got the TERM itself.
    let took = sent.elapsed();
    assert!(took < PROMPTLY, "exit {took:?} after TERM");
    assert!(!pid_alive(grandchild), "background job outlived zklock");
    s.assert_nothing_left();
}

#[test]
fn lock_is_held_until_every_process_of_the_group_exits() {
    let s = Scene::new("straggler");
    let dir = TempDir::new();
    let script = r#"(while [ ! -e "$1/go" ]; do sleep 0.02; done; touch "$1/straggler-done") &
echo $! > "$1/straggler"
echo $$ > "$1/command"
"#;
    let mut zklock = spawn_script(&s.path, &[], script, dir.path());
    let _group = KillGroupOnDrop::of(read_pid_file(&dir.path().join("straggler"), LONG));
    let command = read_pid_file(&dir.path().join("command"), LONG);
    let held = s.zk().children(&s.path);
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(wait_pid_gone(command, LONG), "command did not exit");

    // Nothing marks "zklock would have released by now", so watch for a while: the
    // straggler still runs, so the lock must stay held all along.
    assert_held_for(&mut zklock, &s, &held, Duration::from_millis(300));
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(exit_of(&mut zklock), 0);
    assert!(dir.path().join("straggler-done").exists());
    s.assert_nothing_left();
}

/// Watches for `how_long` that `zklock` runs on and the lock's nodes stay
/// `held`.
fn assert_held_for(zklock: &mut Child, s: &Scene, held: &[String], how_long: Duration) {
    let watching = Instant::now();
    while watching.elapsed() < how_long {
        assert!(zklock.try_wait().unwrap().is_none(), "zklock left early");
        assert_eq!(
            s.zk().children(&s.path),
            held,
            "node deleted while the group ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A straggler the command leaves behind (`&`), run by `python3 -c
/// STRAGGLER`, beating into `$1/beats` for 2 s: the lock stays held, and
/// zklock with it, while it runs, and no longer than that.
fn held_while_a_straggler_runs(tag: &str, straggler: &str) {
    let s = Scene::new(tag);
    let dir = TempDir::new();
    let script = format!("python3 -c '{straggler}' \"$1/beats\" &\nsleep 0.3");
    let mut zklock = spawn_script(&s.path, &[], &script, dir.path());
    let beats = dir.path().join("beats");
    wait_for_file(&beats, LONG);
    let held = s.zk().children(&s.path);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_held_for(&mut zklock, &s, &held, Duration::from_millis(1500));
    assert_eq!(exit_of(&mut zklock), 0);
    s.assert_nothing_left();
}

/// Its main thread gone (pthread_exit), a worker beating on: /proc shows the
/// process as a zombie, but it runs.
#[test]
fn a_process_whose_main_thread_exited_holds_the_lock_while_its_threads_run() {
    const STRAGGLER: &str = r#"
import ctypes, sys, threading, time
def beat():
    for _ in range(40):
        open(sys.argv[1], "a").write("beat\n")
        time.sleep(0.05)
threading.Thread(target=beat).start()
time.sleep(0.1)
ctypes.CDLL(None).pthread_exit(None)"#;
    held_while_a_straggler_runs("main-thread-gone", STRAGGLER);
}

/// A chain of forks, each parent exiting at once: every process lives a
/// moment, and the next comes back to zklock (a subreaper) as an orphan.
#[test]
fn a_chain_of_forks_holds_the_lock_while_it_runs() {
    const STRAGGLER: &str = r#"
import os, sys, time
end, beat = time.time() + 2, 0
while time.time() < end:
    if time.time() > beat:
        open(sys.argv[1], "a").write("beat\n")
        beat = time.time() + 0.05
    if os.fork() > 0:
        os._exit(0)"#;
    held_while_a_straggler_runs("fork-chain", STRAGGLER);
}

/// A lost lock stops the command before zklock says so: its stderr may be a
/// full pipe (here nobody reads it, and the command filled it), on which
/// the words would block. Broken, the lock passes on at once (docs/design.md,
/// "Operator commands"); the command's background beat must stop within
/// moments, not at the lease deadline the keeper would act at.
#[test]
fn a_lost_lock_stops_the_command_though_zklock_cannot_say_so() {
    let s = Scene::new("full-stderr");
    let dir = TempDir::new();
    let script = r#"while :; do echo beat >> "$1/beats"; sleep 0.05; done &
head -c 200000 /dev/zero >&2
wait"#;
    let mut cmd: Command = zklock_run(&shared_server().connect_string(), &s.path);
    cmd.args(["--", "sh", "-c", script, "sh"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut zklock = KillOnDrop(cmd.spawn().expect("spawn zklock"));
    let beats = dir.path().join("beats");
    assert!(wait_for_file(&beats, LONG), "no beat");
    let broken = crate::harness::zklock()
        .args(["break", "--yes", "-z", &shared_server().connect_string()])
        .arg(&s.path)
        .output()
        .expect("zklock break");
    assert_eq!(broken.status.code(), Some(0), "{broken:?}");
    std::thread::sleep(Duration::from_secs(1));
    let before = std::fs::read_to_string(&beats).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        std::fs::read_to_string(&beats).unwrap(),
        before,
        "the command beat on after the lock was lost"
    );
    drop(zklock.stderr.take());
    assert_eq!(exit_of(&mut zklock), 76);
    s.assert_nothing_left();
}

#[test]
fn signal_while_waiting_leaves_no_node_and_exits_128_plus_n() {
    let s = Scene::new("abort-wait");
    let holder = Gated::start(s.run());
    let held = s.zk().children(&s.path);
    let dir = TempDir::new();
    let ran = dir.path().join("waiter-ran");
    for (sig, name) in [(libc::SIGINT, "INT"), (libc::SIGTERM, "TERM")] {
        let mut cmd = s.run();
        cmd.arg("--").arg("touch").arg(&ran);
        let mut waiter = KillOnDrop(cmd.spawn().expect("spawn waiter"));
        wait_until(LONG, "waiter queued", || {
            s.zk().children(&s.path).len() == 2
        });

        let sent = Instant::now();
        signal(waiter.id() as i32, sig);
        let code = exit_of(&mut waiter);
        let took = sent.elapsed();
        assert_eq!(
            s.zk().children(&s.path),
            held,
            "waiter's node left after SIG{name}"
        );
        assert_eq!(code, 128 + sig, "SIG{name}");
        eprintln!("SIG{name} while waiting: exit after {took:?}");
        assert!(took < PROMPTLY, "SIG{name} while waiting took {took:?}");
    }
    assert!(!ran.exists(), "a waiter ran its command");
    assert!(holder.finish().success());
    s.assert_nothing_left();
}

/// Survives TERM: each TERM kills only the current `sleep`, and the trap counts it.
const OUTLASTS_TERM: &str = r#"trap 'echo TERM >> "$1/terms"' TERM
echo $$ > "$1/command"
while :; do sleep 0.05; done
"#;

fn terms_seen(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("terms"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn second_terminating_signal_kills_the_group_at_once() {
    let s = Scene::new("second-term");
    let dir = TempDir::new();
    let mut zklock = spawn_script(&s.path, &PATIENT, OUTLASTS_TERM, dir.path());
    let command = read_pid_file(&dir.path().join("command"), LONG);

    signal(zklock.id() as i32, libc::SIGTERM);
    // Only once the first was forwarded is the next one a second signal.
    wait_until(LONG, "command saw the first TERM", || {
        terms_seen(dir.path()) == 1
    });
    let sent = Instant::now();
    signal(zklock.id() as i32, libc::SIGTERM);
    assert_eq!(exit_of(&mut zklock), 128 + libc::SIGKILL);
    let took = sent.elapsed();
    assert!(took < PROMPTLY, "second TERM took {took:?} to kill");
    assert!(!pid_alive(command));
    s.assert_nothing_left();
}

#[test]
fn kill_after_escalates_one_term_to_sigkill() {
    let s = Scene::new("kill-after");
    let dir = TempDir::new();
    let mut zklock = spawn_script(
        &s.path,
        &["--kill-after", "0.5s"],
        OUTLASTS_TERM,
        dir.path(),
    );
    let command = read_pid_file(&dir.path().join("command"), LONG);

    let sent = Instant::now();
    signal(zklock.id() as i32, libc::SIGTERM);
    assert_eq!(exit_of(&mut zklock), 128 + libc::SIGKILL);
    let took = sent.elapsed();
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_secs(10),
        "killed {took:?} after TERM with --kill-after 0.5s"
    );
    assert_eq!(
        terms_seen(dir.path()),
        1,
        "the command should see TERM once"
    );
    assert!(!pid_alive(command));
    s.assert_nothing_left();
}

#[test]
fn kill_9_of_zklock_kills_the_command_and_frees_the_lock_within_a_session() {
    const SESSION: Duration = Duration::from_secs(4);
    let s = Scene::new("kill-9");
    let dir = TempDir::new();
    let mut holder = spawn_script(
        &s.path,
        &["--session-timeout", "4s", "--kill-after", "0.2s"],
        r#"echo $$ > "$1/command"; exec sleep 300"#,
        dir.path(),
    );
    let command = read_pid_file(&dir.path().join("command"), LONG);
    let mut waiter = Gated::spawn(s.run());
    wait_until(LONG, "waiter queued", || {
        s.zk().children(&s.path).len() == 2
    });

    let killed = Instant::now();
    signal(holder.id() as i32, libc::SIGKILL);
    assert!(
        wait_pid_gone(command, PROMPTLY),
        "the command outlived zklock"
    );
    holder.wait().unwrap();
    waiter.wait_started(LONG);
    let took = killed.elapsed();
    eprintln!("lock passed on {took:?} after kill -9 (session {SESSION:?})");
    // The server expires the session up to about a tick after the timeout; allow for a
    // busy machine on top.
    assert!(
        took < SESSION + PROMPTLY,
        "next waiter got the lock {took:?} after kill -9"
    );
    assert!(waiter.finish().success());
    s.assert_nothing_left();
}

/// zklock started with `sig` ignored, as `nohup` (HUP) or a shell without job control
/// running `zklock ... &` (INT, QUIT) start it: `sig` sent to zklock, and to the
/// command's group, changes nothing; the command finishes and zklock exits 0.
fn ignored_at_start_stays_ignored(sig: libc::c_int, name: &str) {
    let s = Scene::new(&format!("ignored-{name}"));
    let dir = TempDir::new();
    let script = r#"echo $$ > "$1/command"
while [ ! -e "$1/go" ]; do sleep 0.02; done
echo finished > "$1/done"
"#;
    let mut inner = s.run();
    inner.args(["--", "sh", "-c", script, "sh"]).arg(dir.path());
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("trap '' {name}; exec \"$@\""))
        .arg("sh")
        .arg(inner.get_program())
        .args(inner.get_args())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    for (key, value) in inner.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    let mut zklock = KillOnDrop(cmd.spawn().expect("spawn zklock"));
    let command = read_pid_file(&dir.path().join("command"), LONG);
    let group = KillGroupOnDrop::of(command);

    signal(zklock.id() as i32, sig);
    signal(-group.0, sig);
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_eq!(exit_of(&mut zklock), 0, "SIG{name} ignored at start");
    assert!(
        dir.path().join("done").exists(),
        "the command did not finish"
    );
    s.assert_nothing_left();
}

#[test]
fn sighup_ignored_at_start_as_by_nohup_stays_ignored() {
    ignored_at_start_stays_ignored(libc::SIGHUP, "HUP");
}

#[test]
fn sigint_ignored_at_start_as_for_a_background_job_stays_ignored() {
    ignored_at_start_stays_ignored(libc::SIGINT, "INT");
}

#[test]
fn verbose_says_when_it_waits_for_the_rest_of_the_group() {
    let s = Scene::new("verbose-straggler");
    let dir = TempDir::new();
    let script = r#"sleep 300 &
echo $! > "$1/straggler"
exit 3
"#;
    let mut cmd: Command = s.run();
    cmd.args(["-v", "--", "sh", "-c", script, "sh"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut zklock = KillOnDrop(cmd.spawn().expect("spawn zklock"));
    let straggler = read_pid_file(&dir.path().join("straggler"), LONG);
    let _group = KillGroupOnDrop::of(straggler);
    let stderr = zklock.stderr.take().expect("stderr piped");
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    let expected =
        "zklock: the command exited with status 3; waiting for the 1 other process of its group";
    let mut shown = Vec::new();
    while !shown.iter().any(|line| line == expected) {
        let line = seen
            .recv_timeout(LONG)
            .unwrap_or_else(|_| panic!("no {expected:?} in:\n{}", shown.join("\n")));
        shown.push(line);
    }
    signal(straggler, libc::SIGKILL);
    assert_eq!(exit_of(&mut zklock), 3);
    s.assert_nothing_left();
}

/// One field of /proc/PID/stat after the name: 0 is the state.
fn proc_state(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().next().map(str::to_owned)
}

#[test]
fn stopped_past_its_session_zklock_loses_the_lock_and_exits_76_on_resume() {
    use std::os::unix::process::CommandExt;
    let s = Scene::new("stopped-long");
    let dir = TempDir::new();
    let script = r#"echo $$ > "$1/command"
kill -STOP $$
touch "$1/after"
"#;
    let mut cmd: Command = s.run();
    cmd.args(["--session-timeout", "4s", "--kill-after", "0.2s"])
        .args(["--", "sh", "-c", script, "sh"])
        .arg(dir.path())
        .stdout(Stdio::null())
        // A job of its own, as a shell makes it: `fg` and `bg` continue the group.
        .process_group(0);
    let mut zklock = KillOnDrop(cmd.spawn().expect("spawn zklock"));
    let zklock_pid = zklock.id() as i32;
    let command = read_pid_file(&dir.path().join("command"), LONG);
    let _group = KillGroupOnDrop::of(command);
    wait_until(LONG, "zklock stopped with its command", || {
        proc_state(zklock_pid).as_deref() == Some("T")
    });
    wait_until(LONG, "the stopped holder's session expired", || {
        s.zk().tree(&s.path).is_empty()
    });
    signal(-zklock_pid, libc::SIGCONT);
    assert_eq!(exit_of(&mut zklock), 76);
    assert!(wait_pid_gone(command, LONG), "the command outlived zklock");
    assert!(
        !dir.path().join("after").exists(),
        "the command ran on after the lock was lost"
    );
}
