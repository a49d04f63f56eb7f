//! The ACL of the nodes zklock creates: zkCli's `scheme:id:perms` syntax,
//! the `creator` and `open` shorthands, the default, and the check that
//! our own identity can still queue and write under it.

use zklock::zk::records::{Acl, perms};

/// Permission bits (`ZooDefs.Perms`).
type Permission = i32;

/// `creator`: all permissions for the identities the session authenticated
/// as (ZooKeeper's `auth` scheme, `Acls::creator_all()`).
pub const CREATOR: &str = "creator";
/// `open`: all permissions for everyone (zklock's behaviour without
/// credentials).
pub const OPEN: &str = "open";

/// ZooKeeper's permissions, in zkCli's letters, in the order zkCli writes
/// them.
const PERMS: [(char, Permission, &str); 5] = [
    ('c', perms::CREATE, "CREATE"),
    ('d', perms::DELETE, "DELETE"),
    ('r', perms::READ, "READ"),
    ('w', perms::WRITE, "WRITE"),
    ('a', perms::ADMIN, "ADMIN"),
];

/// What zklock must be able to do with the ACL it gives: list a lock's
/// parent, create its node in it and delete that node again (else other
/// contenders of its identity could not queue), and write its node (marking
/// it as holding) and the `--once-per` record.
const NEEDED: [Permission; 4] = [perms::READ, perms::WRITE, perms::CREATE, perms::DELETE];

/// Parses one `--acl` entry: `scheme:id:perms`, `creator` or `open`.
pub fn parse(text: &str) -> Result<Acl, String> {
    let text = text.trim();
    match text {
        CREATOR => return Ok(entry("auth", "", perms::ALL)),
        OPEN => return Ok(Acl::open()),
        _ => {}
    }
    let bad = || {
        format!(
            "bad ACL `{text}`: expected scheme:id:perms (e.g. sasl:backup:cdrwa, \
             world:anyone:r), `creator` or `open`"
        )
    };
    // The id may itself contain colons (digest's user:hash, IPv6 addresses).
    let (scheme, rest) = text.split_once(':').ok_or_else(bad)?;
    let (id, perms) = rest.rsplit_once(':').ok_or_else(bad)?;
    if scheme.is_empty() || !scheme.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(bad());
    }
    let perms = parse_perms(perms).map_err(|why| format!("bad ACL `{text}`: {why}"))?;
    match (scheme, id) {
        ("world", "anyone") | ("auth", _) => {}
        ("world", _) => {
            return Err(format!(
                "bad ACL `{text}`: the world scheme's only id is anyone"
            ));
        }
        (_, "") => return Err(format!("bad ACL `{text}`: the {scheme} scheme needs an id")),
        ("digest", id) if !id.contains(':') => {
            return Err(format!(
                "bad ACL `{text}`: a digest id is user:base64(sha1(user:password)), as zkCli takes it"
            ));
        }
        _ => {}
    }
    Ok(entry(scheme, id, perms))
}

/// The id of a session that sent `addauth digest user:password`, as the
/// server makes it (ZooKeeper's `DigestAuthenticationProvider`) and compares
/// it with a `digest` ACL entry: `user:base64(sha1(user:password))`.
pub fn digest_id(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let sha1 = aws_lc_rs::digest::digest(
        &aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{user}:{password}").as_bytes(),
    );
    let hash = base64::engine::general_purpose::STANDARD.encode(sha1.as_ref());
    format!("{user}:{hash}")
}

fn entry(scheme: &str, id: &str, perms: Permission) -> Acl {
    Acl {
        perms,
        scheme: scheme.to_owned(),
        id: id.to_owned(),
    }
}

fn has(perms: Permission, perm: Permission) -> bool {
    perms & perm == perm
}

/// A permission's name, as ZooKeeper spells it.
fn name(perm: Permission) -> &'static str {
    (PERMS.iter())
        .find(|(_, p, _)| *p == perm)
        .map_or("?", |(_, _, name)| name)
}

/// `cdrwa` in any order and subset, as zkCli takes it.
fn parse_perms(text: &str) -> Result<Permission, String> {
    if text.is_empty() {
        return Err("no permissions given (use letters of cdrwa)".into());
    }
    text.chars().try_fold(0, |perms, c| {
        let (_, perm, _) = PERMS
            .iter()
            .find(|(letter, ..)| *letter == c)
            .ok_or_else(|| format!("unknown permission `{c}` (use letters of cdrwa)"))?;
        Ok(perms | *perm)
    })
}

