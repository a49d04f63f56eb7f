//! Where and as whom this zklock runs: its host, its user and the CI job,
//! for the data in its nodes (docs/design.md, "Holder data").

pub mod ci;

/// This host's name, as uname(2) gives it.
pub fn hostname() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The name of our real user id from the password database (cron and CI do
/// not always set LOGNAME), or the number if it has no entry.
pub fn user() -> String {
    let uid = rustix::process::getuid().as_raw();
    let mut buf = vec![0u8; 4096];
    // SAFETY: passwd is plain data; getpwuid_r writes only into `entry` and
    // `buf` (bounded by its length) and sets `found` to null or to `entry`.
    unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut entry,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        );
        if rc == 0 && !found.is_null() && !entry.pw_name.is_null() {
            return std::ffi::CStr::from_ptr(entry.pw_name)
                .to_string_lossy()
                .into_owned();
        }
    }
    format!("uid {uid}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_never_empty() {
        assert!(!super::hostname().is_empty());
        let user = super::user();
        assert!(!user.is_empty() && !user.contains('\0'), "{user:?}");
    }
}
