use super::*;

/// 2026-11-22T10:00:00Z.
const T0: i64 = 1_795_341_600_000;

fn at(millis: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(millis as u64)
}

fn queue(data: &str) -> Queue {
    Queue {
        path: "/l".into(),
        ahead: 2,
        first: "/l/_c_x-lock-0000000007".into(),
        holder: Some(Seen {
            data: data.as_bytes().to_vec(),
            ctime: T0,
            mtime: T0 + 60_000,
        }),
        pool: None,
    }
}

#[test]
fn holders() {
    let running = r#"{"host":"web1","pid":4242,"zklock_pid":4240,"acquired":true}"#;
    // Queued, not yet running its command: no time held.
    let queued = r#"{"host":"web\u001b1","zklock_pid":4240}"#;
    for (data, now, expected) in [
        (running, 15, "2 ahead, held by pid 4242 on web1 for 14m"),
        // Clocks differ: never a negative time.
        (running, 0, "2 ahead, held by pid 4242 on web1 for 0s"),
        (queued, 15, r"2 ahead, held by zklock 4240 on web\u{1b}1"),
        // Its --label, what its holder chose to be known by.
        (
            r#"{"host":"web1","pid":4242,"label":"nightly\nbackup","acquired":true}"#,
            15,
            r"2 ahead, held by pid 4242 on web1 for 14m: nightly\nbackup",
        ),
        // Another client's data: as text.
        ("10.0.0.7", 15, "2 ahead, held by data \"10.0.0.7\""),
    ] {
        assert_eq!(summary(&queue(data), at(T0 + now * 60_000)), expected);
    }
    // None read: the node's name.
    let mut q = queue("");
    q.holder = None;
    assert_eq!(summary(&q, at(T0)), "2 ahead, held by _c_x-lock-0000000007");
    q.pool = Some(3);
    assert_eq!(summary(&q, at(T0)), "all 3 permits are taken");
}