/// `perms` in zkCli's letters.
fn letters(perms: Permission) -> String {
    (PERMS.iter())
        .filter(|(_, perm, _)| has(perms, *perm))
        .map(|(letter, ..)| letter)
        .collect()
}

/// The ACL zklock applies to every node it creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclPolicy {
    entries: Vec<Acl>,
    /// Given by the user (flag, environment, config), as opposed to the default.
    pub explicit: bool,
}

impl AclPolicy {
    /// The default: with credentials, all permissions for the authenticated
    /// identities and read for everyone (holders stay visible to operators);
    /// without, open as before.
    pub fn default_for(authenticated: bool) -> AclPolicy {
        let entries = if authenticated {
            vec![
                entry("auth", "", perms::ALL),
                entry("world", "anyone", perms::READ),
            ]
        } else {
            vec![entry("world", "anyone", perms::ALL)]
        };
        AclPolicy {
            entries,
            explicit: false,
        }
    }

    /// Parses the `--acl` values given; duplicates are merged by ZooKeeper,
    /// so they are kept as given.
    pub fn parse_all<S: AsRef<str>>(values: &[S]) -> Result<AclPolicy, String> {
        let entries = values.iter().map(|value| parse(value.as_ref()));
        Ok(AclPolicy {
            entries: entries.collect::<Result<_, _>>()?,
            explicit: true,
        })
    }

    /// Whether the policy grants something to the session's authenticated
    /// identities (which need credentials to exist).
    pub fn uses_creator(&self) -> bool {
        self.entries.iter().any(|e| e.scheme == "auth")
    }

    pub fn to_zk(&self) -> Vec<Acl> {
        self.entries.clone()
    }

    /// Refuses a policy under which a contender with our `identities` (as
    /// the server reports them: `(scheme, id)`, e.g. `("sasl", "backup")`,
    /// `("ip", "127.0.0.1")`) could not list the lock's parent, create its
    /// node in it or delete that node: other contenders of the same identity
    /// could not queue behind us.
    pub fn check(&self, identities: &[(String, String)]) -> Result<(), String> {
        let authenticated = identities
            .iter()
            .any(|(scheme, _)| scheme != "ip" && scheme != "world");
        let ours = |e: &Acl| match e.scheme.as_str() {
            "world" => true,
            "auth" => authenticated,
            scheme => identities.iter().any(|(s, id)| s == scheme && *id == e.id),
        };
        if self.uses_creator() && !authenticated {
            return Err(format!(
                "the ACL `{}` grants permissions to the authenticated identities, but this \
                 session has none; give credentials or another --acl",
                self.describe()
            ));
        }
        let granted = (self.entries.iter())
            .filter(|e| ours(e))
            .fold(0, |all, e| all | e.perms);
        let missing: Vec<&str> = (NEEDED.into_iter())
            .filter(|perm| !has(granted, *perm))
            .map(name)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let who: Vec<String> = identities
            .iter()
            .map(|(s, id)| format!("{s}:{id}"))
            .collect();
        Err(format!(
            "the ACL `{}` denies {} to this session's identity ({}); zklock needs READ, \
             CREATE and DELETE (or other contenders of the same identity could not queue) \
             and WRITE (to mark its node as holding and write the --once-per record)",
            self.describe(),
            missing.join(", "),
            who.join(", ")
        ))
    }

