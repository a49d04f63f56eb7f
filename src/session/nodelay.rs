//! TCP_NODELAY on the connections to ZooKeeper.
//!
//! The client library never sets TCP_NODELAY (ZooKeeper's Java client
//! does) and writes each request as soon as it is queued. Under Nagle's
//! algorithm the second request of a burst then waits in the kernel for
//! the first one's answer to bring its ACK, so a burst of the acquisition or
//! the release (docs/design.md, "Round trips") takes two round trips
//! instead of one. The library gives no access to its socket, so zklock
//! sets the option on every socket of its own once a session is
//! established. A connection the library makes later (a reconnection) is
//! without it: a burst on it is slower, never wrong. This goes when the
//! library sets the option itself.

use std::os::fd::RawFd;

/// Sets TCP_NODELAY on every TCP socket of this process; quietly does
/// nothing where it cannot (no /proc). Descriptors that are no TCP socket
/// refuse the option.
pub fn set_on_every_socket() {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok());
    for fd in fds {
        set_nodelay(fd);
    }
}

/// A raw descriptor number rather than a borrowed descriptor: another thread
/// (the client library resolves names on threads of its own) may close it
/// between /proc's listing and this call. The kernel then fails the call, or
/// sets the option on whatever socket took the number, which is harmless for
/// any socket.
fn set_nodelay(fd: RawFd) {
    let on: libc::c_int = 1;
    // SAFETY: the option value points to a c_int that outlives the call, and
    // its size is the length passed; the descriptor is only a number to the
    // kernel (see above).
    let _ = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}
