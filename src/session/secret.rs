//! Passwords: read from a file or the environment only (never argv), held
//! in a type that cannot be printed, and refused from a config file that
//! others can read.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde::Deserialize;

/// The environment variable that may hold the password itself.
pub const PASSWORD_ENV: &str = "ZKLOCK_PASSWORD";
/// The environment variable of `--password-file`.
pub const PASSWORD_FILE_ENV: &str = "ZKLOCK_PASSWORD_FILE";

/// A password. Its `Debug` hides it and it has no `Display`, so neither a
/// message nor `-v` output can show it by accident.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(hidden)")
    }
}

/// Reads a password file: its first line, without the line ending (files
/// written by `echo` end with one). Missing, unreadable, empty, or a regular
/// file that group or others may access (as ssh refuses such a key; a pipe
/// such as `<(pass show zk)` is the caller's own): an error naming the file.
pub fn read_password_file(path: &Path) -> Result<Secret, String> {
    let cannot =
        |err: std::io::Error| format!("cannot read the password file {}: {err}", path.display());
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    // The mode of the file opened, not of whatever the path names later.
    let meta = file.metadata().map_err(cannot)?;
    if meta.is_file() {
        refuse_open_mode(path, meta.permissions().mode())?;
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(cannot)?;
    let line = text.lines().next().unwrap_or("");
    if line.is_empty() {
        return Err(format!("the password file {} is empty", path.display()));
    }
    Ok(Secret(line.to_owned()))
}

/// Refuses a file holding a password that group or others may access.
pub fn check_private(path: &Path) -> Result<(), String> {
    let meta =
        std::fs::metadata(path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    refuse_open_mode(path, meta.permissions().mode())
}

fn refuse_open_mode(path: &Path, mode: u32) -> Result<(), String> {
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} holds a password but is accessible by group or others (mode {:o}); \
             run chmod 600 {}",
            path.display(),
            mode & 0o777,
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn secrets_do_not_print() {
        let secret = Secret::new("hunter2".into());
        assert_eq!(format!("{secret:?}"), "Secret(hidden)");
        assert_eq!(format!("{:?}", Some(&secret)), "Some(Secret(hidden))");
        assert_eq!(secret.expose(), "hunter2");
    }

    #[test]
    fn password_files_lose_their_line_ending() {
        let dir = crate::scratch::TempDir::new("secret");
        let file = dir.join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_password_file(&file).unwrap().expose(), "s3cret");
        std::fs::write(&file, "s3cret\r\n").unwrap();
        assert_eq!(read_password_file(&file).unwrap().expose(), "s3cret");
        std::fs::write(&file, "\n").unwrap();
        assert!(read_password_file(&file).unwrap_err().contains("is empty"));
        let missing = dir.join("missing");
        let err = read_password_file(&missing).unwrap_err();
        assert!(err.contains(&missing.display().to_string()), "{err}");
        assert!(check_private(&file).is_ok());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let err = check_private(&file).unwrap_err();
        assert!(err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o604)).unwrap();
        assert!(check_private(&file).is_err());
        // A password file that others may read is refused like the config file.
        let err = read_password_file(&file).unwrap_err();
        assert!(
            err.contains(&file.display().to_string()) && err.contains("chmod 600"),
            "{err}"
        );
    }
}