    /// The policy in zkCli's syntax, for messages.
    pub fn describe(&self) -> String {
        self.entries
            .iter()
            .map(|e| match (e.scheme.as_str(), e.perms) {
                ("auth", perms::ALL) => CREATOR.to_owned(),
                (scheme, perms) => format!("{scheme}:{}:{}", e.id, letters(perms)),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(s, i)| (s.to_string(), i.to_string()))
            .collect()
    }

    #[test]
    fn parses_zkcli_syntax_and_shorthands() {
        let (all, read) = (perms::ALL, perms::READ);
        let cdr = perms::CREATE | perms::DELETE | read;
        for (text, scheme, id, perms) in [
            ("sasl:backup:cdrwa", "sasl", "backup", all),
            ("world:anyone:r", "world", "anyone", read),
            ("digest:alice:Xy+z/0=:rcd", "digest", "alice:Xy+z/0=", cdr),
            ("x509:CN=client,O=Test:cdr", "x509", "CN=client,O=Test", cdr),
            ("ip:::1:r", "ip", "::1", read),
            ("creator", "auth", "", all),
            ("open", "world", "anyone", all),
            ("auth::cdr", "auth", "", cdr),
        ] {
            assert_eq!(parse(text).unwrap(), entry(scheme, id, perms), "{text}");
        }
    }

    #[test]
    fn refuses_malformed_entries_with_a_reason() {
        for (bad, why) in [
            ("sasl", "expected scheme:id:perms"),
            ("sasl:backup", "expected scheme:id:perms"),
            ("sasl:backup:", "no permissions"),
            ("sasl:backup:rwx", "unknown permission `x`"),
            ("world:everyone:r", "only id is anyone"),
            ("sasl::r", "needs an id"),
            ("digest:alice:r", "user:base64"),
            (":x:r", "expected scheme:id:perms"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn defaults_depend_on_credentials() {
        assert_eq!(
            AclPolicy::default_for(false).describe(),
            "world:anyone:cdrwa"
        );
        assert_eq!(
            AclPolicy::default_for(true).describe(),
            "creator,world:anyone:r"
        );
        assert!(!AclPolicy::default_for(true).explicit);
        let zk = AclPolicy::default_for(true).to_zk();
        assert_eq!(zk[0].scheme, "auth");
        assert_eq!(zk[0].perms, perms::ALL);
        assert_eq!(zk[1].perms, perms::READ);
    }

    #[test]
    fn check_needs_read_create_delete_for_our_identity() {
        let sasl = ids(&[("ip", "127.0.0.1"), ("sasl", "backup")]);
        let anon = ids(&[("ip", "127.0.0.1")]);
        // Permissions add up over the entries that match us.
        for (acl, identities) in [
            (&["creator"][..], &sasl),
            (&["open"], &anon),
            (&["sasl:backup:cdrwa", "world:anyone:r"], &sasl),
            (&["sasl:backup:cdw", "world:anyone:r"], &sasl),
            (&["ip:127.0.0.1:rwcd"], &anon),
        ] {
            let policy = AclPolicy::parse_all(acl).unwrap();
            assert!(policy.check(identities).is_ok(), "{acl:?}");
        }
        // Without WRITE the acquisition's write and the run record fail.
        for (acl, identities, why) in [
            (
                &["sasl:other:cdrwa", "world:anyone:r"][..],
                &sasl,
                "denies WRITE, CREATE, DELETE to this session's identity (ip:127.0.0.1, sasl:backup)",
            ),
            (&["sasl:backup:cdwa"], &sasl, "denies READ to"),
            (&["sasl:backup:cdra"], &sasl, "denies WRITE to"),
            (
                &["sasl:backup:cdr", "world:anyone:r"],
                &sasl,
                "denies WRITE to",
            ),
            (&["creator"], &anon, "has none"),
        ] {
            let err = AclPolicy::parse_all(acl)
                .unwrap()
                .check(identities)
                .unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        assert!(AclPolicy::default_for(true).check(&sasl).is_ok());
        assert!(AclPolicy::default_for(false).check(&anon).is_ok());
    }

    #[test]
    fn digest_ids_are_computed_as_the_server_does() {
        // The example of ZooKeeper's administrator guide (super:test), and
        // `echo -n alice:pw | openssl dgst -binary -sha1 | base64`.
        assert_eq!(
            digest_id("super", "test"),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
        assert_eq!(
            digest_id("alice", "pw"),
            "alice:V55/p2T0OpjQ+low3NVAH4aLvm0="
        );
    }

    /// Several digest users, each with all permissions, share one ACL
    /// (docs/security.md): each of them may queue under it.
    #[test]
    fn check_matches_digest_entries_by_user_and_hash() {
        let (alice, bob) = (digest_id("alice", "a-pw"), digest_id("bob", "b-pw"));
        let acl = [
            format!("digest:{alice}:cdrwa"),
            format!("digest:{bob}:cdrwa"),
            "world:anyone:r".to_owned(),
        ];
        let policy = AclPolicy::parse_all(&acl).unwrap();
        for id in [&alice, &bob] {
            let identities = ids(&[("ip", "127.0.0.1"), ("digest", id)]);
            assert!(policy.check(&identities).is_ok(), "{id}");
        }
        // A wrong password is another id: refused.
        let wrong = ids(&[("digest", &digest_id("alice", "not-a-pw"))]);
        let err = policy.check(&wrong).unwrap_err();
        assert!(err.contains("denies WRITE, CREATE, DELETE"), "{err}");
    }
}
