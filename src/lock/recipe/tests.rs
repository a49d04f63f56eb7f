use super::*;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn waiting<'a>(predecessor: &'a str, ahead: usize, first: &'a str) -> Standing<'a> {
    Standing::Waiting {
        predecessor,
        ahead,
        first,
    }
}

#[test]
fn prefixes_are_curator_compatible() {
    assert_eq!(node_prefix(LOCK, "u-1"), "_c_u-1-lock-");
    assert_eq!(node_prefix(READ, "u-1"), "_c_u-1-__READ__");
    assert_eq!(node_prefix(WRITE, "u-1"), "_c_u-1-__WRIT__");
    assert_eq!(node_prefix(LEASE, "u-1"), "_c_u-1-lease-");
    // What we create parses back as the contender it is.
    for (marker, class) in [
        (LOCK, Class::Writer),
        (READ, Class::Reader),
        (WRITE, Class::Writer),
    ] {
        let name = format!("{}0000000005", node_prefix(marker, "u-1"));
        let parsed = parse_contender(&name).map(|c| (c.class, c.seq));
        assert_eq!(parsed, Some((class, "0000000005")), "{name}");
    }
}

/// Read and write nodes of earlier zklock builds (no hyphen before the
/// marker) are still contenders, of the same class, in one queue with
/// Curator's names.
#[test]
fn reads_the_older_read_and_write_names() {
    for (name, class) in [
        ("_c_ab__WRIT__0000000007", Class::Writer),
        ("_c_ab__READ__0000000008", Class::Reader),
    ] {
        let parsed = parse_contender(name).map(|c| (c.class, c.seq));
        assert_eq!(parsed, Some((class, &name[name.len() - 10..])), "{name}");
    }
    let children = names(&[
        "_c_old__WRIT__0000000001",
        "_c_new-__READ__0000000002",
        "_c_old__READ__0000000003",
    ]);
    let (writer, reader) = ("_c_old__WRIT__0000000001", "_c_new-__READ__0000000002");
    assert_eq!(standing(&children, writer), Standing::Held);
    assert_eq!(standing(&children, reader), waiting(writer, 1, writer));
    assert_eq!(
        standing(&children, "_c_old__READ__0000000003"),
        waiting(writer, 1, writer)
    );
}

#[test]
fn parses_every_contender_kind() {
    for (name, class, seq) in [
        ("_c_ab-lock-0000000042", Class::Writer, "0000000042"),
        ("_c_ab-__WRIT__0000000007", Class::Writer, "0000000007"),
        ("_c_ab-__READ__0000000008", Class::Reader, "0000000008"),
        ("0f3a__lock__0000000009", Class::Writer, "0000000009"),
        ("0f3a__rlock__0000000010", Class::Reader, "0000000010"),
    ] {
        let parsed = parse_contender(name).map(|c| (c.class, c.seq));
        assert_eq!(parsed, Some((class, seq)), "{name}");
    }
}

#[test]
fn parses_wrapped_sequences() {
    let seq = |n| parse_contender(n).map(|c| c.seq);
    assert_eq!(seq("_c_ab-lock--2147483648"), Some("-2147483648"));
    assert_eq!(seq("_c_ab-lock--000000001"), Some("-000000001"));
    assert_eq!(seq("_c_ab-lock-2147483647"), Some("2147483647"));
    for junk in [
        "locks",
        "leases",
        "_c_ab-lock-",
        "_c_ab-lock-12",
        "_c_ab-lock-00000000001",
        "_c_ab-lock--1",
        "x-lock-000000000a",
    ] {
        assert_eq!(seq(junk), None, "{junk}");
    }
}

#[test]
fn exclusive_queue() {
    let (a, b, c) = (
        "_c_a-lock-0000000001",
        "_c_b-lock-0000000002",
        "_c_c-lock-0000000003",
    );
    let children = names(&[c, a, "unrelated", b]);
    assert_eq!(standing(&children, a), Standing::Held);
    // A waiter watches only its predecessor.
    assert_eq!(standing(&children, c), waiting(b, 2, a));
    assert_eq!(
        standing(&children, "_c_z-lock-0000000009"),
        Standing::Missing
    );
}

/// After the wrap, the nodes with negative sequence numbers go first, in
/// string order (`-2147483647` before `-2147483648`), as they do for a
/// Curator or kazoo client reading the same children: were we to order
/// by the numbers' wrap-around, two clients would each believe they hold.
#[test]
fn queue_order_across_the_wrap() {
    let (old, new, newer) = (
        "_c_old-lock-2147483647",
        "_c_new-lock--2147483648",
        "_c_newer-lock--2147483647",
    );
    let children = names(&[old, new, newer]);
    assert_eq!(standing(&children, newer), Standing::Held);
    assert_eq!(standing(&children, new), waiting(newer, 1, newer));
    assert_eq!(standing(&children, old), waiting(new, 2, newer));
}

