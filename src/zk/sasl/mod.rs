//! The client side of SASL as ZooKeeper carries it: each token travels in a
//! SASL request (opcode 102), and each answer's token is the next challenge.
//! The mechanisms here are pure state machines, without I/O: the connection
//! sends what they say and feeds them what the server answers.

pub mod digest_md5;
#[cfg(feature = "kerberos")]
pub mod gssapi;

/// What the connection does after one [`SaslMechanism::step`].
pub enum SaslStep {
    /// Send this token (possibly empty) in a SASL request, and give the
    /// token of its answer (empty for a null one) to the next `step`.
    Send(Vec<u8>),
    /// Authentication has finished: send no more SASL requests.
    Done,
}

/// One SASL mechanism on the client side of one connection. The first call
/// is `step(None)`, for the initial response; every later call carries the
/// token of the server's answer to the last `Send`. An error ends the
/// exchange: a mechanism that failed, or that is done, refuses more steps.
pub trait SaslMechanism {
    fn step(&mut self, challenge: Option<&[u8]>) -> anyhow::Result<SaslStep>;
}
