//! Settings from flags, environment and config file (`super`).

use super::*;
use crate::scratch::TempDir;
use clap::Parser;
use std::os::unix::fs::PermissionsExt;

/// What a command line gives (clap also reads `ZKLOCK_*`, set by no test).
fn given(args: &[&str]) -> Options {
    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        options: Options,
    }
    let args = std::iter::once("zklock").chain(args.iter().copied());
    Line::try_parse_from(args).unwrap().options
}

fn no_env(_: &str) -> Option<OsString> {
    None
}

fn resolve(args: &[&str], file: Option<&Loaded>) -> Result<Settings, String> {
    Settings::resolve(&given(args), file, &no_env)
}

/// A config file of `text` at `dir`/config.toml, with `mode`.
fn write(dir: &std::path::Path, text: &str, mode: u32) -> Loaded {
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    let file = config::parse(&path, text).unwrap();
    Loaded { path, file }
}

fn temp_dir(name: &str) -> TempDir {
    TempDir::new(&format!("settings-{name}"))
}

fn password(s: &Settings) -> &str {
    match &s.sasl {
        Some(Sasl::DigestMd5 { password, .. }) => password.expose(),
        _ => panic!("no DIGEST-MD5: {s:?}"),
    }
}

#[test]
fn the_packet_limit_is_4m_unless_given_and_never_below_zookeepers() {
    assert_eq!(resolve(&[], None).unwrap().max_packet, 4 << 20);
    let dir = temp_dir("jute");
    let file = write(
        &dir,
        "[ensembles.a]\nhosts = \"zk1\"\njute-maxbuffer = \"8M\"\n",
        0o600,
    );
    let s = resolve(&["-z", "@a"], Some(&file)).unwrap();
    assert_eq!(s.max_packet, 8 << 20);
    assert_eq!(s.config().max_packet, 8 << 20);
    let flag = resolve(&["-z", "@a", "--jute-maxbuffer", "16M"], Some(&file));
    assert_eq!(flag.unwrap().max_packet, 16 << 20, "the flag over the file");
    let low = resolve(&["--jute-maxbuffer", "512K"], None).unwrap_err();
    assert!(low.contains("jute-maxbuffer"), "{low}");
}

#[test]
fn nothing_given_means_the_defaults() {
    // An empty user name is none.
    for args in [&[][..], &["--sasl-user", "", "--digest-user", ""]] {
        let s = resolve(args, None).unwrap();
        assert_eq!(s.hosts.connect_string(), "127.0.0.1:2181");
        assert_eq!(s.session_timeout, Duration::from_secs(10));
        assert_eq!(s.connect_timeout, Duration::from_secs(10));
        assert!(s.tls.is_none() && s.sasl.is_none() && s.digest.is_none());
        assert_eq!(s.acl, AclPolicy::default_for(false));
        assert_eq!(s.credentials(), "no credentials");
    }
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
    let file = write(&dir, &text, 0o644);
    // The config's default ensemble when -z is not given.
    let s = resolve(&[], Some(&file)).unwrap();
    assert_eq!(s.hosts.connect_string(), "zk1:2281/apps");
    assert_eq!(s.session_timeout, Duration::from_secs(20));
    assert_eq!(s.connect_timeout, Duration::from_secs(10));
    assert_eq!(s.credentials(), "SASL DIGEST-MD5 as user backup");
    assert_eq!(password(&s), "from-file");
    assert_eq!(s.acl.describe(), "sasl:backup:cdrwa");
    // Flags (or their environment variables) win, the environment's
    // password over the config's.
    let args = [
        "-z",
        "@prod",
        "--session-timeout",
        "5s",
        "--sasl-user",
        "ops",
    ];
    let given = given(&[&args[..], &["--acl", "creator"]].concat());
    let env = |name: &str| (name == PASSWORD_ENV).then(|| OsString::from("from-env"));
    let s = Settings::resolve(&given, Some(&file), &env).unwrap();
    assert_eq!(s.session_timeout, Duration::from_secs(5));
    assert_eq!(s.credentials(), "SASL DIGEST-MD5 as user ops");
    assert_eq!(password(&s), "from-env");
    assert_eq!(s.acl.describe(), "creator");
    // Hosts given directly take nothing from the file's ensembles.
    let s = resolve(&["-z", "zk5:2181"], Some(&file)).unwrap();
    assert_eq!(s.hosts.connect_string(), "zk5:2181");
    assert!(s.sasl.is_none());
    // @name picks a section.
    let s = resolve(&["-z", "@other"], Some(&file)).unwrap();
    assert_eq!(s.hosts.connect_string(), "zk9:2181");
    let err = resolve(&["-z", "@prod"], None).unwrap_err();
    assert!(err.contains("there is none"), "{err}");
}

#[test]
fn passwords_in_open_config_files_are_refused() {
    let dir = temp_dir("open");
    let text = "[ensembles.p]\nhosts = \"h\"\ndigest-user = \"u\"\npassword = \"pw\"\n\
                [ensembles.q]\nhosts = \"h2\"\n";
    let file = write(&dir, text, 0o644);
    // Whichever ensemble is used, hosts given directly included.
    for target in ["@p", "@q", "h3:2181"] {
        let err = resolve(&["-z", target], Some(&file)).unwrap_err();
        assert!(err.contains("accessible by group or others"), "{err}");
        assert!(
            err.contains("chmod 600") && !err.contains("pw\""),
            "{target}: {err}"
        );
    }
    let file = write(&dir, text, 0o600);
    let s = resolve(&["-z", "@p"], Some(&file)).unwrap();
    assert_eq!(s.digest.as_ref().unwrap().1.expose(), "pw");
    // Credentials make the default ACL creator + world read.
    assert_eq!(s.acl.describe(), "creator,world:anyone:r");
}

#[test]
fn bad_combinations_and_files_are_usage_errors() {
    for (args, expected) in [
        (
            &["--digest-user", "u"][..],
            "digest as u: no password given",
        ),
        (
            &["--password-file", "/nonexistent/pw", "--sasl-user", "u"],
            "/nonexistent/pw",
        ),
        (
            &["--tls-ca", "/nonexistent/ca.pem"],
            "cannot read the TLS CA file /nonexistent/ca.pem",
        ),
        (&["--tls-cert", "c.pem"], "need --tls-ca"),
        (&["--acl", "creator"], "no credentials are given"),
        (&["--acl", "bogus"], "bad ACL `bogus`"),
        (&["--sasl-user", "a", "--digest-user", "b"], "give one"),
        (&["--connect-timeout", "0"], "connect timeout of 0"),
    ] {
        let err = resolve(args, None).unwrap_err();
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}
