//! Naming why Kerberos fails when connecting takes too long (a server that
//! does not answer SASL, say): zklock takes the first GSSAPI step itself
//! to say what is wrong (no ticket, unknown server principal).

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
