//! Naming why Kerberos fails. zookeeper-client retries a connection whose
//! GSSAPI step fails (no ticket, unknown server principal) like an
//! unreachable server and only logs why; zklock takes the same first step
//! itself to say what is wrong.

use zklock::zk::sasl::SaslMechanism;
use zklock::zk::sasl::gssapi::Gssapi;

/// Why the first GSSAPI step for `service/host` fails, if it does.
pub fn diagnose(service: &str, host: &str) -> Option<String> {
    let err = Gssapi::new(service, host)
        .and_then(|mut gssapi| gssapi.step(None))
        .err()?;
    Some(format!(
        "{err:#}; check the ticket cache (klist) and --kerberos-host"
    ))
}
