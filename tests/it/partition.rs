//! Issue 37: on ZooKeeper's production ticks (tickTime 2000, syncLimit 5) a
//! holder's command stops before a waiter on another member can start, when
//! the holder's member loses the leader (and the other follower), when the
//! holder is cut off from its member, and when its member is the leader and
//! is isolated from the others. Each member and client in a network
//! namespace of its own (root needed), cut with iptables; sessions of 4 s
//! and 8 s side by side under the same fault. The three faults run at once,
//! each on its own ensemble. Each command writes its start, a heartbeat every
//! 20 ms and its end (bash's $EPOCHREALTIME); the margin reported is how long
//! before the waiter's start the holder's command was stopped. Beside them, a
//! script holds a lock with `zklock hold` (4 s sessions) and runs the same
//! recording as a step: it too stops before its waiter starts (issue 36).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use crate::harness::{
    Host, KillOnDrop, NetEnsemble, ServerOptions, TempDir, interval, recording, stamped_start,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// The holder's member (a follower) cut from the leader and the other
    /// follower.
    MemberCut,
    /// The holder cut from its member (a follower).
    HolderCut,
    /// The holder's member is the leader, cut from both followers.
    LeaderIsolated,
}

const SESSIONS: [u64; 2] = [4, 8];

struct Zklock {
    child: KillOnDrop,
    stderr: PathBuf,
}

/// Where a `zklock run` runs and what it runs.
struct Run<'a> {
    host: &'a Host,
    member: usize,
    session: u64,
    path: &'a str,
    script: &'a str,
    name: &'a str,
}

