//! ZooKeeper's client protocol, spoken directly: the jute codec, the
//! records zklock sends and receives, and one session over one connection
//! at a time (docs/design.md, "The protocol layer"). It knows nothing about
//! locks.

pub mod answers;
pub mod burst;
pub mod client;
pub mod clock;
mod conn;
pub mod jute;
mod link;
mod members;
pub mod ops;
pub mod records;
pub mod sasl;
mod session;
pub mod watches;

#[cfg(test)]
mod tests;
