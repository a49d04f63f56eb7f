use super::*;

const SESSION: i64 = 0x1000_0abc_0000_0001;

fn env(path: &str, node: &str, session: &str) -> Inherited {
    Inherited {
        path: Some(path.into()),
        node: Some(node.into()),
        session: Some(session.into()),
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn claim(path: &str, node: &str) -> Claim {
    claims(&env(path, node, "0x10000abc00000001"), &[path])[0]
        .clone()
        .expect("claimed")
}

fn seen(owner: i64, children: &[&str]) -> Observed {
    Observed {
        stat: Some((owner, 4242)),
        children: names(children),
        limit: None,
    }
}

#[test]
fn claims_follow_the_lines_of_the_environment() {
    let inherited = env(
        "/b\n/a",
        "/b/_c_u2-lock-0000000003\n/a/_c_u1-__READ__0000000007",
        "0x10000abc00000001",
    );
    let got = claims(&inherited, &["/a", "/c", "/b"]);
    let a = got[0].as_ref().unwrap();
    assert_eq!((a.held, a.session), (Held::Reader, SESSION));
    assert_eq!(a.node, "/a/_c_u1-__READ__0000000007");
    assert_eq!(got[1], None);
    assert_eq!(got[2].as_ref().unwrap().held, Held::Writer);
    let lease = claim("/s", "/s/leases/_c_u-lease-0000000002");
    assert_eq!((lease.held, lease.dir()), (Held::Lease, "/s/leases"));
    // A session id with the top bit set comes back as the same i64.
    let high = claims(
        &env("/a", "/a/_c_u-lock-0000000001", "0x8000000000000001"),
        &["/a"],
    );
    assert_eq!(high[0].as_ref().unwrap().session, i64::MIN + 1);
}

#[test]
fn malformed_environments_claim_nothing() {
    let none = |inherited: Inherited| claims(&inherited, &["/a"])[0].is_none();
    assert!(none(Inherited::default()));
    assert!(none(env("/a", "/a/_c_u-lock-0000000001", "12")));
    assert!(none(env("/a", "/a/_c_u-lock-0000000001", "0xzz")));
    assert!(none(env("/a\n/b", "/a/_c_u-lock-0000000001", "0x1")));
    assert!(none(env("/a", "/a/_c_u-lock-0000000001", "0x1\n0x2")));
    // The node must be a lock node of that very path.
    assert!(none(env("/a", "/b/_c_u-lock-0000000001", "0x1")));
    assert!(none(env("/a", "/a/b/_c_u-lock-0000000001", "0x1")));
    assert!(none(env("/a", "/a/unrelated", "0x1")));
    assert!(none(env("/a", "/a/locks/_c_u-lock-0000000001", "0x1")));
    assert!(!none(env("/a", "/a/_c_u-lock-0000000001", "0x1\n0x1")));
}

#[test]
fn same_kind_or_shared_inside_exclusive_reenters() {
    let node = "/l/_c_u-lock-0000000001";
    let writer = claim("/l", node);
    let observed = seen(SESSION, &["_c_u-lock-0000000001", "_c_v-lock-0000000002"]);
    for kind in [LockKind::Exclusive, LockKind::Write, LockKind::Read] {
        assert_eq!(
            verdict(&writer, kind, &observed),
            Verdict::Reenter {
                node: node.into(),
                czxid: 4242
            },
            "{kind:?}"
        );
    }
    let reader = claim("/l", "/l/_c_u-__READ__0000000002");
    let readers = seen(
        SESSION,
        &["_c_r-__READ__0000000001", "_c_u-__READ__0000000002"],
    );
    assert!(matches!(
        verdict(&reader, LockKind::Read, &readers),
        Verdict::Reenter { .. }
    ));
}

#[test]
fn exclusive_inside_shared_is_an_upgrade() {
    let reader = claim("/l", "/l/_c_u-__READ__0000000002");
    let observed = seen(SESSION, &["_c_u-__READ__0000000002"]);
    for kind in [LockKind::Exclusive, LockKind::Write] {
        assert_eq!(verdict(&reader, kind, &observed), Verdict::Upgrade);
    }
    let refused = decide(&["/l"], LockKind::Write, &[Some(Verdict::Upgrade)]);
    assert!(matches!(refused, Decision::Refuse(m) if m.contains("/l for writing")));
}

#[test]
fn stale_claims_take_the_usual_path() {
    let writer = claim("/l", "/l/_c_u-lock-0000000005");
    // A stale shared claim is no upgrade: nobody holds it any more.
    let reader = claim("/l", "/l/_c_u-__READ__0000000002");
    let gone = Observed {
        stat: None,
        ..seen(SESSION, &[])
    };
    let stranger = seen(SESSION + 1, &["_c_u-lock-0000000005"]);
    // A node that waits does not hold (an environment no zklock gives).
    let waiting = seen(SESSION, &["_c_a-lock-0000000004", "_c_u-lock-0000000005"]);
    for (claim, observed) in [
        (&writer, &gone),
        (&writer, &stranger),
        (&writer, &waiting),
        (&reader, &gone),
    ] {
        let verdict = verdict(claim, LockKind::Exclusive, observed);
        assert_eq!(verdict, Verdict::Normal, "{observed:?}");
    }
}

#[test]
fn leases_reenter_a_semaphore_of_the_same_limit() {
    let lease = claim("/s", "/s/leases/_c_u-lease-0000000003");
    let mut observed = seen(
        SESSION,
        &[
            "_c_a-lease-0000000001",
            "_c_u-lease-0000000003",
            "_c_z-lease-0000000004",
        ],
    );
    observed.limit = Some(2);
    assert!(matches!(
        verdict(&lease, LockKind::Semaphore(2), &observed),
        Verdict::Reenter { .. }
    ));
    // Another limit, or a plain lock, on a semaphore: refused as usual.
    for kind in [LockKind::Semaphore(3), LockKind::Exclusive] {
        assert_eq!(verdict(&lease, kind, &observed), Verdict::Normal);
    }
    // Two leases older than ours under a limit of 2: ours waits.
    observed.children.push("_c_b-lease-0000000002".into());
    assert_eq!(
        verdict(&lease, LockKind::Semaphore(2), &observed),
        Verdict::Normal
    );
    // A semaphore on a plain lock's path: refused as usual.
    let writer = claim("/s", "/s/_c_u-lock-0000000001");
    let observed = seen(SESSION, &["_c_u-lock-0000000001"]);
    let verdict = verdict(&writer, LockKind::Semaphore(2), &observed);
    assert_eq!(verdict, Verdict::Normal);
}

#[test]
fn all_paths_or_none() {
    let reenter = |node: &str| {
        Some(Verdict::Reenter {
            node: node.into(),
            czxid: 7,
        })
    };
    let kind = LockKind::Exclusive;
    assert_eq!(decide(&["/a"], kind, &[None]), Decision::Normal);
    assert_eq!(
        decide(&["/a", "/b"], kind, &[Some(Verdict::Normal), None]),
        Decision::Normal
    );
    assert_eq!(
        decide(&["/b", "/a"], kind, &[reenter("/b/n"), reenter("/a/n")]),
        Decision::Reenter(vec![("/b/n".into(), 7), ("/a/n".into(), 7)])
    );
    let partial = decide(&["/a", "/b"], kind, &[reenter("/a/n"), None]);
    assert!(
        matches!(&partial, Decision::Refuse(m) if m.starts_with("/a is held by the enclosing zklock run but /b is not")),
        "{partial:?}"
    );
    let stale = decide(
        &["/a", "/b"],
        kind,
        &[Some(Verdict::Normal), reenter("/b/n")],
    );
    assert!(matches!(stale, Decision::Refuse(_)));
}
