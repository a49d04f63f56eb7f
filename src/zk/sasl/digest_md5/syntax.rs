//! The syntax of DIGEST-MD5's messages (RFC 2831 section 7.1, after RFC
//! 2616's): comma-separated `name=value` directives, values either tokens or
//! quoted strings with backslash escapes.

use anyhow::{Context, anyhow, bail};

/// The `name=value` directives of a comma-separated list, names in lower
/// case, quoted values unescaped (RFC 2831 section 7.1: empty elements and
/// linear white space between elements are allowed).
pub fn directives(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut found = Vec::new();
    let mut rest = skip_space(text);
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix(',') {
            rest = skip_space(after);
            continue;
        }
        let (name, after) =
            token(rest).ok_or_else(|| anyhow!("expected a directive at `{rest}`"))?;
        let after = skip_space(after);
        let after = (after.strip_prefix('='))
            .ok_or_else(|| anyhow!("the directive `{name}` has no `=value`"))?;
        let after = skip_space(after);
        let (value, after) = match after.strip_prefix('"') {
            Some(quoted) => unquote(quoted).with_context(|| format!("in `{name}`"))?,
            None => {
                let (value, after) =
                    token(after).ok_or_else(|| anyhow!("the directive `{name}` has no value"))?;
                (value.to_owned(), after)
            }
        };
        found.push((name.to_ascii_lowercase(), value));
        rest = skip_space(after);
        if !rest.is_empty() && !rest.starts_with(',') {
            bail!("expected a comma after `{name}`");
        }
    }
    Ok(found)
}

fn skip_space(text: &str) -> &str {
    text.trim_start_matches([' ', '\t', '\r', '\n'])
}

/// A leading token (RFC 2616's: no separators, controls or spaces), and the
/// text after it; `None` if `text` does not start with one.
fn token(text: &str) -> Option<(&str, &str)> {
    let is_token = |c: char| c.is_ascii_graphic() && !"()<>@,;:\\\"/[]?={}".contains(c);
    let end = text.find(|c| !is_token(c)).unwrap_or(text.len());
    (end > 0).then(|| text.split_at(end))
}

/// The value of a quoted string whose opening quote is already read, and
/// the text after its closing quote.
fn unquote(text: &str) -> anyhow::Result<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &text[at + 1..])),
            '\\' => match chars.next() {
                Some((_, escaped)) => value.push(escaped),
                None => break,
            },
            c => value.push(c),
        }
    }
    bail!("a quoted string is not closed")
}

/// `value` as a quoted string.
pub fn quote(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn lists_of_directives_are_read() {
        let cases: [(&str, &[(&str, &str)]); 6] = [
            ("", &[]),
            (" , ,\t", &[]),
            ("a=b", &[("a", "b")]),
            ("A = \"x, y\" ,b=c", &[("a", "x, y"), ("b", "c")]),
            // A backslash quotes the next character, whatever it is.
            (r#"q="\"\\\z""#, &[("q", r#""\z"#)]),
            // An empty quoted string is a value; UTF-8 passes through.
            (
                "e=\"\",,r=\"zk-sasl-md5\",u=\"bjørn\"",
                &[("e", ""), ("r", "zk-sasl-md5"), ("u", "bjørn")],
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(directives(text).unwrap(), pairs(expected), "{text:?}");
        }
    }

    #[test]
    fn malformed_lists_are_refused() {
        let cases = [
            ("a", "has no `=value`"),
            ("a=", "has no value"),
            ("=b", "expected a directive"),
            ("a=b c=d", "expected a comma after `a`"),
            ("a=\"b\"c", "expected a comma after `a`"),
            ("a=\"b", "not closed"),
            ("a=\"b\\", "not closed"),
            ("a=b;c", "expected a comma after `a`"),
        ];
        for (text, why) in cases {
            let err = directives(text).err().unwrap();
            assert!(format!("{err:#}").contains(why), "{err:#} for {text:?}");
        }
    }

    #[test]
    fn quoting_escapes_exactly_what_unquoting_reads_back() {
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
        for value in ["", "plain", r#"\"#, r#"""#, "sp ace, comma", "ünï"] {
            let text = format!("v={}", quote(value));
            assert_eq!(directives(&text).unwrap(), pairs(&[("v", value)]), "{text}");
        }
    }
}
