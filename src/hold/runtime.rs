//! Where a user's holds' control sockets are (docs/design.md, "Holds"):
//! `$XDG_RUNTIME_DIR/zklock`, else `zklock-UID` in the temporary directory
//! (`$TMPDIR`, else /tmp), else, when another user took that name first, a
//! `zklock-UID.RANDOM` of our own beside it. Only a directory that is ours
//! is ever used or searched: a directory, not a link, of our uid, with no
//! access for others.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The directory a new holder puts its socket in, created (mode 0700) if
/// need be; checked before the holder waits for the lock.
pub fn for_holder() -> Result<PathBuf> {
    let uid = uid();
    match xdg() {
        Some(base) => {
            let dir = base.join("zklock");
            create(&dir).context(format!("creating {}", dir.display()))?;
            if let Err(why) = check(&dir, uid) {
                bail!("{why}: refusing to use it for holds");
            }
            Ok(dir)
        }
        None => in_temp(&std::env::temp_dir(), uid),
    }
}

/// Every directory of ours where a holder of this user may listen.
pub fn searched() -> Vec<PathBuf> {
    let uid = uid();
    let candidates = match xdg() {
        Some(base) => vec![base.join("zklock")],
        None => temp_candidates(&std::env::temp_dir(), uid),
    };
    (candidates.into_iter())
        .filter(|dir| check(dir, uid).is_ok())
        .collect()
}

/// Whether `dir` is one of ours: a socket nobody listens on may then be
/// removed from it.
pub fn is_ours(dir: &Path) -> bool {
    check(dir, uid()).is_ok()
}

/// Without XDG_RUNTIME_DIR: `zklock-UID` in `temp`, or one of ours named
/// `zklock-UID.*` there, or a new one of those when the plain name is
/// someone else's.
fn in_temp(temp: &Path, uid: u32) -> Result<PathBuf> {
    let plain = temp.join(format!("zklock-{uid}"));
    // Created now, or there already: used if it is ours.
    let _ = create(&plain);
    if check(&plain, uid).is_ok() {
        return Ok(plain);
    }
    if let Some(ours) = temp_candidates(temp, uid)
        .into_iter()
        .find(|dir| check(dir, uid).is_ok())
    {
        return Ok(ours);
    }
    // A name nobody can have taken ahead of us: refused if they had.
    let private = temp.join(format!(
        "zklock-{uid}.{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .context(format!(
            "creating {} ({} is not ours)",
            private.display(),
            plain.display()
        ))?;
    if let Err(why) = check(&private, uid) {
        bail!("{why}: refusing to use it for holds");
    }
    Ok(private)
}

/// `zklock-UID` then every `zklock-UID.*` in `temp`, unchecked, sorted.
fn temp_candidates(temp: &Path, uid: u32) -> Vec<PathBuf> {
    let plain = format!("zklock-{uid}");
    let mut found: Vec<PathBuf> = std::fs::read_dir(temp)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name())
        .filter(|name| is_private_name(&name.to_string_lossy(), &plain))
        .map(|name| temp.join(name))
        .collect();
    found.sort();
    found.insert(0, temp.join(plain));
    found
}

/// `zklock-UID.SUFFIX`, the name of a directory made beside a taken
/// `zklock-UID`.
fn is_private_name(name: &str, plain: &str) -> bool {
    name.strip_prefix(plain)
        .and_then(|rest| rest.strip_prefix('.'))
        .is_some_and(|suffix| !suffix.is_empty())
}

fn create(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(err) if err.kind() != io::ErrorKind::AlreadyExists => Err(err),
        _ => Ok(()),
    }
}

/// Ours: a directory, not a link, of `uid`, with no access for others.
fn check(dir: &Path, uid: u32) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    match meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0 {
        true => Ok(()),
        false => Err(format!(
            "{} is not a directory of uid {uid} with mode 0700",
            dir.display()
        )),
    }
}

fn xdg() -> Option<PathBuf> {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|base| base.is_absolute())
}

fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_names_are_the_plain_name_and_a_suffix() {
        assert!(is_private_name("zklock-0.3f2a", "zklock-0"));
        assert!(!is_private_name("zklock-0", "zklock-0"));
        assert!(!is_private_name("zklock-0.", "zklock-0"));
        assert!(!is_private_name("zklock-01.x", "zklock-0"));
        assert!(!is_private_name("zklock-1.x", "zklock-0"));
    }

    #[test]
    fn a_taken_name_leads_to_a_private_directory_found_again() {
        let temp = crate::scratch::TempDir::new("runtime");
        let uid = uid();
        let plain = temp.join(format!("zklock-{uid}"));
        // Taken: here a file, as another user's directory would be refused.
        std::fs::write(&plain, "").unwrap();
        let first = in_temp(&temp, uid).unwrap();
        assert_ne!(first, plain);
        assert_eq!(in_temp(&temp, uid).unwrap(), first);
        let searched: Vec<PathBuf> = (temp_candidates(&temp, uid).into_iter())
            .filter(|dir| check(dir, uid).is_ok())
            .collect();
        assert_eq!(searched, vec![first]);
    }
}
