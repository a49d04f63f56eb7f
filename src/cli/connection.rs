//! How to reach the ensemble, and as whom: the options every subcommand
//! that talks to ZooKeeper shares (one set, flattened into each).

use std::path::PathBuf;

use clap::Args;

use crate::session::Settings;
use crate::session::settings::Given;
use crate::values::{Seconds, Target};

/// How to reach the ensemble; shared by every subcommand that talks to it.
/// Each value comes from the flag, else its environment variable, else the
/// config file's ensemble (`-z @NAME`, or the file's `default`), else the
/// built-in default.
#[derive(Debug, Args)]
pub struct ConnectionArgs {
    /// ZooKeeper servers: comma-separated host:port list with an optional
    /// /chroot suffix, e.g. `zk1:2181,zk2:2181/apps`; or `@NAME`, an
    /// ensemble of the config file. [env: ZKLOCK_ZOOKEEPER] [default: the
    /// config file's `default` ensemble, else 127.0.0.1:2181]
    #[arg(short = 'z', long = "zookeeper", value_name = "HOSTS")]
    pub hosts: Option<Target>,

    /// Session timeout to ask the ensemble for; the lock is released at most
    /// this long after zklock dies or is cut off. [default: 10s]
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub session_timeout: Option<Seconds>,

    /// Give up (exit 69) if no session is established within DURATION.
    /// [default: 10s]
    #[arg(long, value_name = "DURATION", allow_negative_numbers = true)]
    pub connect_timeout: Option<Seconds>,

    /// The config file. [default: $XDG_CONFIG_HOME/zklock/config.toml or
    /// ~/.config/zklock/config.toml, else /etc/zklock/config.toml, if present]
    #[arg(
        long,
        value_name = "FILE",
        env = "ZKLOCK_CONFIG",
        hide_env_values = true
    )]
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
        env = "ZKLOCK_PASSWORD_FILE",
        hide_env_values = true
    )]
    pub password_file: Option<PathBuf>,

    /// Authenticate with Kerberos (SASL GSSAPI) from the ticket cache
    /// (`kinit`, `k5start`). Needs a zklock built with `--features kerberos`.
    #[arg(long, env = "ZKLOCK_KERBEROS", hide_env_values = true)]
    pub kerberos: bool,

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
    pub acl: Vec<String>,
}

impl ConnectionArgs {
    /// The connection settings: these flags over `ZKLOCK_*`, over the config
    /// file, over the defaults; a bad setting is a usage error.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        Settings::resolve(&self.given()).map_err(crate::exit::Failure::usage)
    }

    /// What the flags and their environment variables gave, for resolving.
    pub fn given(&self) -> Given {
        Given {
            target: self.hosts.clone(),
            session_timeout: self.session_timeout,
            connect_timeout: self.connect_timeout,
            config: self.config.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            sasl_user: self.sasl_user.clone(),
            digest_user: self.digest_user.clone(),
            password_file: self.password_file.clone(),
            kerberos: self.kerberos,
            kerberos_service: self.kerberos_service.clone(),
            kerberos_host: self.kerberos_host.clone(),
            acl: self.acl.clone(),
        }
    }
}
