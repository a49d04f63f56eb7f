//! Values parsed from the command line: durations, lock paths, host lists.
//! Each parser gives the one-line reason a value is refused.

mod size;
mod time;

use std::str::FromStr;

pub use size::Bytes;
pub use time::{Precision, Seconds, human_duration, rfc3339, server_time};

/// An absolute ZooKeeper path that may carry a lock: no empty, `.` or `..`
/// component, no trailing slash, no control characters, not the root and not
/// under the reserved `/zookeeper`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockPath(String);

impl LockPath {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for LockPath {
    type Err = String;

    fn from_str(path: &str) -> Result<Self, Self::Err> {
        validate_znode_path(path)?;
        if path == "/" {
            return Err("the root `/` cannot be a lock path; use e.g. /locks/NAME".into());
        }
        not_reserved(path)?;
        Ok(LockPath(path.to_owned()))
    }
}

/// Any valid absolute ZooKeeper path, the root included (where to look).
/// A trailing slash is dropped (`/locks/` is `/locks`), as `ls` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZnodePath(String);

impl ZnodePath {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ZnodePath {
    type Err = String;

    fn from_str(path: &str) -> Result<Self, Self::Err> {
        let path = match path.strip_suffix('/') {
            Some(dir) if !dir.is_empty() && !dir.ends_with('/') => dir,
            _ => path,
        };
        validate_znode_path(path)?;
        Ok(ZnodePath(path.to_owned()))
    }
}

/// ZooKeeper's own path rules (PathUtils.validatePath), as a usage error
/// instead of a server round trip.
fn validate_znode_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!(
            "`{path}` is not an absolute path (it must start with /)"
        ));
    }
    if path.len() > 1 && path.ends_with('/') {
        return Err(format!("`{path}` ends with /"));
    }
    if let Some(bad) = path.chars().find(|&c| is_forbidden_char(c)) {
        let path = path.escape_debug();
        return Err(format!("`{path}` contains the forbidden character {bad:?}"));
    }
    if path.len() > 1 {
        for component in path[1..].split('/') {
            match component {
                "" => return Err(format!("`{path}` has an empty component (//)")),
                "." | ".." => return Err(format!("`{path}` has a `{component}` component")),
                _ => {}
            }
        }
    }
    Ok(())
}

fn not_reserved(path: &str) -> Result<(), String> {
    match path == "/zookeeper" || path.starts_with("/zookeeper/") {
        true => Err(format!(
            "`{path}` is under /zookeeper, which ZooKeeper reserves"
        )),
        false => Ok(()),
    }
}

/// ZooKeeper checks UTF-16 code units: U+D800-U+F8FF (surrogates, which
/// cannot occur in a Rust string, and private use) and U+FFF0-U+FFFF are
/// refused, and so is every character outside the Basic Multilingual Plane
/// (emoji, ...), which Java stores as a surrogate pair.
fn is_forbidden_char(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..)
}

/// A validated connect string: `host[:port][,host[:port]...][/chroot]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    /// The connect string, ports filled in.
    connect_string: String,
    chroot: Option<String>,
}

impl HostList {
    pub fn connect_string(&self) -> &str {
        &self.connect_string
    }

    pub fn chroot(&self) -> Option<&str> {
        self.chroot.as_deref()
    }
}

impl FromStr for HostList {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (hosts, chroot) = text.split_at(text.find('/').unwrap_or(text.len()));
        let chroot = match chroot {
            "" | "/" => None,
            path => {
                validate_znode_path(path)
                    .and_then(|()| not_reserved(path))
                    .map_err(|err| format!("bad chroot: {err}"))?;
                Some(path.to_owned())
            }
        };
        if hosts.trim().is_empty() {
            return Err("no host given; expected host:port[,host:port...][/chroot]".into());
        }
        let hosts: Vec<String> = hosts
            .split(',')
            .map(|host| normalize_host(host.trim()))
            .collect::<Result<_, _>>()?;
        let connect_string = hosts.join(",") + chroot.as_deref().unwrap_or("");
        Ok(HostList {
            connect_string,
            chroot,
        })
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; a missing port means 2181.
fn normalize_host(host: &str) -> Result<String, String> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (v6, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("`{host}`: unclosed ["))?;
        let port = (!after.is_empty())
            .then(|| after.strip_prefix(':'))
            .map(|port| port.ok_or_else(|| format!("`{host}`: expected :port after ]")))
            .transpose()?;
        (format!("[{v6}]"), port)
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        }
    };
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._[]:".contains(c))
    };
    if !valid_name(&name) || name.contains(':') && !name.starts_with('[') {
        return Err(format!("`{host}` is not a valid host; expected host:port"));
    }
    let port = match port {
        None => 2181,
        Some(port) => match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(format!("`{host}` has a bad port; expected 1-65535")),
        },
    };
    Ok(format!("{name}:{port}"))
}

/// What `-z` names: hosts, or `@NAME`, an ensemble of the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Hosts(HostList),
    Named(String),
}

impl FromStr for Target {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.strip_prefix('@') {
            Some("") => Err("`@` needs an ensemble name from the config file, e.g. @prod".into()),
            Some(name) => Ok(Target::Named(name.to_owned())),
            None => text.parse().map(Target::Hosts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_paths() {
        for good in [
            "/a",
            "/locks/nightly-backup",
            "/a/b/c",
            "/zookeeperish",
            "/ä/ü",
        ] {
            assert!(good.parse::<LockPath>().is_ok(), "{good} refused");
        }
        for bad in [
            "",
            "a",
            "locks/x",
            "/",
            "/a/",
            "/a//b",
            "/a/./b",
            "/a/..",
            "/.",
            "/a\nb",
            "/a\u{0}",
            "/zookeeper",
            "/zookeeper/quota",
            "/a\u{7f}",
            "/lock-\u{1f600}",
            "/a\u{10000}",
            "/a\u{e000}",
            "/a\u{f8ff}",
            "/a\u{fff0}",
            "/a\u{ffff}",
        ] {
            assert!(bad.parse::<LockPath>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn znode_paths_drop_one_trailing_slash() {
        let parse = |s: &str| s.parse::<ZnodePath>().map(|p| p.as_str().to_owned());
        assert_eq!(parse("/"), Ok("/".to_owned()));
        assert_eq!(parse("/locks/"), Ok("/locks".to_owned()));
        assert_eq!(parse("/locks/x"), Ok("/locks/x".to_owned()));
        for bad in ["//", "/locks//", "locks/", "/a//b"] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn host_lists() {
        let parse = |s: &str| s.parse::<HostList>();
        let one = parse("127.0.0.1:2181").unwrap();
        assert_eq!(one.connect_string(), "127.0.0.1:2181");
        assert_eq!(one.chroot(), None);
        let many = parse("zk1:2181, zk2,zk3:2888/apps/x").unwrap();
        assert_eq!(many.connect_string(), "zk1:2181,zk2:2181,zk3:2888/apps/x");
        assert_eq!(many.chroot(), Some("/apps/x"));
        assert_eq!(parse("[::1]:2181").unwrap().connect_string(), "[::1]:2181");
        assert_eq!(parse("[::1]").unwrap().connect_string(), "[::1]:2181");
        assert_eq!(parse("zk1:2181/").unwrap().chroot(), None);
        for bad in [
            "",
            ",",
            "zk1:",
            "zk1:0",
            "zk1:99999",
            "zk1:abc",
            "zk1,,zk2",
            "zk1:2181/a/",
            "zk 1",
            "[::1",
            "::1",
            "zk1/zookeeper",
            "zk1/zookeeper/quota",
            "zk1/a\u{1f600}",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
