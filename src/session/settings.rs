//! The connection settings every subcommand shares, resolved once from the
//! [`Options`] given (flag > `ZKLOCK_*` environment > config file), with the
//! built-in defaults, and refused when they cannot work.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use zklock::zk;
use zklock::zk::client::{DEFAULT_MAX_PACKET, SaslFactory};
use zklock::zk::sasl::SaslMechanism;
use zklock::zk::sasl::digest_md5::DigestMd5;

use crate::exit::Failure;
use crate::session::acl::AclPolicy;
use crate::session::config::{self, Loaded};
#[cfg(feature = "kerberos")]
use crate::session::host_name;
use crate::session::options::{CONFIG_ENV, Options};
use crate::session::secret::{self, PASSWORD_ENV, PASSWORD_FILE_ENV, Secret};
use crate::session::tls::{self, Tls};
use crate::session::{connection_timeout_for, servers};
use crate::values::{HostList, Seconds, Target};

/// Where zklock connects when nothing says otherwise.
const DEFAULT_HOSTS: &str = "127.0.0.1:2181";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// ZooKeeper's default `jute.maxbuffer` (1 MiB - 1): the least
/// `--jute-maxbuffer` may be.
const ZOOKEEPER_MAX_BUFFER: usize = 0xfffff;
const DEFAULT_KERBEROS_SERVICE: &str = "zookeeper";

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
    /// The largest packet accepted from a server.
    pub max_packet: usize,
    pub tls: Option<Tls>,
    pub sasl: Option<Sasl>,
    /// `addauth digest user:password`, sent on every connection.
    pub digest: Option<(String, Secret)>,
    pub acl: AclPolicy,
    /// See [`Settings::passed_on`].
    passed_on: Vec<(&'static str, String)>,
}

