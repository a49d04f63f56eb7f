//! Regenerate with `ZKLOCK_REGENERATE=1 cargo test --bin zklock generated_files`.

use std::path::Path;

use super::*;

fn check(file: &str, contents: &[u8]) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("completions")
        .join(file);
    if std::env::var_os("ZKLOCK_REGENERATE").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == contents,
        "{} is out of date; run ZKLOCK_REGENERATE=1 cargo test --bin zklock generated_files",
        path.display()
    );
}

#[test]
fn bash_completes_the_command_after_double_dash() {
    let script = String::from_utf8(completion_script(Shell::Bash)).unwrap();
    assert_eq!(script.matches(BASH_RUN_CASE).count(), 1);
    assert!(script.contains(&format!("{BASH_RUN_CASE}{BASH_AFTER_DOUBLE_DASH}")));
}

#[test]
fn completions_are_current() {
    for (shell, file) in [
        (Shell::Bash, "zklock.bash"),
        (Shell::Zsh, "_zklock"),
        (Shell::Fish, "zklock.fish"),
    ] {
        check(file, &completion_script(shell));
    }
}

#[test]
fn man_pages_are_current() {
    check("zklock.1", &man_page(None));
    for name in SUBCOMMANDS {
        let page = man_page(Some(name));
        let title = format!("zklock-{name}");
        assert!(
            String::from_utf8_lossy(&page).contains(&format!(".TH {title}")),
            "{title}"
        );
        check(&format!("{title}.1"), &page);
    }
}

/// The pages carry the reference, and name only pages that exist.
#[test]
fn man_pages_carry_the_reference() {
    let page = |name: Option<&str>| String::from_utf8(man_page(name)).unwrap();
    let root = page(None);
    assert!(!root.contains("help(1)"), "zklock.1 names zklock-help(1)");
    for name in SUBCOMMANDS {
        assert!(root.contains(&format!("zklock\\-{name}(1)")), "{name}");
    }
    let sections = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(".SH "))
            .map(|s| s.trim_matches('"').to_owned())
            .collect()
    };
    for (name, expected) in [
        (None, "EXIT STATUS|ENVIRONMENT|FILES|SEE ALSO"),
        (Some("run"), "METRICS|EXIT STATUS|ENVIRONMENT|FILES"),
        (Some("status"), "JSON OUTPUT|EXIT STATUS|ENVIRONMENT|FILES"),
        (Some("list"), "JSON OUTPUT|EXIT STATUS|ENVIRONMENT|FILES"),
        (Some("break"), "EXIT STATUS|ENVIRONMENT|FILES"),
        (Some("hold"), "EXIT STATUS|ENVIRONMENT|FILES"),
        (Some("release"), "EXIT STATUS|SEE ALSO"),
        (Some("man"), "SEE ALSO"),
    ] {
        let found = sections(&page(name));
        for section in expected.split('|') {
            assert!(found.iter().any(|s| s == section), "{name:?}: {found:?}");
        }
        assert!(!found.iter().any(|s| s == "EXTRA"), "{name:?}: {found:?}");
    }
    let run = page(Some("run"));
    for needle in [
        "zklock_last_success_timestamp_seconds",
        "ZKLOCK_FENCING_TOKEN",
        "ZKLOCK_PASSWORD ",
        "ZKLOCK_ZOOKEEPER",
        "128+N",
    ] {
        assert!(run.contains(needle), "{needle}");
    }
    let status = page(Some("status"));
    for field in [
        "fencing_token",
        "session_id",
        "held_seconds",
        "last_success",
    ] {
        assert!(status.contains(field), "{field}");
    }
}

/// The config file shown in FILES is one zklock reads, every key known,
/// and the one docs/security.md shows.
#[test]
fn the_config_file_reference_parses() {
    let example: String = reference::CONFIG_FILE
        .lines()
        .skip_while(|l| !l.starts_with("  default"))
        .take_while(|l| l.is_empty() || l.starts_with("  "))
        .map(|l| format!("{}\n", l.trim()))
        .collect();
    let security = include_str!("../../docs/security.md");
    assert!(
        security.contains(example.trim()),
        "docs/security.md's config example differs"
    );
    let file = crate::session::config::parse(Path::new("reference"), &example).unwrap();
    assert_eq!(file.default.as_deref(), Some("prod"));
    // Every key of an ensemble is shown in one of the two: naming the
    // fields makes a new key fail to compile here until it is shown.
    for ensemble in file.ensembles.values() {
        let crate::session::Options {
            hosts,
            session_timeout,
            connect_timeout,
            jute_maxbuffer,
            config: _,
            tls_ca,
            tls_cert,
            tls_key,
            sasl_user,
            digest_user,
            kerberos: _,
            kerberos_service,
            kerberos_host,
            password_file,
            password,
            acl,
        } = ensemble;
        assert!(hosts.is_some());
        let prod = [
            session_timeout.is_some(),
            connect_timeout.is_some(),
            tls_ca.is_some(),
            tls_cert.is_some(),
            tls_key.is_some(),
            sasl_user.is_some(),
            password_file.is_some(),
            !acl.is_empty(),
        ];
        let dev = [
            digest_user.is_some(),
            password.is_some(),
            example.contains("\nkerberos = "),
            kerberos_service.is_some(),
            kerberos_host.is_some(),
            jute_maxbuffer.is_some(),
        ];
        assert!(prod.iter().all(|&k| k) || dev.iter().all(|&k| k));
    }
    assert_eq!(file.ensembles.len(), 2);
}
