//! The connection settings every subcommand shares, resolved once from
//! flag > `ZKLOCK_*` environment > config file (`-z @NAME`, or its
//! `default`) > built-in default. Flags and their environment variables are
//! merged by clap before they get here ([`Given`]), except `ZKLOCK_ZOOKEEPER`,
//! which is read here so that a bad value is named as the variable.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use zookeeper_client as zk;

use crate::session::acl::AclPolicy;
use crate::session::config::{self, Ensemble, Loaded};
use crate::session::connection_timeout_for;
use crate::session::secret::{self, PASSWORD_ENV, PASSWORD_FILE_ENV, Secret};
use crate::session::tls_check::TlsPem;
use crate::values::{HostList, Seconds, Target};

/// The variable `--zookeeper` falls back to.
pub const HOSTS_VARIABLE: &str = "ZKLOCK_ZOOKEEPER";

/// Where zklock connects when nothing says otherwise.
pub const DEFAULT_HOSTS: &str = "127.0.0.1:2181";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_KERBEROS_SERVICE: &str = "zookeeper";
/// The environment variable of `--config`.
const CONFIG_ENV: &str = "ZKLOCK_CONFIG";

/// What the command line and its environment variables gave.
#[derive(Debug, Clone, Default)]
pub struct Given {
    pub target: Option<Target>,
    pub session_timeout: Option<Seconds>,
    pub connect_timeout: Option<Seconds>,
    pub config: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub sasl_user: Option<String>,
    pub digest_user: Option<String>,
    pub password_file: Option<PathBuf>,
    pub kerberos: bool,
    pub kerberos_service: Option<String>,
    pub kerberos_host: Option<String>,
    pub acl: Vec<String>,
}

/// SASL, which runs on every connection before anything else.
#[derive(Debug, Clone)]
pub enum Sasl {
    DigestMd5 {
        user: String,
        password: Secret,
    },
    // Read only by a build with the `kerberos` feature.
    #[cfg_attr(not(feature = "kerberos"), allow(dead_code))]
    Gssapi {
        service: String,
        host: Option<String>,
    },
}

/// Everything needed to open (and reopen) a session.
#[derive(Debug, Clone)]
pub struct Settings {
    pub hosts: HostList,
    pub session_timeout: Duration,
    pub connect_timeout: Duration,
    pub tls: Option<zk::TlsOptions>,
    /// The files behind `tls`, for messages.
    pub tls_files: Vec<PathBuf>,
    /// Their contents, for telling certificate problems apart.
    pub tls_pem: Option<TlsPem>,
    pub sasl: Option<Sasl>,
    /// `addauth digest user:password`, sent on every connection.
    pub digest: Option<(String, Secret)>,
    pub acl: AclPolicy,
    /// The `--password-file` the password was read from, made absolute: the
    /// command gets it as `ZKLOCK_PASSWORD_FILE`, so that a nested zklock
    /// finds the password as we did (see [`Settings::passed_on`]).
    pub password_file: Option<PathBuf>,
    /// The config file named by `--config`, made absolute, passed on as
    /// `ZKLOCK_CONFIG` for the same reason.
    pub config_file: Option<PathBuf>,
}

impl Settings {
    /// Resolves `given` against the config file and the defaults.
    pub fn resolve(given: &Given) -> Result<Settings, String> {
        let loaded = config::load(given.config.as_deref())?;
        let env = |name: &str| std::env::var_os(name);
        Settings::resolve_with(given, loaded.as_ref(), &env)
    }

