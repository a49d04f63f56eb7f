//! The config file: named ensembles (`-z @prod`), found at `--config FILE`,
//! `$ZKLOCK_CONFIG`, `$XDG_CONFIG_HOME/zklock/config.toml` (or
//! `~/.config/zklock/config.toml`), or `/etc/zklock/config.toml`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::session::options::Options;
use crate::session::secret;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfigFile {
    /// The ensemble used when neither `-z` nor `ZKLOCK_ZOOKEEPER` is given.
    pub default: Option<String>,
    /// The `[ensembles.NAME]` tables; every key is the flag of the same name.
    #[serde(default)]
    pub ensembles: BTreeMap<String, Options>,
}

/// A config file read from disk, with where it came from.
#[derive(Debug)]
pub struct Loaded {
    pub path: PathBuf,
    pub file: ConfigFile,
}

impl Loaded {
    /// The ensemble `name`, with relative file paths made relative to the
    /// config file's directory.
    pub fn ensemble(&self, name: &str) -> Result<Options, String> {
        let Some(found) = self.file.ensembles.get(name) else {
            let known: Vec<&str> = self.file.ensembles.keys().map(String::as_str).collect();
            return Err(format!(
                "no ensemble `{name}` in {} (it has: {})",
                self.path.display(),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        };
        let mut ensemble = found.clone();
        let base = self.path.parent().unwrap_or(Path::new("/"));
        for path in [
            &mut ensemble.tls_ca,
            &mut ensemble.tls_cert,
            &mut ensemble.tls_key,
            &mut ensemble.password_file,
        ]
        .into_iter()
        .flatten()
        {
            *path = base.join(&*path);
        }
        Ok(ensemble)
    }

    /// Refuses a file open to group or others that holds a `password` in
    /// any of its ensembles, whichever is used: the password is exposed
    /// either way, and the mistake should not wait for that ensemble's turn.
    pub fn check_passwords(&self) -> Result<(), String> {
        match self.file.ensembles.values().any(|e| e.password.is_some()) {
            true => secret::check_private(&self.path),
            false => Ok(()),
        }
    }
}

/// Parses the text of a config file; errors name the file and the line.
pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, String> {
    toml::from_str(text).map_err(|err| {
        let line = err
            .span()
            .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
        let message = err.message().replace('\n', " ");
        match line {
            Some(line) => format!("{}:{line}: {message}", path.display()),
            None => format!("{}: {message}", path.display()),
        }
    })
}

/// Where the config file is, in lookup order: `--config` (given as `flag`;
/// clap also fills it from `ZKLOCK_CONFIG`), then the XDG location, then
/// `/etc`. A file named explicitly must exist; the others are optional.
pub fn locate(
    flag: Option<&Path>,
    env: &dyn Fn(&str) -> Option<OsString>,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<(PathBuf, bool)> {
    if let Some(path) = flag {
        return Some((path.to_owned(), true));
    }
    let nonempty = |name: &str| env(name).filter(|v| !v.is_empty());
    let mut candidates = Vec::new();
    if let Some(xdg) = nonempty("XDG_CONFIG_HOME") {
        candidates.push(PathBuf::from(xdg).join("zklock/config.toml"));
    } else if let Some(home) = nonempty("HOME") {
        candidates.push(PathBuf::from(home).join(".config/zklock/config.toml"));
    }
    candidates.push(PathBuf::from("/etc/zklock/config.toml"));
    candidates
        .into_iter()
        .find(|path| exists(path))
        .map(|path| (path, false))
}

/// Finds and reads the config file, if any.
pub fn load(flag: Option<&Path>) -> Result<Option<Loaded>, String> {
    let env = |name: &str| std::env::var_os(name);
    let Some((path, _required)) = locate(flag, &env, &|p: &Path| p.exists()) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|err| format!("cannot read the config file {}: {err}", path.display()))?;
    let file = parse(&path, &text)?;
    Ok(Some(Loaded { path, file }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/security.md's example, kept here so the two cannot drift apart.
    pub const EXAMPLE: &str = r#"
default = "prod"

[ensembles.prod]
hosts = "zk1.example.com:2281,zk2.example.com:2281/apps"
session-timeout = "15s"
connect-timeout = "10s"
tls-ca = "/etc/zklock/ca.pem"
tls-cert = "/etc/zklock/client.pem"
tls-key = "/etc/zklock/client.key"
sasl-user = "backup"
password-file = "/etc/zklock/prod.password"
acl = ["creator", "world:anyone:r"]

[ensembles.dev]
hosts = "127.0.0.1:2181"
digest-user = "dev"
password = "not-a-secret"
kerberos = false
kerberos-service = "zookeeper"
kerberos-host = "zk1.example.com"
"#;

    #[test]
    fn parses_the_readme_example() {
        let file = parse(Path::new("c.toml"), EXAMPLE).unwrap();
        assert_eq!(file.default.as_deref(), Some("prod"));
        let prod = &file.ensembles["prod"];
        assert_eq!(prod.sasl_user.as_deref(), Some("backup"));
        assert_eq!(prod.acl.len(), 2);
        let dev = &file.ensembles["dev"];
        assert_eq!(dev.password.as_ref().unwrap().expose(), "not-a-secret");
        let readme = include_str!("../../docs/security.md");
        assert!(
            readme.contains(EXAMPLE.trim()),
            "docs/security.md's config example differs"
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_file_and_line() {
        let text = "[ensembles.prod]\nhosts = \"a:1\"\ntls-cafile = \"x\"\n";
        let err = parse(Path::new("/etc/zklock/config.toml"), text).unwrap_err();
        assert!(
            err.starts_with("/etc/zklock/config.toml:3: unknown field `tls-cafile`"),
            "{err}"
        );
        assert!(!err.contains('\n'));
        let err = parse(Path::new("c.toml"), "defualt = \"x\"\n").unwrap_err();
        assert!(
            err.starts_with("c.toml:1: unknown field `defualt`"),
            "{err}"
        );
        let err = parse(Path::new("c.toml"), "[ensembles.x]\nsasl-user = \"u\"\n").unwrap_err();
        assert!(err.contains("missing field `hosts`"), "{err}");
        // Values are parsed as the flags' are, when the file is read.
        for bad in [
            "hosts = \"zk 1\"",
            "hosts = \"@other\"",
            "hosts = \"h\"\nconnect-timeout = \"soon\"",
            "hosts = \"h\"\nacl = [\"bogus\"]",
        ] {
            let text = format!("[ensembles.x]\n{bad}\n");
            let err = parse(Path::new("c.toml"), &text).unwrap_err();
            let line = text.lines().count();
            assert!(err.starts_with(&format!("c.toml:{line}: ")), "{err}");
        }
    }

    #[test]
    fn relative_paths_follow_the_file() {
        let file = parse(
            Path::new("/srv/conf/zklock.toml"),
            "[ensembles.a]\nhosts = \"h\"\ntls-ca = \"ca.pem\"\npassword-file = \"/abs/pw\"\n",
        )
        .unwrap();
        let loaded = Loaded {
            path: "/srv/conf/zklock.toml".into(),
            file,
        };
        let a = loaded.ensemble("a").unwrap();
        assert_eq!(a.tls_ca.unwrap(), Path::new("/srv/conf/ca.pem"));
        assert_eq!(a.password_file.unwrap(), Path::new("/abs/pw"));
        let err = loaded.ensemble("b").unwrap_err();
        assert!(
            err.contains("no ensemble `b`") && err.contains("it has: a"),
            "{err}"
        );
    }

    #[test]
    fn lookup_order() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let all = |_: &Path| true;
        let none = |_: &Path| false;
        let full = env(&[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(
            locate(Some(Path::new("/f.toml")), &full, &none),
            Some(("/f.toml".into(), true))
        );
        assert_eq!(
            locate(None, &full, &all),
            Some(("/x/zklock/config.toml".into(), false))
        );
        let home = env(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "")]);
        assert_eq!(
            locate(None, &home, &all),
            Some(("/h/.config/zklock/config.toml".into(), false))
        );
        let only_etc = |p: &Path| p.starts_with("/etc");
        assert_eq!(
            locate(None, &full, &only_etc),
            Some(("/etc/zklock/config.toml".into(), false))
        );
        assert_eq!(locate(None, &full, &none), None);
    }
}
