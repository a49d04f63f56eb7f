//! The "not acquired" message names the holder from its node's data, which any
//! client can write: it must stay one line, with no control characters.

use std::process::Stdio;

use crate::harness::Scene;

#[test]
fn conflict_message_is_one_printable_line() {
    let s = Scene::new("holder-message");
    let path = &s.path;
    s.zk().create_all(path);
    // What a zklock running `sh -c 'a\nb'` writes, plus a terminal escape.
    let data = br#"{"pid":7,"host":"h","command":"sh -c echo one\necho two \u001b[2J"}"#;
    let (node, _) = s
        .zk()
        .create_ephemeral_sequential(&format!("{path}/_c_fake-lock-"), data);
    let output = s
        .run()
        .args(["-n", "--", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("run zklock");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("pid 7"), "names the holder: {stderr:?}");
    let body = stderr.strip_suffix('\n').unwrap_or(&stderr);
    assert!(
        !body.chars().any(char::is_control),
        "one printable line expected: {stderr:?}"
    );
    s.zk().delete(&node);
    s.zk().delete(path);
}