    pub fn resolve_with(
        given: &Given,
        loaded: Option<&Loaded>,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Settings, String> {
        if let Some(loaded) = loaded {
            loaded.check_passwords()?;
        }
        let from_env = match env(HOSTS_VARIABLE).filter(|value| !value.is_empty()) {
            Some(value) => Some(
                value
                    .to_str()
                    .ok_or_else(|| format!("{HOSTS_VARIABLE} is not valid UTF-8"))?
                    .parse::<Target>()
                    .map_err(|e| {
                        format!(
                            "invalid value '{}' in {HOSTS_VARIABLE}: {e}",
                            value.to_string_lossy()
                        )
                    })?,
            ),
            None => None,
        };
        let given_target = given.target.clone().or(from_env);
        let target = match (given_target, loaded.and_then(|l| l.file.default.as_ref())) {
            (Some(target), _) => target,
            (None, Some(name)) => Target::Named(name.clone()),
            (None, None) => Target::Hosts(DEFAULT_HOSTS.parse().expect("a valid default")),
        };
        let (hosts, ensemble) = match target {
            Target::Hosts(hosts) => (hosts, Ensemble::default()),
            Target::Named(name) => {
                let Some(loaded) = loaded else {
                    return Err(format!(
                        "-z @{name} names an ensemble of the config file, but there is none \
                         (looked for --config, $ZKLOCK_CONFIG, $XDG_CONFIG_HOME/zklock/config.toml \
                         or ~/.config/zklock/config.toml, /etc/zklock/config.toml)"
                    ));
                };
                let ensemble = loaded.ensemble(&name)?;
                let in_file =
                    |err: String| format!("{}: ensemble {name}: {err}", loaded.path.display());
                let hosts = ensemble
                    .hosts
                    .parse()
                    .map_err(|e| in_file(format!("hosts: {e}")))?;
                (hosts, ensemble)
            }
        };
        let duration = |flag: Option<Seconds>, key: &str, value: &Option<String>| {
            let from_file = ensemble.duration(key, value).map_err(|err| match loaded {
                Some(l) => format!("{}: {err}", l.path.display()),
                None => err,
            })?;
            Ok::<_, String>(flag.or(from_file).map_or(DEFAULT_TIMEOUT, |s| s.0))
        };
        let session_timeout = duration(
            given.session_timeout,
            "session-timeout",
            &ensemble.session_timeout,
        )?;
        let connect_timeout = duration(
            given.connect_timeout,
            "connect-timeout",
            &ensemble.connect_timeout,
        )?;
        if connect_timeout.is_zero() {
            return Err("a connect timeout of 0 would give up before connecting; \
                        give --connect-timeout (or connect-timeout in the config file) \
                        a positive duration such as 10s"
                .into());
        }

        let pick = |flag: &Option<PathBuf>, file: &Option<PathBuf>| flag.clone().or(file.clone());
        let (tls, tls_files, tls_pem) = tls_options(
            pick(&given.tls_ca, &ensemble.tls_ca),
            pick(&given.tls_cert, &ensemble.tls_cert),
            pick(&given.tls_key, &ensemble.tls_key),
        )?;

        // An empty value (`ZKLOCK_SASL_USER=` in a script) means unset, as
        // for the shell's own variables.
        let named = |value: &Option<String>| value.clone().filter(|v| !v.is_empty());
        let sasl_user = named(&given.sasl_user).or(named(&ensemble.sasl_user));
        let digest_user = named(&given.digest_user).or(named(&ensemble.digest_user));
        let kerberos = given.kerberos || ensemble.kerberos.unwrap_or(false);
        if sasl_user.is_some() && kerberos {
            return Err(
                "--sasl-user (DIGEST-MD5) and --kerberos are two SASL mechanisms; give one".into(),
            );
        }
        if sasl_user.is_some() && digest_user.is_some() {
            return Err("--sasl-user and --digest-user would share one password; give one".into());
        }
        let password = || -> Result<Secret, String> {
            if let Some(file) = &given.password_file {
                return secret::read_password_file(file);
            }
            let from_env = env(PASSWORD_ENV);
            if let Some(value) = from_env.clone().filter(|v| !v.is_empty()) {
                return value
                    .into_string()
                    .map(Secret::new)
                    .map_err(|_| format!("{PASSWORD_ENV} is not valid UTF-8"));
            }
            if let Some(file) = &ensemble.password_file {
                return secret::read_password_file(file);
            }
            if let Some(secret) = loaded.and_then(|l| l.password(&ensemble)) {
                return Ok(secret);
            }
            // Never tell a user to set the variable they did set.
            Err(match from_env {
                Some(_) => format!(
                    "{PASSWORD_ENV} is set but empty (and no --password-file or \
                     password-file in the config file is given)"
                ),
                None => format!(
                    "no password given: use --password-file FILE, {PASSWORD_ENV}, or \
                     password-file in the config file"
                ),
            })
        };
        let sasl = if let Some(user) = sasl_user {
            Some(Sasl::DigestMd5 {
                password: password().map_err(|e| format!("SASL DIGEST-MD5 as {user}: {e}"))?,
                user,
            })
        } else if kerberos {
            if !cfg!(feature = "kerberos") {
                return Err("this zklock was built without Kerberos; rebuild it with \
                            `cargo build --release --features kerberos`"
                    .into());
            }
            Some(Sasl::Gssapi {
                service: named(&given.kerberos_service)
                    .or(named(&ensemble.kerberos_service))
                    .unwrap_or_else(|| DEFAULT_KERBEROS_SERVICE.to_owned()),
                host: named(&given.kerberos_host).or(named(&ensemble.kerberos_host)),
            })
        } else {
            None
        };
        let digest = match digest_user {
            Some(user) => {
                let password = password().map_err(|e| format!("digest as {user}: {e}"))?;
                Some((user, password))
            }
            None => None,
        };

        let authenticated = sasl.is_some() || digest.is_some() || tls_files.len() == 3;
        let acl = if !given.acl.is_empty() {
            AclPolicy::parse_all(&given.acl)?
        } else if let Some(acl) = &ensemble.acl {
            AclPolicy::parse_all(acl).map_err(|err| match loaded {
                Some(l) => format!("{}: {err}", l.path.display()),
                None => err,
            })?
        } else {
            AclPolicy::default_for(authenticated)
        };
        if acl.uses_creator() && !authenticated {
            return Err(format!(
                "--acl {} grants permissions to the authenticated identities, but no \
                 credentials are given (--sasl-user, --digest-user, --kerberos or --tls-cert)",
                acl.describe()
            ));
        }
        let password_file = match &given.password_file {
            Some(file) if sasl.is_some() || digest.is_some() => {
                Some(std::path::absolute(file).unwrap_or_else(|_| file.clone()))
            }
            _ => None,
        };
        let config_file = loaded
            .filter(|_| given.config.is_some())
            .map(|l| std::path::absolute(&l.path).unwrap_or_else(|_| l.path.clone()));
        Ok(Settings {
            hosts,
            session_timeout,
            connect_timeout,
            tls,
            tls_files,
            tls_pem,
            sasl,
            digest,
            acl,
            password_file,
            config_file,
        })
    }

    /// What the command's environment needs so that a nested zklock (README
    /// "Nested runs") authenticates as we did, without the password being
    /// written anywhere new: the password file's name when `--password-file`
    /// gave it, the config file's when `--config` did. `ZKLOCK_PASSWORD` and
    /// the other `ZKLOCK_*` variables the user set are inherited as they are;
    /// a config file at its usual place is found again.
    pub fn passed_on(&self) -> Vec<(&'static str, String)> {
        [
            (PASSWORD_FILE_ENV, &self.password_file),
            (CONFIG_ENV, &self.config_file),
        ]
        .into_iter()
        .filter_map(|(name, file)| Some((name, file.as_ref()?.to_str()?.to_owned())))
        .collect()
    }

    /// A connector with every setting but the session to attach to.
    pub fn connector(&self) -> zk::Connector {
        let mut connector = zk::Client::connector()
            .with_session_timeout(self.session_timeout)
            .with_connection_timeout(connection_timeout_for(self.session_timeout))
            .with_readonly(false);
        if let Some(tls) = &self.tls {
            connector = connector.with_tls(tls.clone());
        }
        match &self.sasl {
            Some(Sasl::DigestMd5 { user, password }) => {
                connector = connector.with_sasl(zk::SaslOptions::digest_md5(
                    user.clone(),
                    password.expose().to_owned(),
                ));
            }
            #[cfg(feature = "kerberos")]
            Some(Sasl::Gssapi { service, host }) => {
                let mut options = zk::SaslOptions::gssapi().with_username(service.clone());
                if let Some(host) = host {
                    options = options.with_hostname(host.clone());
                }
                connector = connector.with_sasl(options);
            }
            #[cfg(not(feature = "kerberos"))]
            Some(Sasl::Gssapi { .. }) => unreachable!("refused by resolve without the feature"),
            None => {}
        }
        // The library resends these auth packets on every reconnect.
        if let Some((user, password)) = &self.digest {
            let auth = format!("{user}:{}", password.expose());
            connector = connector.with_auth("digest", auth.as_bytes());
        }
        connector
    }

    /// Connects `connector` to our hosts, over TLS when configured.
    pub async fn open(&self, connector: zk::Connector) -> Result<zk::Client, zk::Error> {
        let hosts = self.hosts.connect_string();
        match self.tls {
            Some(_) => connector.secure_connect(hosts).await,
            None => connector.connect(hosts).await,
        }
    }

    pub fn uses_kerberos(&self) -> bool {
        matches!(self.sasl, Some(Sasl::Gssapi { .. }))
    }

    /// Why Kerberos cannot authenticate us to the first server, if it cannot.
    pub fn kerberos_problem(&self) -> Option<String> {
        #[cfg(feature = "kerberos")]
        if let Some(Sasl::Gssapi { service, host }) = &self.sasl {
            let first = self.hosts.connect_string().split([',', '/']).next()?;
            let name = first.rsplit_once(':').map_or(first, |(name, _)| name);
            let name = name.trim_start_matches('[').trim_end_matches(']');
            let host = host.as_deref().unwrap_or(name);
            return crate::session::kerberos_check::diagnose(service, host);
        }
        None
    }

    /// Who we authenticate as, for messages (never the password).
    pub fn credentials(&self) -> String {
        let mut parts = Vec::new();
        match &self.sasl {
            Some(Sasl::DigestMd5 { user, .. }) => {
                parts.push(format!("SASL DIGEST-MD5 as user {user}"))
            }
            Some(Sasl::Gssapi { .. }) => parts.push("SASL GSSAPI (Kerberos)".to_owned()),
            None => {}
        }
        if let Some((user, _)) = &self.digest {
            parts.push(format!("digest as user {user}"));
        }
        if self.tls_files.len() == 3 {
            parts.push(format!(
                "TLS client certificate {}",
                self.tls_files[1].display()
            ));
        }
        if parts.is_empty() {
            "no credentials".to_owned()
        } else {
            parts.join(" and ")
        }
    }
}

type TlsParts = (Option<zk::TlsOptions>, Vec<PathBuf>, Option<TlsPem>);

/// Reads the CA and, for mutual TLS, the client's certificate and key.
fn tls_options(
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<TlsParts, String> {
    let Some(ca) = ca else {
        if cert.is_some() || key.is_some() {
            return Err(
                "--tls-cert and --tls-key need --tls-ca (the CA that signed the servers)".into(),
            );
        }
        return Ok((None, Vec::new(), None));
    };
    let read = |what: &str, path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read the TLS {what} {}: {err}", path.display()))
    };
    let ca_pem = read("CA file", &ca)?;
    super::tls_check::check_ca(&ca_pem, &ca)?;
    let options = zk::TlsOptions::new()
        .with_pem_ca(&ca_pem)
        .map_err(|_| format!("the TLS CA file {} holds no PEM certificate", ca.display()))?;
    let mut pem = TlsPem {
        ca: ca_pem,
        ca_file: ca.display().to_string(),
        identity: None,
        cert_file: None,
    };
    match (cert, key) {
        (None, None) => Ok((Some(options), vec![ca], Some(pem))),
        (Some(cert), Some(key)) => {
            let (cert_pem, key_pem) = (read("certificate", &cert)?, read("key", &key)?);
            super::tls_check::check_identity(&cert_pem, &cert, &key_pem, &key)?;
            let options = options
                .with_pem_identity(&cert_pem, &key_pem)
                .map_err(|_| {
                    format!(
                        "the TLS certificate {} or key {} is not valid PEM",
                        cert.display(),
                        key.display()
                    )
                })?;
            pem.identity = Some((cert_pem, Secret::new(key_pem)));
            pem.cert_file = Some(cert.display().to_string());
            Ok((Some(options), vec![ca, cert, key], Some(pem)))
        }
        (Some(_), None) => Err("--tls-cert needs --tls-key (the certificate's private key)".into()),
        (None, Some(_)) => Err("--tls-key needs --tls-cert".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn no_env(_: &str) -> Option<OsString> {
        None
    }

    fn loaded(text: &str, path: &Path) -> Loaded {
        Loaded {
            path: path.to_owned(),
            file: config::parse(path, text).unwrap(),
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("zklock-settings-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn nothing_given_means_the_old_behaviour() {
        let s = Settings::resolve_with(&Given::default(), None, &no_env).unwrap();
        assert_eq!(s.hosts.connect_string(), "127.0.0.1:2181");
        assert_eq!(s.session_timeout, Duration::from_secs(10));
        assert_eq!(s.connect_timeout, Duration::from_secs(10));
        assert!(s.tls.is_none() && s.sasl.is_none() && s.digest.is_none());
        assert_eq!(s.acl, AclPolicy::default_for(false));
        assert_eq!(s.credentials(), "no credentials");
    }

    #[test]
    fn flag_beats_config_beats_default() {
        let dir = temp_dir("precedence");
        let pw = dir.join("pw");
        std::fs::write(&pw, "from-file\n").unwrap();
        std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
        let text = format!(
            "default = \"prod\"\n[ensembles.prod]\nhosts = \"zk1:2281/apps\"\n\
             session-timeout = \"20s\"\nsasl-user = \"backup\"\npassword-file = \"{}\"\n\
             acl = [\"sasl:backup:cdrwa\"]\n[ensembles.other]\nhosts = \"zk9\"\n",
            pw.display()
        );
        let file = loaded(&text, &dir.join("config.toml"));
        // The config's default ensemble when -z is not given.
        let s = Settings::resolve_with(&Given::default(), Some(&file), &no_env).unwrap();
        assert_eq!(s.hosts.connect_string(), "zk1:2281/apps");
        assert_eq!(s.session_timeout, Duration::from_secs(20));
        assert_eq!(s.connect_timeout, Duration::from_secs(10));
        assert_eq!(s.credentials(), "SASL DIGEST-MD5 as user backup");
        assert!(
            matches!(&s.sasl, Some(Sasl::DigestMd5 { password, .. }) if password.expose() == "from-file")
        );
        assert_eq!(s.acl.describe(), "sasl:backup:cdrwa");
        // Flags (or their environment variables) win, the environment's
        // password over the config's.
        let given = Given {
            target: Some("@prod".parse().unwrap()),
            session_timeout: Some("5s".parse().unwrap()),
            sasl_user: Some("ops".into()),
            acl: vec!["creator".into()],
            ..Given::default()
        };
        let env = |name: &str| (name == PASSWORD_ENV).then(|| OsString::from("from-env"));
        let s = Settings::resolve_with(&given, Some(&file), &env).unwrap();
        assert_eq!(s.session_timeout, Duration::from_secs(5));
        assert_eq!(s.credentials(), "SASL DIGEST-MD5 as user ops");
        assert!(
            matches!(&s.sasl, Some(Sasl::DigestMd5 { password, .. }) if password.expose() == "from-env")
        );
        assert_eq!(s.acl.describe(), "creator");
        // Hosts given directly take nothing from the file's ensembles.
        let given = Given {
            target: Some("zk5:2181".parse().unwrap()),
            ..Given::default()
        };
        let s = Settings::resolve_with(&given, Some(&file), &no_env).unwrap();
        assert_eq!(s.hosts.connect_string(), "zk5:2181");
        assert!(s.sasl.is_none());
        // @name picks a section; a missing one is named.
        let named = |name: &str| Given {
            target: Some(name.parse().unwrap()),
            ..Given::default()
        };
        let s = Settings::resolve_with(&named("@other"), Some(&file), &no_env).unwrap();
        assert_eq!(s.hosts.connect_string(), "zk9:2181");
        let err = Settings::resolve_with(&named("@nope"), Some(&file), &no_env).unwrap_err();
        assert!(err.contains("no ensemble `nope`"), "{err}");
        let err = Settings::resolve_with(&named("@prod"), None, &no_env).unwrap_err();
        assert!(err.contains("there is none"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn passwords_in_open_config_files_are_refused() {
        let dir = temp_dir("open");
        let path = dir.join("config.toml");
        let text = "[ensembles.p]\nhosts = \"h\"\ndigest-user = \"u\"\npassword = \"pw\"\n";
        std::fs::write(&path, text).unwrap();
        let file = loaded(text, &path);
        let given = Given {
            target: Some("@p".parse().unwrap()),
            ..Given::default()
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Settings::resolve_with(&given, Some(&file), &no_env).unwrap_err();
        assert!(err.contains("accessible by group or others"), "{err}");
        assert!(!err.contains("pw\""), "{err}");
        // Whichever ensemble is used, hosts given directly included.
        let text = format!("{text}[ensembles.q]\nhosts = \"h2\"\n");
        std::fs::write(&path, &text).unwrap();
        let both = loaded(&text, &path);
        for target in ["@q", "h3:2181"] {
            let given = Given {
                target: Some(target.parse().unwrap()),
                ..Given::default()
            };
            let err = Settings::resolve_with(&given, Some(&both), &no_env).unwrap_err();
            assert!(err.contains("chmod 600"), "{target}: {err}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let s = Settings::resolve_with(&given, Some(&file), &no_env).unwrap();
        assert_eq!(s.digest.as_ref().unwrap().1.expose(), "pw");
        // Credentials make the default ACL creator + world read.
        assert_eq!(s.acl.describe(), "creator,world:anyone:r");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empty_user_names_are_unset() {
        let given = Given {
            sasl_user: Some(String::new()),
            digest_user: Some(String::new()),
            ..Given::default()
        };
        let s = Settings::resolve_with(&given, None, &no_env).unwrap();
        assert!(s.sasl.is_none() && s.digest.is_none());
        assert_eq!(s.credentials(), "no credentials");
    }

    #[test]
    fn bad_combinations_and_files_are_usage_errors() {
        let err = |given: Given| Settings::resolve_with(&given, None, &no_env).unwrap_err();
        let e = err(Given {
            digest_user: Some("u".into()),
            ..Given::default()
        });
        assert!(e.contains("digest as u: no password given"), "{e}");
        let e = err(Given {
            password_file: Some("/nonexistent/pw".into()),
            sasl_user: Some("u".into()),
            ..Given::default()
        });
        assert!(e.contains("/nonexistent/pw"), "{e}");
        let e = err(Given {
            tls_ca: Some("/nonexistent/ca.pem".into()),
            ..Given::default()
        });
        assert!(
            e.contains("cannot read the TLS CA file /nonexistent/ca.pem"),
            "{e}"
        );
        let e = err(Given {
            tls_cert: Some("c.pem".into()),
            ..Given::default()
        });
        assert!(e.contains("need --tls-ca"), "{e}");
        let e = err(Given {
            acl: vec!["creator".into()],
            ..Given::default()
        });
        assert!(e.contains("no credentials are given"), "{e}");
        let e = err(Given {
            acl: vec!["bogus".into()],
            ..Given::default()
        });
        assert!(e.contains("bad ACL `bogus`"), "{e}");
        let e = err(Given {
            sasl_user: Some("a".into()),
            digest_user: Some("b".into()),
            ..Given::default()
        });
        assert!(e.contains("give one"), "{e}");
    }
}
