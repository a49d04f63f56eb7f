//! Shared (read) and write locks: readers overlap, a writer overlaps nothing, a
//! reader queued behind a writer waits for it, and `-s`, `-x` and `--write` mix.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{
    EntryKind, Holder, Inspector, KillOnDrop, LockLog, Scene, TempDir, assert_no_lock_nodes,
    run_bounded, shared_server, unique_path, wait_for_contenders, wait_for_exit, wait_until,
    zklock_run,
};

const LONG: Duration = Duration::from_secs(30);

/// A `sh -c` body that appends `start KIND TOKEN PID` and `end KIND TOKEN PID` around
/// `body`. [`crate::harness::LockLog`] has no room for the kind, which the
/// readers/writers oracle needs; appends are atomic, so file order is event order.
fn kind_body(log: &Path, kind: char, body: &str) -> String {
    let line = |event: &str| {
        format!(
            "echo \"{event} {kind} $ZKLOCK_FENCING_TOKEN $$\" >> '{}'",
            log.display()
        )
    };
    format!("{}\n{body}\n{}\n", line("start"), line("end"))
}

#[derive(Debug)]
struct Event {
    start: bool,
    writer: bool,
    token: i64,
    pid: u32,
}

fn events(log: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(log).expect("read log");
    text.lines()
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            let [event, kind, token, pid] = words[..] else {
                panic!("malformed line {line:?} in:\n{text}");
            };
            Event {
                start: event == "start",
                writer: kind == "W",
                token: token.parse().expect("token"),
                pid: pid.parse().expect("pid"),
            }
        })
        .collect()
}

/// Checks the readers/writers contract over a whole log and returns the most readers
/// that ever held at once: nobody starts while a writer holds, a writer starts only
/// when nobody holds, and a writer's token is above every earlier holder's and below
/// every later one's (readers' tokens among themselves need no order).
fn check_readers_writers(log: &Path) -> usize {
    let events = events(log);
    let dump = || std::fs::read_to_string(log).unwrap();
    let mut open: Vec<&Event> = Vec::new();
    let mut max_readers = 0;
    for (i, e) in events.iter().enumerate() {
        if !e.start {
            let at = open.iter().position(|o| o.pid == e.pid);
            open.remove(at.unwrap_or_else(|| panic!("end without start:\n{}", dump())));
            continue;
        }
        assert!(
            !open.iter().any(|o| o.writer),
            "a start while a writer holds (line {}):\n{}",
            i + 1,
            dump()
        );
        assert!(
            !e.writer || open.is_empty(),
            "a writer starts while others hold (line {}):\n{}",
            i + 1,
            dump()
        );
        open.push(e);
        max_readers = max_readers.max(open.len());
    }
    assert!(open.is_empty(), "holders never ended:\n{}", dump());
    let starts: Vec<&Event> = events.iter().filter(|e| e.start).collect();
    for (k, w) in starts.iter().enumerate().filter(|(_, e)| e.writer) {
        assert!(
            starts[..k].iter().all(|o| o.token < w.token)
                && starts[k + 1..].iter().all(|o| o.token > w.token),
            "writer token {} out of order:\n{}",
            w.token,
            dump()
        );
    }
    max_readers
}

#[test]
fn readers_overlap_writers_overlap_nothing() {
    let s = Scene::new("rw-mix");
    let path = &s.path;
    let connect = &s.connect;
    let dir = TempDir::new();
    let log = dir.path().join("rw.log");
    std::fs::write(&log, "").unwrap();

    // One overlap for certain: reader A holds until reader B, which must not wait,
    // has come and gone.
    let go = dir.path().join("go");
    let wait_go = format!("while [ ! -e '{}' ]; do sleep 0.02; done", go.display());
    let mut a = KillOnDrop(
        s.run()
            .args(["-s", "--", "sh", "-c", &kind_body(&log, 'R', &wait_go)])
            .spawn()
            .expect("spawn reader A"),
    );
    wait_until(LONG, "reader A starts", || {
        events(&log).iter().any(|e| e.start)
    });
    let b = s
        .run()
        .args(["-s", "-n", "--", "sh", "-c", &kind_body(&log, 'R', "true")])
        .status()
        .expect("run reader B");
    assert_eq!(b.code(), Some(0), "reader B must share with reader A");
    std::fs::write(&go, "").unwrap();
    let status = wait_for_exit(&mut a, LONG).expect("reader A exits");
    assert_eq!(status.code(), Some(0));

    // 4 readers and 2 writers (one -x, one --write), 10 runs each, all at once.
    let started = Instant::now();
    let loops: Vec<(&[&str], char, &str)> = vec![
        (&["-s"], 'R', "sleep 0.2"),
        (&["-s"], 'R', "sleep 0.2"),
        (&["-s"], 'R', "sleep 0.2"),
        (&["-s"], 'R', "sleep 0.2"),
        (&["-x"], 'W', "sleep 0.05"),
        (&["--write"], 'W', "sleep 0.05"),
    ];
    std::thread::scope(|scope| {
        for (args, kind, body) in &loops {
            let (connect, path, log) = (connect, path, &log);
            scope.spawn(move || {
                for run in 0..10 {
                    // A bound instead of a hang if the queue ever deadlocks.
                    let status = zklock_run(connect, path)
                        .args(*args)
                        .args(["-w", "60s", "--", "sh", "-c"])
                        .arg(kind_body(log, *kind, body))
                        .status()
                        .expect("run zklock");
                    assert_eq!(status.code(), Some(0), "{args:?} run {run}");
                }
            });
        }
    });
    let loop_log = std::fs::read_to_string(&log).unwrap();
    eprintln!("60 read/write runs took {:?}", started.elapsed());

    let max_readers = check_readers_writers(&log);
    eprintln!("at most {max_readers} readers at once");
    assert!(max_readers >= 2, "readers never overlapped:\n{loop_log}");
    let starts = events(&log).into_iter().filter(|e| e.start).count();
    assert_eq!(starts, 62, "{loop_log}");

    let zk = Inspector::connect(connect);
    assert_no_lock_nodes(&zk, path);
}

