//! The library half of the zklock package: ZooKeeper's client protocol
//! (`zk`), which the `zklock` binary, its integration tests and `bench/`
//! share. zklock's command line lives in `main.rs`; nothing here knows
//! about locks.

pub mod zk;
