//! The variables `zklock hold` prints once the lock is held, in the format
//! asked for (docs/design.md, "Holds"): quoted so that `eval` and the
//! readers of "$GITHUB_ENV" take every value as it is, whatever it holds.

use crate::cli::Format;

/// The variables as `format` prints them, each line ending in a newline.
pub fn render(format: Format, vars: &[(String, String)]) -> String {
    match format {
        Format::Sh => vars
            .iter()
            .map(|(name, value)| format!("export {name}={}\n", sh_quote(value)))
            .collect(),
        Format::Json => {
            let object: serde_json::Map<String, serde_json::Value> = vars
                .iter()
                .map(|(name, value)| (name.clone(), value.clone().into()))
                .collect();
            format!("{}\n", serde_json::Value::Object(object))
        }
        Format::GithubEnv => vars
            .iter()
            .map(|(name, value)| github_env(name, value))
            .collect(),
    }
}

/// `value` in single quotes, each `'` closed, escaped and reopened: the
/// shell expands nothing inside (no `$()`, no backquotes, newlines kept).
fn sh_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// One variable for "$GITHUB_ENV": `NAME=value`, or, for a value over
/// several lines, GitHub's delimiter form with a delimiter the value does
/// not contain.
fn github_env(name: &str, value: &str) -> String {
    if !value.contains(['\n', '\r']) {
        return format!("{name}={value}\n");
    }
    let mut delimiter = String::from("ZKLOCK_EOF");
    while value.lines().any(|line| line == delimiter) {
        delimiter.push_str(&uuid::Uuid::new_v4().simple().to_string()[..8]);
    }
    format!("{name}<<{delimiter}\n{value}\n{delimiter}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn sh_quotes_everything_the_shell_expands() {
        let printed = render(
            Format::Sh,
            &vars(&[("A", "it's $(rm -rf /) `x`\nline 2"), ("B", "")]),
        );
        assert_eq!(
            printed,
            "export A='it'\\''s $(rm -rf /) `x`\nline 2'\nexport B=''\n"
        );
    }

    #[test]
    fn github_env_uses_a_delimiter_absent_from_the_value() {
        assert_eq!(render(Format::GithubEnv, &vars(&[("A", "x=y")])), "A=x=y\n");
        let printed = render(Format::GithubEnv, &vars(&[("A", "1\nZKLOCK_EOF\n2")]));
        let first = printed.lines().next().unwrap();
        let delimiter = first.strip_prefix("A<<").unwrap();
        assert_ne!(delimiter, "ZKLOCK_EOF");
        assert_eq!(
            printed,
            format!("A<<{delimiter}\n1\nZKLOCK_EOF\n2\n{delimiter}\n")
        );
    }

    #[test]
    fn json_is_one_object() {
        let printed = render(Format::Json, &vars(&[("A", "\"q\"\n")]));
        let parsed: serde_json::Value = serde_json::from_str(&printed).unwrap();
        assert_eq!(parsed["A"], "\"q\"\n");
    }
}