/// A reader that gives up behind a writer, which waits behind a reader that
/// holds the lock, names that reader as the holder, not the writer.
#[test]
fn a_reader_giving_up_names_the_reader_that_holds() {
    let s = Scene::new("rw-give-up");
    let mut reader = Holder::start(s.run().args(["-s", "--label", "reading-holder"]), &s.log);
    let mut writer = KillOnDrop(
        s.run()
            .args(["--label", "waiting-writer", "--", "true"])
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn zklock"),
    );
    wait_for_contenders(s.zk(), &s.path, "-lock-", 1);
    let out = run_bounded(s.run().args(["-s", "-n", "--", "true"]), LONG);
    out.assert_code(75);
    let line = out.one_error_line();
    assert!(line.contains("reading-holder"), "{line}");
    assert!(!line.contains("waiting-writer"), "{line}");
    reader.finish();
    let status = wait_for_exit(&mut writer, LONG).expect("the writer ends");
    assert_eq!(status.code(), Some(0));
    s.assert_no_lock_nodes();
}

#[test]
fn reader_queued_between_writers_keeps_its_turn() {
    let s = Scene::new("rw-queue");

    let mut w1 = s.hold();
    let w1_token = w1.tokens()[0];
    let spawn = |args: &[&str]| {
        KillOnDrop(
            s.run()
                .args(args)
                .args(["--", "sh", "-c"])
                .arg(s.log.shell_body("true"))
                .spawn()
                .expect("spawn zklock"),
        )
    };
    // Each joins the queue only once the one before it is in it, so the queue is
    // exactly W1 (held), R, W2.
    let mut r = spawn(&["-s"]);
    let r_node = wait_for_contenders(s.zk(), &s.path, "__READ__", 1).remove(0);
    let mut w2 = spawn(&[]);
    let w2_node = wait_for_contenders(s.zk(), &s.path, "-lock-", 2)
        .into_iter()
        .find(|n| *n != w1.node())
        .unwrap();
    let czxid = |node: &str| s.zk().stat(node).expect("queued node").czxid;
    let (r_token, w2_token) = (czxid(&r_node), czxid(&w2_node));
    assert_eq!(s.log.starts(), 1, "only W1 runs:\n{}", s.log.contents());

    w1.finish();
    for (name, child) in [("R", &mut r), ("W2", &mut w2)] {
        let status = wait_for_exit(child, LONG).unwrap_or_else(|| panic!("{name} stuck"));
        assert_eq!(status.code(), Some(0), "{name}");
    }

    s.log.assert_exclusive();
    let starts: Vec<i64> = s
        .log
        .entries()
        .iter()
        .filter(|e| e.kind == EntryKind::Start)
        .map(|e| e.token.expect("token"))
        .collect();
    assert_eq!(
        starts,
        [w1_token, r_token, w2_token],
        "W1, R, W2 in that order:\n{}",
        s.log.contents()
    );
    s.assert_no_lock_nodes();
}

#[test]
fn shared_exclusive_and_write_mix() {
    let server = shared_server();
    let connect = server.connect_string();
    let zk = Inspector::connect(&connect);
    let kinds: [&[&str]; 3] = [&["-s"], &["-x"], &["--write"]];
    for held in kinds {
        let path = unique_path("rw-matrix");
        let log = LockLog::new();
        let mut holder = Holder::start(zklock_run(&connect, &path).args(held), &log);
        for other in kinds {
            let output = zklock_run(&connect, &path)
                .args(other)
                .args(["-n", "--", "true"])
                .stdin(Stdio::null())
                .output()
                .expect("run zklock");
            let expected = if held == ["-s"] && other == ["-s"] {
                0
            } else {
                75
            };
            assert_eq!(
                output.status.code(),
                Some(expected),
                "{other:?} while {held:?} holds: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        holder.finish();
        assert_no_lock_nodes(&zk, &path);
    }
}
