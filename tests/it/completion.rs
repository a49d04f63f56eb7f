//! The bash completion `zklock completions bash` prints, run in a real bash:
//! the script is sourced and its function called as bash calls it, with
//! COMP_WORDS and COMP_CWORD set, in a directory holding one file.

use std::process::Command;

use crate::harness::{TempDir, zklock};

/// A file in the directory the completion runs in: offered where file
/// names are, and only there.
const FILE: &str = "file-in-cwd";

/// What bash would offer for the last of `words` (the word being typed).
fn complete(dir: &TempDir, words: &[&str]) -> Vec<String> {
    let script = dir.path().join("zklock.bash");
    let generated = zklock().args(["completions", "bash"]).output().unwrap();
    assert!(generated.status.success(), "{generated:?}");
    std::fs::write(&script, &generated.stdout).unwrap();
    let call = r#"source "$1"; shift
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
_zklock zklock "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}" 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}""#;
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", call, "bash"])
        .arg(&script)
        .args(words)
        .current_dir(dir.path())
        .output()
        .expect("bash");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_options_before_double_dash_and_the_command_after() {
    let dir = TempDir::new();
    std::fs::write(dir.path().join(FILE), "").unwrap();
    let has = |offered: &[String], word: &str| offered.iter().any(|o| o == word);

    // zklock's options, up to `--`.
    let offered = complete(&dir, &["zklock", "run", "/x", "--c"]);
    assert!(
        has(&offered, "--config") && has(&offered, "--command"),
        "{offered:?}"
    );
    // After it, the command's words: never zklock's options.
    for words in [
        &["zklock", "run", "/x", "--", "ls", "--c"][..],
        &["zklock", "run", "--", "ls", "--c"],
        &["zklock", "run", "-n", "/x", "--", "--c"],
    ] {
        let offered = complete(&dir, words);
        assert!(
            !offered.iter().any(|o| o.starts_with("--c")),
            "{words:?}: {offered:?}"
        );
    }
    // The command's name, then its arguments (file names).
    let offered = complete(&dir, &["zklock", "run", "/x", "--", "bas"]);
    assert!(has(&offered, "bash"), "{offered:?}");
    let offered = complete(&dir, &["zklock", "run", "/x", "--", "ls", "file"]);
    assert_eq!(offered, [FILE]);

    // Values that are not file names complete none; file options do.
    for option in [
        "-z",
        "--zookeeper",
        "--timeout",
        "--label",
        "--acl",
        "--kerberos-host",
    ] {
        let offered = complete(&dir, &["zklock", "run", option, ""]);
        assert!(!has(&offered, FILE), "{option}: {offered:?}");
    }
    let offered = complete(&dir, &["zklock", "status", "-z", ""]);
    assert!(!has(&offered, FILE), "status -z: {offered:?}");
    for option in ["--config", "--tls-ca", "--password-file", "--metrics-file"] {
        let offered = complete(&dir, &["zklock", "run", option, "f"]);
        assert_eq!(offered, [FILE], "{option}");
    }
}
