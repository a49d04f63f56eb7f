//! Reporting to systemd with the sd_notify protocol when zklock runs as a
//! `Type=notify` service (docs/design.md, "Environment"): STATUS while it
//! connects and waits, READY=1 once it holds the lock and has started the
//! command, STOPPING=1 when it begins to stop, WATCHDOG=1 while it holds.
//! Without `NOTIFY_SOCKET` naming a socket nothing is sent or formatted.

use std::cell::Cell;
use std::convert::Infallible;
use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use sd_notify::NotifyState;

/// The service manager a run reports to, if one listens: one of a run's
/// outputs, chosen once when it starts (run::Outputs).
pub struct Notifier {
    socket: Option<SocketAddr>,
    /// STOPPING=1 was sent.
    stopping: Cell<bool>,
}

impl Notifier {
    /// The socket `NOTIFY_SOCKET` names, read once: the environment does
    /// not change while zklock runs.
    pub fn from_env() -> Notifier {
        Notifier {
            socket: std::env::var_os("NOTIFY_SOCKET").and_then(|var| address(&var)),
            stopping: Cell::new(false),
        }
    }

    /// A notifier that sends to the socket at `path`, if any.
    #[cfg(test)]
    pub fn to(path: Option<&std::path::Path>) -> Notifier {
        Notifier {
            socket: path.map(|path| SocketAddr::from_pathname(path).expect("a socket path")),
            stopping: Cell::new(false),
        }
    }

    /// Whether a service manager listens.
    pub fn enabled(&self) -> bool {
        self.socket.is_some()
    }

    /// `STATUS=` the text `status` makes, only made when someone listens.
    pub fn status(&self, status: impl FnOnce() -> String) {
        if self.enabled() {
            self.send(&[NotifyState::Status(&status())]);
        }
    }

    /// READY=1 with what is held, once the command runs under the lock.
    pub fn ready(&self, status: impl FnOnce() -> String) {
        if self.enabled() {
            self.send(&[NotifyState::Ready, NotifyState::Status(&status())]);
        }
    }

    /// STOPPING=1: the command ended, or zklock stops it. Sent once: the
    /// lock lost is said as it happens, and the command's end then says
    /// nothing new.
    pub fn stopping(&self) {
        if self.enabled() && !self.stopping.replace(true) {
            self.send(&[NotifyState::Stopping]);
        }
    }

    /// Sends WATCHDOG=1 at half the interval systemd asks for; never
    /// resolves. Polled only while the lock holds and the command runs, so
    /// a holder that lost its lock, or whose event loop is wedged, stops
    /// feeding systemd.
    pub async fn watchdog(&self) -> Infallible {
        let every = match sd_notify::watchdog_enabled().filter(|_| self.enabled()) {
            Some(interval) if !interval.is_zero() => interval / 2,
            _ => return std::future::pending().await,
        };
        let mut ticks = tokio::time::interval(every.max(Duration::from_millis(1)));
        loop {
            ticks.tick().await;
            self.send(&[NotifyState::Watchdog]);
        }
    }

    /// One datagram, a line per state. A lost message changes nothing
    /// zklock does: systemd's own timeouts decide then.
    fn send(&self, states: &[NotifyState<'_>]) {
        let Some(socket) = &self.socket else {
            return;
        };
        let message: String = states.iter().map(|state| format!("{state}\n")).collect();
        if let Ok(sender) = UnixDatagram::unbound() {
            let _ = sender.send_to_addr(message.as_bytes(), socket);
        }
    }
}

/// The socket `NOTIFY_SOCKET` names, as sd_notify(3) reads it: a path, or
/// `@NAME` in the abstract namespace (systemd's own form for some units
/// and containers, which the sd-notify crate does not take).
fn address(variable: &OsStr) -> Option<SocketAddr> {
    match variable.as_bytes() {
        [b'/', ..] => SocketAddr::from_pathname(variable).ok(),
        [b'@', name @ ..] if !name.is_empty() => SocketAddr::from_abstract_name(name).ok(),
        // `vsock:` (a VM's host) and anything else: no one we can tell.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_socket_forms() {
        let abstract_name = address(OsStr::new("@/org/freedesktop/systemd1/notify")).unwrap();
        assert_eq!(
            abstract_name.as_abstract_name(),
            Some(&b"/org/freedesktop/systemd1/notify"[..])
        );
        let path = address(OsStr::new("/run/systemd/notify")).unwrap();
        assert_eq!(
            path.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        for unsupported in ["", "@", "vsock:2:1234", "run/notify"] {
            assert!(address(OsStr::new(unsupported)).is_none(), "{unsupported}");
        }
    }
}
