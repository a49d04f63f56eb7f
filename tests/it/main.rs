//! Integration tests: drive the built `zklock` binary against real ZooKeeper servers.

mod conflict;
mod connect;
mod exclusion;
mod faults_ensemble;
mod faults_proxy;
mod faults_server;
mod faults_util;
mod harness;
mod harness_selftest;
mod run_basics;
mod signals;
mod terminal;
mod usage;
