//! What `zklock hold` prints: shell assignments that `eval` takes as they
//! are whatever a path or label holds, and the json and github-env formats,
//! read back by real parsers (docs/design.md, "Holds").

use crate::hold::{Place, read};

/// A path with quotes, `$()`, backquotes and spaces, beside a plain one:
/// with two paths, every value holds a newline too.
fn nasty_path(place: &Place) -> String {
    format!(
        "{}-it's \"$(touch pwned)\" `touch pwned2` $HOME",
        place.path
    )
}

#[test]
fn eval_takes_every_value_as_it_is() {
    let place = Place::new("hold-eval");
    let zk = place.zk();
    let nasty = nasty_path(&place);
    let mut cmd = place.bash(
        r#"set -e
        cd "$OUT"
        label=$'it\'s "q" $(touch pwned3) `x`\nsecond line'
        eval "$("$ZKLOCK" hold -z "$ZK" --label "$label" "$P" "$NASTY")"
        printf '%s' "$ZKLOCK_PATH" > path
        "$ZKLOCK" status -z "$ZK" "$NASTY" > status || true
        "$ZKLOCK" release"#,
    );
    cmd.env("NASTY", &nasty);
    let out = crate::harness::run_bounded(&mut cmd, crate::hold::LONG);
    out.assert_code(0);
    assert_eq!(
        read(&place.file("path")),
        format!("{}\n{nasty}", place.path)
    );
    for file in ["pwned", "pwned2", "pwned3"] {
        assert!(!place.file(file).exists(), "{file}: something was expanded");
    }
    // The label, stored in the node, is shown escaped to one line.
    let status = read(&place.file("status"));
    assert!(
        status.contains(r#"it's "q" $(touch pwned3) `x`\nsecond line"#),
        "{status}"
    );
    place.assert_clean(zk);
    crate::harness::assert_no_nodes(zk, &nasty);
}

#[test]
fn json_is_read_by_python() {
    let place = Place::new("hold-json");
    let zk = place.zk();
    let nasty = nasty_path(&place);
    let mut cmd = place.bash(
        r#"set -e
        "$ZKLOCK" hold --format json -z "$ZK" "$P" "$NASTY" > "$OUT/vars.json"
        python3 - "$OUT/vars.json" "$P" "$NASTY" <<'PY' > "$OUT/hold"
import json, sys
vars = json.load(open(sys.argv[1]))
assert vars["ZKLOCK_PATH"] == sys.argv[2] + "\n" + sys.argv[3], vars
assert all(int(t) > 0 for t in vars["ZKLOCK_FENCING_TOKEN"].split("\n")), vars
assert vars["ZKLOCK_SESSION_ID"].startswith("0x"), vars
print(vars["ZKLOCK_HOLD"], end="")
PY
        ZKLOCK_HOLD="$(cat "$OUT/hold")" "$ZKLOCK" release"#,
    );
    cmd.env("NASTY", &nasty);
    crate::harness::run_bounded(&mut cmd, crate::hold::LONG).assert_code(0);
    place.assert_clean(zk);
    crate::harness::assert_no_nodes(zk, &nasty);
}

/// A reader of GitHub's environment file format (`NAME=value`, or
/// `NAME<<DELIMITER`, lines, `DELIMITER`), as the runner reads "$GITHUB_ENV",
/// exporting each variable.
const GITHUB_ENV_READER: &str = r#"
read_github_env() {
    local line name delimiter value
    while IFS= read -r line; do
        if [[ $line == *'<<'* && $line != *=* ]]; then
            name=${line%%<<*}; delimiter=${line#*<<}; value=
            local first=1
            while IFS= read -r line && [[ $line != "$delimiter" ]]; do
                if (( first )); then value=$line; first=0; else value+=$'\n'$line; fi
            done
        else
            name=${line%%=*}; value=${line#*=}
        fi
        export "$name=$value"
    done < "$1"
}
"#;

#[test]
fn github_env_is_read_as_the_runner_reads_it() {
    let place = Place::new("hold-github");
    let zk = place.zk();
    let nasty = nasty_path(&place);
    let script = format!(
        r#"set -e
        {GITHUB_ENV_READER}
        "$ZKLOCK" hold --until-released --max-hold 10m --format github-env \
            -z "$ZK" "$P" "$NASTY" >> "$OUT/github_env"
        read_github_env "$OUT/github_env"
        test "$ZKLOCK_PATH" = "$P"$'\n'"$NASTY"
        printf '%s' "$ZKLOCK_FENCING_TOKEN" > "$OUT/tokens"
        "$ZKLOCK" release"#
    );
    let mut cmd = place.bash(&script);
    cmd.env("NASTY", &nasty);
    crate::harness::run_bounded(&mut cmd, crate::hold::LONG).assert_code(0);
    let tokens = read(&place.file("tokens"));
    assert_eq!(tokens.lines().count(), 2, "{tokens}");
    assert!(tokens.lines().all(|t| t.parse::<i64>().unwrap() > 0));
    place.assert_clean(zk);
    crate::harness::assert_no_nodes(zk, &nasty);
}