impl Settings {
    /// Resolves `given` (merged with the environment and the config file
    /// `loaded`) into settings, with the defaults; refuses what is wrong.
    pub fn resolve(
        given: &Options,
        loaded: Option<&Loaded>,
        env: &dyn Fn(&str) -> Option<OsString>,
    ) -> Result<Settings, String> {
        let options = given.merged(loaded, env)?;
        let hosts = match options.hosts {
            Some(Target::Hosts(hosts)) => hosts,
            // An ensemble's `hosts` is required, and read as a host list.
            Some(Target::Named(_)) => unreachable!("an ensemble's hosts name another"),
            None => DEFAULT_HOSTS.parse().expect("a valid default"),
        };
        let timeout = |given: Option<Seconds>| given.map_or(DEFAULT_TIMEOUT, |s| s.0);
        let connect_timeout = timeout(options.connect_timeout);
        if connect_timeout.is_zero() {
            return Err("a connect timeout of 0 would give up before connecting; \
                        give --connect-timeout (or connect-timeout in the config file) \
                        a positive duration such as 10s"
                .into());
        }
        let max_packet = options.jute_maxbuffer.map_or(DEFAULT_MAX_PACKET, |b| b.0);
        if max_packet < ZOOKEEPER_MAX_BUFFER {
            return Err(format!(
                "--jute-maxbuffer {max_packet} is below ZooKeeper's own default \
                 ({ZOOKEEPER_MAX_BUFFER} bytes): answers a server may send would be refused"
            ));
        }
        let tls = Tls::read(options.tls_ca, options.tls_cert, options.tls_key)?;

        let (sasl_user, digest_user) = (options.sasl_user, options.digest_user);
        let kerberos = options.kerberos == Some(true);
        if sasl_user.is_some() && kerberos {
            return Err(
                "--sasl-user (DIGEST-MD5) and --kerberos are two SASL mechanisms; give one".into(),
            );
        }
        if sasl_user.is_some() && digest_user.is_some() {
            return Err("--sasl-user and --digest-user would share one password; give one".into());
        }
        let password = || match (&options.password_file, &options.password) {
            (Some(file), _) => secret::read_password_file(file),
            (None, Some(password)) => Ok(password.clone()),
            // Never tell a user to set the variable they did set.
            (None, None) if env(PASSWORD_ENV).is_some() => Err(format!(
                "{PASSWORD_ENV} is set but empty (and no --password-file or \
                 password-file in the config file is given)"
            )),
            (None, None) => Err(format!(
                "no password given: use --password-file FILE, {PASSWORD_ENV}, or \
                 password-file in the config file"
            )),
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
                service: (options.kerberos_service.clone())
                    .unwrap_or_else(|| DEFAULT_KERBEROS_SERVICE.to_owned()),
                host: options.kerberos_host.clone(),
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

        let mutual_tls = tls.as_ref().is_some_and(|tls| tls.identity.is_some());
        let authenticated = sasl.is_some() || digest.is_some() || mutual_tls;
        let acl = match options.acl.is_empty() {
            true => AclPolicy::default_for(authenticated),
            false => AclPolicy::parse_all(&options.acl)?,
        };
        if acl.uses_creator() && !authenticated {
            return Err(format!(
                "--acl {} grants permissions to the authenticated identities, but no \
                 credentials are given (--sasl-user, --digest-user, --kerberos or --tls-cert)",
                acl.describe()
            ));
        }
        let absolute = |file: &PathBuf| std::path::absolute(file).unwrap_or_else(|_| file.clone());
        let password_file = given.password_file.as_ref();
        let password_file = password_file.filter(|_| sasl.is_some() || digest.is_some());
        let config_file = loaded.filter(|_| given.config.is_some()).map(|l| &l.path);
        let passed_on = [
            (PASSWORD_FILE_ENV, password_file),
            (CONFIG_ENV, config_file),
        ];
        let passed_on = (passed_on.into_iter())
            .filter_map(|(name, file)| Some((name, absolute(file?).to_str()?.to_owned())))
            .collect();
        Ok(Settings {
            hosts,
            session_timeout: timeout(options.session_timeout),
            connect_timeout,
            max_packet,
            tls,
            sasl,
            digest,
            acl,
            passed_on,
        })
    }

    /// What the command's environment needs so that a nested zklock
    /// authenticates as we did, without writing the password anywhere new:
    /// the `--password-file` and `--config` files given, made absolute (the
    /// `ZKLOCK_*` variables set are inherited as they are).
    pub fn passed_on(&self) -> Vec<(&'static str, String)> {
        self.passed_on.clone()
    }

    /// The client's configuration: our hosts and chroot, TLS, and the
    /// credentials sent on every connection (digest auth in the write of
    /// the handshake; SASL before anything else).
    pub fn config(&self) -> zk::client::Config {
        let hosts = servers(self.hosts.connect_string()).map(str::to_owned);
        let tls = (self.tls.as_ref())
            .map(|tls| tls::client_config(tls).expect("checked by Tls::read"))
            .map(Arc::new);
        let auth = (self.digest.iter())
            .map(|(user, password)| {
                let auth = format!("{user}:{}", password.expose());
                ("digest".to_owned(), auth.into_bytes())
            })
            .collect();
        zk::client::Config {
            hosts: hosts.collect(),
            chroot: self.hosts.chroot().unwrap_or_default().to_owned(),
            session_timeout: self.session_timeout,
            connect_timeout: self.connect_timeout,
            attempt_timeout: connection_timeout_for(self.session_timeout),
            tls,
            auth,
            sasl: self.sasl_factory(),
            max_packet: self.max_packet,
        }
    }

    /// Makes the SASL mechanism of each new connection.
    fn sasl_factory(&self) -> Option<SaslFactory> {
        match self.sasl.clone()? {
            Sasl::DigestMd5 { user, password } => Some(Arc::new(move |_: &str| {
                let mechanism = DigestMd5::new(&user, password.expose());
                Ok(Box::new(mechanism) as Box<dyn SaslMechanism + Send>)
            })),
            #[cfg(feature = "kerberos")]
            Sasl::Gssapi { service, host } => Some(Arc::new(move |member: &str| {
                // The principal of the member this connection is to, as
                // ZooKeeper's own client names it, unless one is given.
                let host = host.as_deref().unwrap_or_else(|| host_name(member));
                let mechanism = zk::sasl::gssapi::Gssapi::new(&service, host)?;
                Ok(Box::new(mechanism) as Box<dyn SaslMechanism + Send>)
            })),
            #[cfg(not(feature = "kerberos"))]
            Sasl::Gssapi { .. } => unreachable!("refused by resolve without the feature"),
        }
    }

    /// The error for a `-z` chroot that does not exist (a usage error).
    pub fn missing_chroot(&self) -> anyhow::Error {
        let chroot = self.hosts.chroot().unwrap_or("/");
        let hosts = self.hosts.connect_string();
        Failure::usage(format!(
            "the chroot {chroot} given with -z does not exist at {hosts}"
        ))
    }

    pub fn uses_kerberos(&self) -> bool {
        matches!(self.sasl, Some(Sasl::Gssapi { .. }))
    }

    /// Why Kerberos cannot authenticate us to the first server, if it cannot.
    pub fn kerberos_problem(&self) -> Option<String> {
        #[cfg(feature = "kerberos")]
        if let Some(Sasl::Gssapi { service, host }) = &self.sasl {
            let first = servers(self.hosts.connect_string()).next()?;
            let host = host.as_deref().unwrap_or(host_name(first));
            return crate::session::kerberos_check::diagnose(service, host);
        }
        None
    }

    /// Who we authenticate as, for messages (never the password).
    pub fn credentials(&self) -> String {
        let sasl = self.sasl.as_ref().map(|sasl| match sasl {
            Sasl::DigestMd5 { user, .. } => format!("SASL DIGEST-MD5 as user {user}"),
            Sasl::Gssapi { .. } => "SASL GSSAPI (Kerberos)".to_owned(),
        });
        let digest = (self.digest.as_ref()).map(|(user, _)| format!("digest as user {user}"));
        let identity = self.tls.as_ref().and_then(|tls| tls.identity.as_ref());
        let tls = identity.map(|id| format!("TLS client certificate {}", id.cert_file.display()));
        let parts: Vec<String> = [sasl, digest, tls].into_iter().flatten().collect();
        match parts.is_empty() {
            true => "no credentials".to_owned(),
            false => parts.join(" and "),
        }
    }
}

impl Options {
    /// The connection settings: these flags over `ZKLOCK_*`, over the config
    /// file, over the defaults; a bad setting is a usage error.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let loaded = config::load(self.config.as_deref()).map_err(Failure::usage)?;
        let env = |name: &str| std::env::var_os(name);
        Settings::resolve(self, loaded.as_ref(), &env).map_err(Failure::usage)
    }
}

#[cfg(test)]
mod tests;
