//! Naming why Kerberos fails. zookeeper-client retries a connection whose
//! GSSAPI step fails (no ticket, unknown server principal) like an
//! unreachable server and only logs why; zklock takes the same first step
//! itself to say what is wrong.

use rsasl::callback::{Context, Request, SessionCallback, SessionData};
use rsasl::mechanisms::gssapi::properties::GssService;
use rsasl::prelude::*;
use rsasl::property::Hostname;

struct Principal {
    service: String,
    host: String,
}

impl SessionCallback for Principal {
    fn callback(
        &self,
        _session_data: &SessionData,
        _context: &Context,
        request: &mut Request<'_>,
    ) -> Result<(), SessionError> {
        if request.is::<Hostname>() {
            request.satisfy::<Hostname>(&self.host)?;
        } else if request.is::<GssService>() {
            request.satisfy::<GssService>(&self.service)?;
        }
        Ok(())
    }
}

/// Why the first GSSAPI step for `service/host` fails, if it does.
pub fn diagnose(service: &str, host: &str) -> Option<String> {
    let principal = Principal {
        service: service.to_owned(),
        host: host.to_owned(),
    };
    let config = SASLConfig::builder()
        .with_defaults()
        .with_callback(principal)
        .ok()?;
    let mechanism = Mechname::parse(b"GSSAPI").ok()?;
    let mut session = SASLClient::new(config).start_suggested(&[mechanism]).ok()?;
    let mut token = Vec::new();
    match session.step(None, &mut token) {
        Ok(_) => None,
        Err(err) => Some(format!(
            "SASL GSSAPI (Kerberos) for the server principal {service}/{host} failed: {}; \
             check the ticket cache (klist) and --kerberos-host",
            err.to_string().replace('\n', " ")
        )),
    }
}
