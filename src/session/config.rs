//! The config file: named ensembles (`-z @prod`), found at `--config FILE`,
//! `$ZKLOCK_CONFIG`, `$XDG_CONFIG_HOME/zklock/config.toml` (or
//! `~/.config/zklock/config.toml`), or `/etc/zklock/config.toml`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::session::options::Options;
use crate::session::secret::{self, PASSWORD_ENV, Secret};
use crate::values::Target;

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
            let mut known: Vec<&str> = self.file.ensembles.keys().map(String::as_str).collect();
            if known.is_empty() {
                known.push("none");
            }
            let (path, known) = (self.path.display(), known.join(", "));
            return Err(format!("no ensemble `{name}` in {path} (it has: {known})"));
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
        let line =
            (err.span()).map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
        let line = line.map(|line| format!(":{line}")).unwrap_or_default();
        let message = err.message().replace('\n', " ");
        format!("{}{line}: {message}", path.display())
    })
}

/// Where the config file is, in lookup order: `--config` (given as `flag`;
/// clap also fills it from `ZKLOCK_CONFIG`), which must exist, then the XDG
/// location, then `/etc`, if present.
pub fn locate(
    flag: Option<&Path>,
    env: &dyn Fn(&str) -> Option<OsString>,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    if let Some(path) = flag {
        return Some(path.to_owned());
    }
    let nonempty = |name: &str| env(name).filter(|v| !v.is_empty());
    let mut candidates = Vec::new();
    if let Some(xdg) = nonempty("XDG_CONFIG_HOME") {
        candidates.push(PathBuf::from(xdg).join("zklock/config.toml"));
    } else if let Some(home) = nonempty("HOME") {
        candidates.push(PathBuf::from(home).join(".config/zklock/config.toml"));
    }
    candidates.push(PathBuf::from("/etc/zklock/config.toml"));
    candidates.into_iter().find(|path| exists(path))
}

/// Finds and reads the config file, if any.
pub fn load(flag: Option<&Path>) -> Result<Option<Loaded>, String> {
    let env = |name: &str| std::env::var_os(name);
    let Some(path) = locate(flag, &env, &|p: &Path| p.exists()) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|err| format!("cannot read the config file {}: {err}", path.display()))?;
    let file = parse(&path, &text)?;
    Ok(Some(Loaded { path, file }))
}

/// The variable `--zookeeper` falls back to.
const HOSTS_VARIABLE: &str = "ZKLOCK_ZOOKEEPER";

impl Options {
    /// These options over the variables clap does not read (`ZKLOCK_ZOOKEEPER`,
    /// so that a bad value is named as the variable, and `ZKLOCK_PASSWORD`,
    /// which has no flag), over the ensemble of the config file `loaded`
    /// that `-z @NAME` (or the file's `default`) names; hosts given
    /// directly take nothing from the file.
    pub fn merged(
        &self,
        loaded: Option<&Loaded>,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Options, String> {
        if let Some(loaded) = loaded {
            loaded.check_passwords()?;
        }
        // An empty variable is unset, as for the shell's own variables.
        let variable = |name: &str| {
            let value = env(name).filter(|value| !value.is_empty());
            (value.map(OsString::into_string).transpose())
                .map_err(|_| format!("{name} is not valid UTF-8"))
        };
        let parse = |value: String| {
            (value.parse::<Target>())
                .map_err(|e| format!("invalid value '{value}' in {HOSTS_VARIABLE}: {e}"))
        };
        let from_env = variable(HOSTS_VARIABLE)?.map(parse).transpose()?;
        let default = || Some(Target::Named(loaded?.file.default.clone()?));
        let file = match self.hosts.clone().or(from_env).or_else(default) {
            None => Options::default(),
            Some(Target::Named(name)) => match loaded {
                Some(loaded) => loaded.ensemble(&name)?,
                None => {
                    return Err(format!(
                        "-z @{name} names an ensemble of the config file, but there is none \
                         (looked for --config, $ZKLOCK_CONFIG, $XDG_CONFIG_HOME/zklock/config.toml \
                         or ~/.config/zklock/config.toml, /etc/zklock/config.toml)"
                    ));
                }
            },
            hosts => Options {
                hosts,
                ..Options::default()
            },
        };
        let ours = Options {
            hosts: None,
            password: variable(PASSWORD_ENV)?.map(Secret::new),
            ..self.clone()
        };
        Ok(ours.or(file))
    }

    /// Ours where given, else `file`'s, field by field. An empty name
    /// (`ZKLOCK_SASL_USER=` in a script) is unset, as for the shell's own
    /// variables. The password comes whole from one side, a file before a
    /// value: `--password-file`, then `ZKLOCK_PASSWORD`, then the file's.
    fn or(self, file: Options) -> Options {
        let named = |ours: Option<String>, theirs: Option<String>| {
            let nonempty = |name: &String| !name.is_empty();
            ours.filter(nonempty).or(theirs.filter(nonempty))
        };
        let (password_file, password) = match (self.password_file, self.password) {
            (None, None) => (file.password_file, file.password),
            ours => ours,
        };
        Options {
            hosts: self.hosts.or(file.hosts),
            session_timeout: self.session_timeout.or(file.session_timeout),
            connect_timeout: self.connect_timeout.or(file.connect_timeout),
            jute_maxbuffer: self.jute_maxbuffer.or(file.jute_maxbuffer),
            config: self.config,
            tls_ca: self.tls_ca.or(file.tls_ca),
            tls_cert: self.tls_cert.or(file.tls_cert),
            tls_key: self.tls_key.or(file.tls_key),
            sasl_user: named(self.sasl_user, file.sasl_user),
            digest_user: named(self.digest_user, file.digest_user),
            password_file,
            password,
            kerberos: self.kerberos.or(file.kerberos),
            kerberos_service: named(self.kerberos_service, file.kerberos_service),
            kerberos_host: named(self.kerberos_host, file.kerberos_host),
            acl: Some(self.acl)
                .filter(|acl| !acl.is_empty())
                .unwrap_or(file.acl),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let at = |path: &str| Some(PathBuf::from(path));
        assert_eq!(
            locate(Some(Path::new("/f.toml")), &full, &none),
            at("/f.toml")
        );
        assert_eq!(locate(None, &full, &all), at("/x/zklock/config.toml"));
        let home = env(&[("HOME", "/h"), ("XDG_CONFIG_HOME", "")]);
        assert_eq!(
            locate(None, &home, &all),
            at("/h/.config/zklock/config.toml")
        );
        let only_etc = |p: &Path| p.starts_with("/etc");
        assert_eq!(
            locate(None, &full, &only_etc),
            at("/etc/zklock/config.toml")
        );
        assert_eq!(locate(None, &full, &none), None);
    }
}
