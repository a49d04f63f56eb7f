//! How to reach the ensemble, and as whom: one set of options, filled by
//! clap from the flags (and their `ZKLOCK_*` variables) and by serde from an
//! ensemble of the config file (its keys are the flags' names), merged field
//! by field ([`Options::or`]) and resolved into [`Settings`].

use std::path::PathBuf;
use std::str::FromStr;

use clap::Args;
use clap::builder::BoolishValueParser;
use serde::Deserialize;
use serde::de::{Deserializer, Error as _};

use crate::session::acl::AclPolicy;
use crate::session::secret::{PASSWORD_FILE_ENV, Secret};
use crate::values::{Bytes, HostList, Seconds, Target};

/// The environment variable of `--config`.
pub const CONFIG_ENV: &str = "ZKLOCK_CONFIG";

#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Options {
    /// ZooKeeper servers: comma-separated host:port list with an optional
    /// /chroot suffix, e.g. `zk1:2181,zk2:2181/apps`; or `@NAME`, an
    /// ensemble of the config file. [env: ZKLOCK_ZOOKEEPER] [default: the
    /// config file's `default` ensemble, else 127.0.0.1:2181]
    #[arg(short = 'z', long = "zookeeper", value_name = "HOSTS")]
    #[serde(deserialize_with = "host_list")]
    pub hosts: Option<Target>,

    /// Session timeout to ask the ensemble for; the lock is released at most
    /// this long after zklock dies or is cut off. [default: 10s]
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    #[serde(default, deserialize_with = "parsed")]
    pub session_timeout: Option<Seconds>,

    /// Give up (exit 69) if no session is established within DURATION.
    /// [default: 10s]
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    #[serde(default, deserialize_with = "parsed")]
    pub connect_timeout: Option<Seconds>,

    /// The largest packet accepted from a server: a longer one ends the
    /// connection before it is read. Raise it for an ensemble whose
    /// jute.maxbuffer is raised beyond it. BYTES: a number, or with K or M
    /// (KiB, MiB). [default: 4M]
    #[arg(
        long,
        value_name = "BYTES",
        env = "ZKLOCK_JUTE_MAXBUFFER",
        hide_env_values = true
    )]
    #[serde(default, deserialize_with = "parsed")]
    pub jute_maxbuffer: Option<Bytes>,

    /// The config file. [default: $XDG_CONFIG_HOME/zklock/config.toml or
    /// ~/.config/zklock/config.toml, else /etc/zklock/config.toml, if present]
    #[arg(long, value_name = "FILE", env = CONFIG_ENV, hide_env_values = true)]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Connect over TLS, verifying the servers (and their host names)
    /// against the CA certificates in FILE (PEM).
    #[arg(
        long,
        value_name = "FILE",
        env = "ZKLOCK_TLS_CA",
        hide_env_values = true
    )]
    pub tls_ca: Option<PathBuf>,

    /// Present this client certificate (PEM) for mutual TLS; the server
    /// knows us as `x509:<subject DN>`. Needs --tls-key.
    #[arg(
        long,
        value_name = "FILE",
        env = "ZKLOCK_TLS_CERT",
        hide_env_values = true
    )]
    pub tls_cert: Option<PathBuf>,

    /// The private key (PEM) of --tls-cert.
    #[arg(
        long,
        value_name = "FILE",
        env = "ZKLOCK_TLS_KEY",
        hide_env_values = true
    )]
    pub tls_key: Option<PathBuf>,

    /// Authenticate with SASL DIGEST-MD5 as USER (the server knows us as
    /// `sasl:USER`); the password comes from --password-file or
    /// ZKLOCK_PASSWORD.
    #[arg(
        long,
        value_name = "USER",
        env = "ZKLOCK_SASL_USER",
        hide_env_values = true
    )]
    pub sasl_user: Option<String>,

    /// Authenticate with the `digest` scheme as USER (zkCli's `addauth
    /// digest USER:PASSWORD`); the password comes from --password-file or
    /// ZKLOCK_PASSWORD.
    #[arg(
        long,
        value_name = "USER",
        env = "ZKLOCK_DIGEST_USER",
        hide_env_values = true
    )]
    pub digest_user: Option<String>,

    /// Read the password of --sasl-user or --digest-user from FILE (its
    /// first line). Without it: the ZKLOCK_PASSWORD environment variable.
    /// Passwords are never taken from the command line.
    #[arg(
        long,
        value_name = "FILE",
        env = PASSWORD_FILE_ENV,
        hide_env_values = true
    )]
    pub password_file: Option<PathBuf>,

    /// The password itself: ZKLOCK_PASSWORD, or a config file no one else
    /// can read.
    #[arg(skip)]
    pub password: Option<Secret>,

    /// Authenticate with Kerberos (SASL GSSAPI) from the ticket cache
    /// (`kinit`, `k5start`). Needs a zklock built with `--features kerberos`.
    /// `--kerberos=false` (or ZKLOCK_KERBEROS=0) turns off the config
    /// file's `kerberos = true`.
    #[arg(
        long,
        value_name = "BOOL",
        env = "ZKLOCK_KERBEROS",
        hide_env_values = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        hide_possible_values = true
    )]
    #[serde(default)]
    pub kerberos: Option<bool>,

    /// The service part of the servers' Kerberos principal
    /// (SERVICE/host@REALM). [default: zookeeper]
    #[arg(
        long,
        value_name = "SERVICE",
        env = "ZKLOCK_KERBEROS_SERVICE",
        hide_env_values = true
    )]
    pub kerberos_service: Option<String>,

    /// The host part of the servers' Kerberos principal. [default: the host
    /// zklock connects to]
    #[arg(
        long,
        value_name = "HOST",
        env = "ZKLOCK_KERBEROS_HOST",
        hide_env_values = true
    )]
    pub kerberos_host: Option<String>,

    /// The ACL of every node zklock creates, in zkCli's syntax
    /// SCHEME:ID:PERMS (e.g. `sasl:backup:cdrwa`, `world:anyone:r`);
    /// repeat it for several entries (ZKLOCK_ACL separates them with `;`).
    /// `creator` = all permissions for the identities we authenticate as,
    /// `open` = all permissions for everyone. Our own identity needs READ,
    /// CREATE, DELETE and WRITE. [default: `creator` plus `world:anyone:r` with
    /// credentials, else `open`]
    #[arg(
        long,
        value_name = "ACL",
        env = "ZKLOCK_ACL",
        value_delimiter = ';',
        hide_env_values = true
    )]
    #[serde(default, deserialize_with = "acl")]
    pub acl: Vec<String>,
}

// A config file's values are parsed as the flags' are, when it is read:
// a bad one is refused with the file and line, whichever ensemble is used.

fn parsed<'de, D: Deserializer<'de>, T: FromStr<Err = String>>(
    value: D,
) -> Result<Option<T>, D::Error> {
    String::deserialize(value)?
        .parse()
        .map(Some)
        .map_err(D::Error::custom)
}

/// An ensemble's `hosts`: a host list, not another `@NAME`.
fn host_list<'de, D: Deserializer<'de>>(value: D) -> Result<Option<Target>, D::Error> {
    Ok(parsed::<D, HostList>(value)?.map(Target::Hosts))
}

fn acl<'de, D: Deserializer<'de>>(value: D) -> Result<Vec<String>, D::Error> {
    let entries = Vec::<String>::deserialize(value)?;
    AclPolicy::parse_all(&entries).map_err(D::Error::custom)?;
    Ok(entries)
}
