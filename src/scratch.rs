//! A unit test's own directory under the temporary directory, removed when
//! dropped, a failed assertion included: a test leaves nothing behind.

use std::path::{Path, PathBuf};

pub struct TempDir(PathBuf);

impl TempDir {
    /// `zklock-NAME-PID` under the temporary directory, made afresh.
    pub fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("zklock-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
