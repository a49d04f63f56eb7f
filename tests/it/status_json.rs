//! The public JSON of `zklock status --json` (docs/design.md, "Operator
//! commands"), as a golden document: a lock with a zklock holder, a zklock
//! waiter, a Curator waiter and a run record, all with fixed data, read by
//! the binary from a real server. The fields only the moment decides
//! (session ids, fencing tokens, times, ages) are normalised; everything
//! else must match `golden/status.json` byte for byte, so that no field
//! appears, vanishes or is renamed unnoticed. Regenerate after a deliberate
//! change with `ZKLOCK_REGENERATE=1 .ci/test --test it status_json`.

use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::harness::{Inspector, shared_server, unique_path, zklock};

const GOLDEN: &str = "tests/it/golden/status.json";

/// The holder's node data, as a zklock that runs its command writes it.
const HOLDER: &str = r#"{"host":"web1","pid":4242,"zklock_pid":4240,"user":"deploy","label":"nightly backup","version":"0.9.0","acquired":true,"ci":{"provider":"gitlab","url":"https://gitlab.example/g/p/-/jobs/7"}}"#;

/// A `--supersede` waiter's, before it holds.
const WAITER: &str = r#"{"host":"web2","zklock_pid":77,"user":"ci","command":"./deploy.sh --env prod","version":"0.9.0","supersede":true,"first_czxid":12}"#;

/// The `--once-per` run record beside the lock.
fn record() -> Value {
    let run = |start: &str, exit: u8| {
        json!({
            "start_ms": 1_795_341_600_000_i64,
            "start": start,
            "end_ms": 1_795_341_782_500_i64,
            "end": "2026-11-22T10:03:02.500Z",
            "host": "web1",
            "user": "deploy",
            "exit_status": exit,
            "fencing_token": 9,
        })
    };
    json!({
        "last_run": run("2026-11-22T10:00:00.000Z", 3),
        "last_success": run("2026-11-22T10:00:00.000Z", 0),
    })
}

/// Replaces what only the moment decides, after checking its form.
fn normalise(doc: &mut Value, path: &str) {
    let lock = &mut doc["locks"][0];
    assert_eq!(lock["path"], path);
    lock["path"] = json!("PATH");
    for list in ["holders", "waiting"] {
        for entry in lock[list].as_array_mut().expect(list) {
            let session = entry["session_id"].as_str().expect("session_id");
            assert!(session.starts_with("0x"), "{session}");
            entry["session_id"] = json!("SESSION");
            assert!(entry["fencing_token"].as_i64().expect("token") > 0);
            entry["fencing_token"] = json!("TOKEN");
            let since = entry["since"].as_str().expect("since");
            humantime::parse_rfc3339(since).expect("RFC 3339");
            entry["since"] = json!("SINCE");
            for age in ["held_seconds", "waited_seconds"] {
                if let Some(seconds) = entry.get(age) {
                    assert!(seconds.as_f64().expect(age) >= 0.0, "{entry}");
                    entry[age] = json!("SECONDS");
                }
            }
        }
    }
}

#[test]
fn status_json_matches_the_golden_document() {
    let connect = shared_server().connect_string();
    let zk = Inspector::connect(&connect);
    let path = unique_path("status-json");
    zk.create_all(&path);
    zk.create(
        &format!("{path}/zklock.record"),
        record().to_string().as_bytes(),
        true,
    );
    let dir = format!("{path}/_c_0f1e2d3c-4b5a-4978-8796-a5b4c3d2e1f0-lock-");
    zk.create_ephemeral_sequential(&dir, HOLDER.as_bytes());
    let dir = format!("{path}/_c_1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d-lock-");
    zk.create_ephemeral_sequential(&dir, WAITER.as_bytes());
    let dir = format!("{path}/_c_3c4f1a52-6a4e-4a5e-9f55-0c7a3c1c1a11-lock-");
    zk.create_ephemeral_sequential(&dir, b"10.0.0.7");

    let output = zklock()
        .args(["status", "-z", &connect, "--json", &path])
        .stdin(Stdio::null())
        .output()
        .expect("run zklock");
    // Held: 1 (docs/design.md, "Exit status").
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let mut doc: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {output:?}"));
    normalise(&mut doc, &path);
    let text = format!("{}\n", serde_json::to_string_pretty(&doc).unwrap());
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("ZKLOCK_REGENERATE").is_some() {
        std::fs::write(&golden, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_default();
    assert!(
        text == expected,
        "status --json differs from {GOLDEN}:\n{text}\n(regenerate with ZKLOCK_REGENERATE=1 after a deliberate change)"
    );
    zk.close();
}
