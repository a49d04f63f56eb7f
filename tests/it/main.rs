//! Integration tests: drive the built `zklock` binary against real ZooKeeper servers.

mod harness;
mod harness_selftest;
