//! SASL (opcode 102): the hook a mechanism plugs into. The session runs
//! the exchange on every connection right after the handshake, before any
//! other request, with a mechanism made afresh for that connection.

/// What a mechanism does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaslStep {
    /// Send this token to the server and step again with its answer.
    Send(Vec<u8>),
    /// The exchange is complete (the server's last answer verified).
    Done,
}

/// One SASL mechanism's client side, for one connection.
pub trait SaslMechanism {
    /// The next step, given the server's last token (`None` before the
    /// first one is sent). An error ends the connection attempt.
    fn step(&mut self, challenge: Option<&[u8]>) -> anyhow::Result<SaslStep>;
}
