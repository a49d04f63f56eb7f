use super::*;

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn anchors_skip_the_other_victims() {
    let children = names(&[
        "_c_me-lock-0000000005",
        "_c_a-lock-0000000001",
        "x__lock__0000000002",
        "_c_b-lock-0000000003",
        "unrelated",
        "_c_c-lock-0000000004",
    ]);
    let ahead = ahead_of(&children, "_c_me-lock-0000000005");
    let order: Vec<&str> = ahead.iter().map(|c| c.name).collect();
    assert_eq!(
        order,
        [
            "_c_a-lock-0000000001",
            "x__lock__0000000002",
            "_c_b-lock-0000000003",
            "_c_c-lock-0000000004"
        ]
    );
    let pending = names(&["_c_b-lock-0000000003", "_c_c-lock-0000000004"]);
    assert_eq!(
        anchor_of(&ahead, &pending, "_c_b-lock-0000000003"),
        "x__lock__0000000002"
    );
    assert_eq!(
        anchor_of(&ahead, &pending, "_c_c-lock-0000000004"),
        "x__lock__0000000002"
    );
    let pending = names(&["_c_c-lock-0000000004"]);
    assert_eq!(
        anchor_of(&ahead, &pending, "_c_c-lock-0000000004"),
        "_c_b-lock-0000000003"
    );
    // Our node gone: nothing is ahead of it.
    assert!(ahead_of(&children, "_c_gone-lock-0000000006").is_empty());
}

#[test]
fn only_supersede_data_has_an_age() {
    let age = |data: &[u8]| HolderData::parse(data).and_then(|d| d.supersede_age(9));
    let mut data = HolderData::ours(&["./deploy.sh".into()], None);
    assert_eq!(age(&data.to_bytes()), None);
    data.supersede = Some(true);
    // Its first node: created in transaction 9.
    assert_eq!(age(&data.to_bytes()), Some(9));
    assert_eq!(age(&data.acquired(7).to_bytes()), Some(9));
    // Queued again: its first node's czxid.
    data.first_czxid = Some(4);
    assert_eq!(age(&data.to_bytes()), Some(4));
    assert_eq!(age(&data.acquired(7).to_bytes()), Some(4));
    assert_eq!(age(br#"{"supersede":true}"#), None);
    assert_eq!(age(b"10.0.0.7"), None);
}

fn run(label: &str, age: i64) -> Run {
    let data = HolderData {
        label: Some(label.into()),
        supersede: Some(true),
        ..HolderData::ours(&[], None)
    };
    Run {
        name: format!("_c_{label}-lock-0000000001"),
        age,
        seen: Seen {
            data: data.to_bytes(),
            ctime: 0,
            mtime: 0,
        },
    }
}

#[test]
fn the_newest_by_age_is_named_never_an_older_one() {
    let runs = [run("a", 3), run("b", 8), run("c", 5)];
    let named = |runs: &[Run], trace: Option<&Trace>, age| {
        newer_than(runs, trace, age).and_then(|by| HolderData::parse(&by.data)?.label)
    };
    assert_eq!(named(&runs, None, 8), None);
    assert_eq!(named(&runs, None, 9), None);
    assert_eq!(named(&runs, None, 4).as_deref(), Some("b"));
    assert_eq!(named(&[], None, 0), None);
    let recorded = |label: &str, age| {
        let stat = crate::lock::directory::tests::node("x", 1, 0, "").stat;
        let mut data = HolderData::parse(&run(label, age).seen.data).unwrap();
        data.first_czxid = Some(age);
        Trace::from_read(Ok((data.to_bytes(), stat)))
    };
    let trace = recorded("t", 10);
    assert_eq!(named(&runs, trace.as_ref(), 4).as_deref(), Some("t"));
    assert_eq!(named(&runs, trace.as_ref(), 10), None);
    // The same run queued and recorded: its node is named.
    let trace = recorded("t", 8);
    assert_eq!(named(&runs, trace.as_ref(), 4).as_deref(), Some("b"));
    assert_eq!(named(&[], trace.as_ref(), 4).as_deref(), Some("t"));
}
