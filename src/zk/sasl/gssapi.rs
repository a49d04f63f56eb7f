//! SASL GSSAPI (Kerberos, RFC 4752) through rsasl's binding to the system's
//! GSS-API library, with the ticket cache the user already has. The server's
//! principal is `service/host`: ZooKeeper's client calls the service
//! `zookeeper.sasl.client.username` (zklock: --kerberos-service), and the
//! host is the server's host name (or --kerberos-host).
//!
//! The exchange: our initial token, then as many context tokens as Kerberos
//! needs; the server's security-layer offer, answered with "no layer" (the
//! connection never wraps its packets); then one last answer from the
//! server, which ends it.

use anyhow::{Context as _, anyhow, bail};
use rsasl::callback::{Context, Request, SessionCallback, SessionData};
use rsasl::mechanisms::gssapi::properties::{GssSecurityLayer, GssService, SecurityLayer};
use rsasl::prelude::{Mechname, MessageSent, SASLClient, SASLConfig, Session, SessionError, State};
use rsasl::property::Hostname;

use crate::zk::sasl::{SaslMechanism, SaslStep};

/// The GSSAPI client for one connection (a reconnection starts anew).
pub struct Gssapi {
    session: Session,
    principal: String,
    phase: Phase,
}

#[derive(Debug, PartialEq)]
enum Phase {
    Running,
    /// rsasl has sent its last token; the server's answer to it ends the
    /// exchange (ZooKeeper's server answers it with a null token).
    LastAnswer,
    Finished,
}

/// What rsasl asks while it runs: the principal, and which security layers
/// we accept.
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
        } else if request.is::<GssSecurityLayer>() {
            // rsasl would otherwise choose the strongest layer the server
            // offers, and our packets would then have to be wrapped in it.
            request.satisfy::<GssSecurityLayer>(&SecurityLayer::NO_SECURITY_LAYER)?;
        }
        Ok(())
    }
}

impl Gssapi {
    /// A client for the server principal `service/host`. Kerberos itself
    /// (the ticket cache, the KDC) is first used by the first step.
    pub fn new(service: &str, host: &str) -> anyhow::Result<Gssapi> {
        let principal = Principal {
            service: service.to_owned(),
            host: host.to_owned(),
        };
        let config = (SASLConfig::builder().with_defaults())
            .with_callback(principal)
            .context("cannot set up SASL GSSAPI")?;
        let gssapi = Mechname::parse(b"GSSAPI").expect("a valid mechanism name");
        let session = (SASLClient::new(config).start_suggested(&[gssapi]))
            .context("this build of rsasl has no GSSAPI")?;
        Ok(Gssapi {
            session,
            principal: format!("{service}/{host}"),
            phase: Phase::Running,
        })
    }
}

impl SaslMechanism for Gssapi {
    fn step(&mut self, token: Option<&[u8]>) -> anyhow::Result<SaslStep> {
        // Any error leaves the exchange finished: it cannot be resumed.
        match std::mem::replace(&mut self.phase, Phase::Finished) {
            Phase::Running => {}
            // Its token carries nothing to check: ZooKeeper's own client
            // does not read it either.
            Phase::LastAnswer => return Ok(SaslStep::Done),
            Phase::Finished => bail!("the SASL GSSAPI exchange has already ended"),
        }
        let mut reply = Vec::new();
        let state = (self.session.step(token, &mut reply)).map_err(|err| {
            anyhow!(
                "SASL GSSAPI (Kerberos) for the server principal {} failed: {}",
                self.principal,
                err.to_string().replace('\n', " ")
            )
        })?;
        let (phase, step) = next(state, reply);
        self.phase = phase;
        Ok(step)
    }
}

/// Where rsasl's `state` leaves the exchange, and what to do with the token
/// it wrote (`reply`). rsasl's "finished, message sent" still owes the
/// server's answer, which the connection must read before going on.
fn next(state: State, reply: Vec<u8>) -> (Phase, SaslStep) {
    match state {
        State::Running => (Phase::Running, SaslStep::Send(reply)),
        State::Finished(MessageSent::Yes) => (Phase::LastAnswer, SaslStep::Send(reply)),
        State::Finished(MessageSent::No) => (Phase::Finished, SaslStep::Done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(step: SaslStep) -> Vec<u8> {
        match step {
            SaslStep::Send(token) => token,
            SaslStep::Done => panic!("done too early"),
        }
    }

    #[test]
    fn rsasl_states_become_steps() {
        let (phase, step) = next(State::Running, b"ctx".to_vec());
        assert_eq!((phase, sent(step)), (Phase::Running, b"ctx".to_vec()));
        // An empty token is still sent: the server waits for it.
        let (phase, step) = next(State::Running, Vec::new());
        assert_eq!((phase, sent(step)), (Phase::Running, Vec::new()));
        let (phase, step) = next(State::Finished(MessageSent::Yes), b"layer".to_vec());
        assert_eq!((phase, sent(step)), (Phase::LastAnswer, b"layer".to_vec()));
        let (phase, step) = next(State::Finished(MessageSent::No), Vec::new());
        assert_eq!(phase, Phase::Finished);
        assert!(matches!(step, SaslStep::Done));
    }

    #[test]
    fn the_answer_to_the_last_token_ends_the_exchange() {
        // Setting up touches no Kerberos: no ticket is needed for this test.
        let mut client = Gssapi::new("zookeeper", "zk1.example.org").unwrap();
        assert_eq!(client.principal, "zookeeper/zk1.example.org");
        client.phase = Phase::LastAnswer;
        assert!(matches!(client.step(Some(b"")), Ok(SaslStep::Done)));
        let err = client.step(Some(b"")).err().unwrap();
        assert!(err.to_string().contains("already ended"), "{err}");
    }
}