#[test]
fn readers_share_until_a_writer() {
    let [r1, r2, w1, r3, x1] = [
        "_c_r1-__READ__0000000001",
        "_c_r2-__READ__0000000002",
        "_c_w1-__WRIT__0000000003",
        "_c_r3-__READ__0000000004",
        "_c_x1-lock-0000000005",
    ];
    let children = names(&[r1, r2, w1, r3, x1]);
    assert_eq!(standing(&children, r2), Standing::Held);
    // A writer waits for the nearest node of any kind.
    assert_eq!(standing(&children, w1), waiting(r2, 2, r1));
    // A reader after a queued writer waits for it: no writer starvation.
    // The lock is held by the queue's head, a reader, not by that writer.
    assert_eq!(standing(&children, r3), waiting(w1, 1, r1));
    // An exclusive node is a writer for everyone.
    assert_eq!(standing(&children, x1), waiting(r3, 4, r1));
}

/// Every queue of up to 6 readers and writers: the classes and the names.
fn every_queue() -> impl Iterator<Item = (Vec<Class>, Vec<String>)> {
    (0..=6u32).flat_map(|len| {
        (0..(1u32 << len)).map(move |bits| {
            let classes: Vec<Class> = (0..len)
                .map(|i| match bits >> i & 1 {
                    1 => Class::Writer,
                    _ => Class::Reader,
                })
                .collect();
            let children = classes
                .iter()
                .enumerate()
                .map(|(i, class)| {
                    let marker = if *class == Class::Writer { WRITE } else { READ };
                    format!("_c_{i}{marker}{:010}", i + 1)
                })
                .collect();
            (classes, children)
        })
    })
}

#[test]
fn holding_agrees_with_standing() {
    for (classes, children) in every_queue() {
        let expected: Vec<bool> = children
            .iter()
            .map(|me| standing(&children, me) == Standing::Held)
            .collect();
        assert_eq!(holding(&classes), expected, "{children:?}");
    }
}

#[test]
fn waiting_ahead_counts_only_non_holders() {
    let [w1, r1, r2, x1, r3] = [
        "_c_w1-__WRIT__0000000001",
        "_c_r1-__READ__0000000002",
        "_c_r2-__READ__0000000003",
        "_c_x1-lock-0000000004",
        "_c_r3-__READ__0000000005",
    ];
    // Listed out of order, with an unrelated child.
    let children = names(&[r3, "unrelated", x1, w1, r2, r1]);
    assert_eq!(waiting_ahead(&children, w1), 0);
    assert_eq!(waiting_ahead(&children, r1), 0);
    // Readers queued behind a writer are waiting, even for a reader.
    assert_eq!(waiting_ahead(&children, r2), 1);
    assert_eq!(waiting_ahead(&children, x1), 2);
    assert_eq!(waiting_ahead(&children, r3), 3);
    assert_eq!(waiting_ahead(&children, "_c_z-lock-0000000009"), 0);

    // Readers that hold together do not count; the writer after them does.
    let [r1, r2, w1, me] = [
        "_c_r1-__READ__0000000001",
        "0f3a__rlock__0000000002",
        "0f3a__lock__0000000003",
        "_c_me-lock-0000000004",
    ];
    assert_eq!(waiting_ahead(&names(&[r1, r2, w1, me]), me), 1);

    // Exclusive: everyone after the first waits; across the wrap, in
    // string order (see `queue_order_across_the_wrap`).
    let [a, b, c, d] = [
        "_c_a-lock-2147483646",
        "_c_b-lock-2147483647",
        "_c_c-lock--2147483648",
        "_c_d-lock--2147483647",
    ];
    let children = names(&[a, b, c, d]);
    assert_eq!(waiting_ahead(&children, d), 0);
    assert_eq!(waiting_ahead(&children, c), 0);
    assert_eq!(waiting_ahead(&children, a), 1);
    assert_eq!(waiting_ahead(&children, b), 2);
}

/// Whatever holds, the count is the contenders ahead minus the holders
/// among them, as `holding` decides them.
#[test]
fn waiting_ahead_agrees_with_holding() {
    for (classes, children) in every_queue() {
        let held = holding(&classes);
        for (i, me) in children.iter().enumerate() {
            let expected = held[..i].iter().filter(|h| !**h).count();
            assert_eq!(waiting_ahead(&children, me), expected, "{children:?} {me}");
        }
    }
}

#[test]
fn semaphore_directories_are_recognized() {
    assert!(looks_like_semaphore(&names(&["locks", "leases"])));
    assert!(!looks_like_semaphore(&names(&["_c_a-lock-0000000001"])));
    assert_eq!(decode_limit(&encode_limit(3)), Some(3));
    assert_eq!(decode_limit(b""), None);
    assert_eq!(decode_limit(b"x"), None);
}

#[test]
fn paths_are_taken_in_bytewise_order() {
    assert_eq!(
        acquisition_order(&["/b", "/a/z", "/a", "/B"]),
        ["/B", "/a", "/a/z", "/b"]
    );
}