fn spawn(ensemble: &NetEnsemble, run: Run<'_>, dir: &Path) -> Zklock {
    let stderr = dir.join(format!("{}.stderr", run.name));
    let child = ensemble
        .net
        .zklock(run.host)
        .args(["run", "-v", "-z", &ensemble.connect_string_of(run.member)])
        .args(["--session-timeout", &format!("{}s", run.session), run.path])
        .args(["--", "bash", "-c", run.script])
        .stdout(Stdio::null())
        .stderr(fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("spawn zklock");
    Zklock {
        child: KillOnDrop(child),
        stderr,
    }
}

fn epoch(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// One fault on its own ensemble; the lines to report.
fn scenario(fault: Fault) -> Vec<String> {
    let mut ensemble = NetEnsemble::start(3, &ServerOptions::production());
    let leader = ensemble.wait_quorum();
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let (held_at, waited_at) = match fault {
        Fault::LeaderIsolated => (leader, followers[0]),
        _ => (followers[0], followers[1]),
    };
    let dir = TempDir::new();
    let log = dir.path().join("intervals.log");
    fs::write(&log, "").unwrap();
    let mut holders = Vec::new();
    let mut waiters = Vec::new();
    let mut hosts = Vec::new();
    for t in SESSIONS {
        let path = format!("/p37/{fault:?}-{t}");
        let holder_host = ensemble.client_host(&format!("h{t}"));
        let waiter_host = ensemble.client_host(&format!("w{t}"));
        let name = format!("H{t}");
        let script = recording(&log, &name);
        holders.push(spawn(
            &ensemble,
            Run {
                host: &holder_host,
                member: held_at,
                session: t,
                path: &path,
                script: &script,
                name: &name,
            },
            dir.path(),
        ));
        let started = Instant::now();
        while interval(&fs::read_to_string(&log).unwrap(), &name).is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{name} never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let name = format!("W{t}");
        let script = stamped_start(&log, &name);
        waiters.push(spawn(
            &ensemble,
            Run {
                host: &waiter_host,
                member: waited_at,
                session: t,
                path: &path,
                script: &script,
                name: &name,
            },
            dir.path(),
        ));
        hosts.push(holder_host);
    }
    // A hold's step (issue 36): a script holds the lock on the holders'
    // member, with 4 s sessions, and runs the recording as a child process;
    // a waiter queues behind it on the other member.
    let hold_path = format!("/p37/{fault:?}-hold");
    let hold_host = ensemble.client_host("hh");
    let runtime = dir.path().join("run");
    fs::create_dir_all(&runtime).unwrap();
    let hold_stderr = dir.path().join("HH.stderr");
    let hold_script = format!(
        r#"eval "$("$ZKLOCK" hold -z {} --session-timeout 4s {hold_path})" || exit
        bash -c "$STEP""#,
        ensemble.connect_string_of(held_at)
    );
    let hold = ensemble
        .net
        .command(&hold_host, "bash")
        .args(["-c", &hold_script])
        .env("ZKLOCK", env!("CARGO_BIN_EXE_zklock"))
        .env("STEP", recording(&log, "HH"))
        .env("XDG_RUNTIME_DIR", &runtime)
        .stdout(Stdio::null())
        .stderr(fs::File::create(&hold_stderr).expect("stderr file"))
        .spawn()
        .expect("spawn the hold's script");
    let _hold = KillOnDrop(hold);
    let started = Instant::now();
    while interval(&fs::read_to_string(&log).unwrap(), "HH").is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the hold's step never started: {}",
            fs::read_to_string(&hold_stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let hold_waiter_host = ensemble.client_host("hw");
    waiters.push(spawn(
        &ensemble,
        Run {
            host: &hold_waiter_host,
            member: waited_at,
            session: 4,
            path: &hold_path,
            script: &stamped_start(&log, "WH"),
            name: "WH",
        },
        dir.path(),
    ));
    hosts.push(hold_host);
    // The waiters queue behind the holders.
    std::thread::sleep(Duration::from_secs(2));
    let cut = SystemTime::now();
    let net = &ensemble.net;
    let (held, waited) = (ensemble.host(held_at), ensemble.host(waited_at));
    match fault {
        Fault::MemberCut => {
            for other in (0..3).filter(|&i| i != held_at) {
                net.cut(held, ensemble.host(other));
            }
        }
        Fault::HolderCut => {
            for host in &hosts {
                net.cut(host, held);
            }
        }
        Fault::LeaderIsolated => {
            net.cut(held, waited);
            net.cut(held, ensemble.host(followers[1]));
        }
    }
    // Every waiter starts once the holder's session expired at the leader:
    // with the leader isolated, once the followers have given it up
    // (syncLimit ticks), elected one of them (each round waits on the
    // unreachable member's connection timeout) and expired the session.
    // Under CI's load that once took 57 s for a 4 s session; the bound is
    // for liveness only, the assertions below are about the intervals.
    let deadline = Instant::now() + Duration::from_secs(120);
    let waited_all = || {
        let text = fs::read_to_string(&log).unwrap();
        SESSIONS
            .iter()
            .all(|t| interval(&text, &format!("W{t}")).is_some())
            && interval(&text, "WH").is_some()
    };
    while !waited_all() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut exits = Vec::new();
    for holder in &mut holders {
        let until = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = holder.child.try_wait().unwrap() {
                break Some(status);
            }
            if Instant::now() >= until {
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        exits.push(status.and_then(|s| s.code()));
    }
    let text = fs::read_to_string(&log).unwrap();
    let stderr = |z: &Zklock| fs::read_to_string(&z.stderr).unwrap_or_default();
    let context = || {
        let runs: Vec<String> = (holders.iter().chain(&waiters))
            .map(|z| format!("{}:\n{}", z.stderr.display(), stderr(z)))
            .collect();
        format!(
            "{fault:?}, cut at {:.3}\n{text}\n{}",
            epoch(cut),
            runs.join("\n")
        )
    };
    let mut report = Vec::new();
    for (i, t) in SESSIONS.iter().enumerate() {
        let (h_start, h_end) = interval(&text, &format!("H{t}")).expect("the holder ran");
        let Some((w_start, _)) = interval(&text, &format!("W{t}")) else {
            panic!("W{t} never started\n{}", context());
        };
        assert!(
            h_end < w_start,
            "{fault:?} T={t}s: the holder ran until {h_end:.3}, the waiter started at {w_start:.3}\n{}",
            context()
        );
        assert!(h_start < epoch(cut));
        assert_eq!(
            exits[i],
            Some(76),
            "{fault:?} T={t}s: the holder's exit\n{}",
            context()
        );
        report.push(format!(
            "{fault:?} T={t}s: holder stopped {:.2}s after the cut, waiter started {:.2}s after it: margin {:.2}s",
            h_end - epoch(cut),
            w_start - epoch(cut),
            w_start - h_end
        ));
    }
    let (_, hold_end) = interval(&text, "HH").expect("the hold's step ran");
    let Some((hold_waiter, _)) = interval(&text, "WH") else {
        panic!("WH never started\n{}", context());
    };
    assert!(
        hold_end < hold_waiter,
        "{fault:?} hold, T=4s: the step ran until {hold_end:.3}, the waiter started at {hold_waiter:.3}\n{}\n{}",
        fs::read_to_string(&hold_stderr).unwrap_or_default(),
        context()
    );
    report.push(format!(
        "{fault:?} hold T=4s: step stopped {:.2}s after the cut, waiter started {:.2}s after it: margin {:.2}s",
        hold_end - epoch(cut),
        hold_waiter - epoch(cut),
        hold_waiter - hold_end
    ));
    report
}

#[test]
fn a_partitioned_holder_stops_before_the_next_one_starts() {
    let faults = [Fault::MemberCut, Fault::HolderCut, Fault::LeaderIsolated];
    let reports: Vec<Vec<String>> = std::thread::scope(|scope| {
        let runs: Vec<_> = (faults.iter())
            .map(|&fault| scope.spawn(move || scenario(fault)))
            .collect();
        (runs.into_iter())
            .map(|run| {
                run.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    for line in reports.concat() {
        eprintln!("{line}");
    }
}
