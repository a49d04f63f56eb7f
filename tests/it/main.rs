//! Integration tests: drive the built `zklock` binary against real ZooKeeper servers.

// Diagnostics on stderr are captured by the test runner; the binary itself
// must never panic on a broken stderr, which is why it denies eprintln!.
#![allow(clippy::print_stderr)]

mod ci_job;
mod close_once;
mod closed_stderr;
mod completion;
mod conflict;
mod connect;
mod cron;
mod defaults;
mod demo;
mod exclusion;
mod faults_ensemble;
mod faults_proxy;
mod faults_server;
mod faults_util;
mod fleet;
mod frozen_holder;
mod granted_session;
mod harness;
mod harness_selftest;
mod hold;
mod hold_faults;
mod hold_formats;
mod hold_make;
mod hold_nested;
mod hold_outputs;
mod hold_release;
mod hold_runtime;
mod hold_shells;
mod hold_steps;
mod hold_stops;
mod hold_terminal;
mod holder_data;
mod holder_message;
mod interop;
mod kind_faults;
mod max_waiting;
mod messages;
mod multi_path;
mod operator;
mod partition;
mod ping;
mod protocol_runs;
mod reentrant;
mod refused_credentials;
mod release_lost;
mod round_trips;
mod run_basics;
mod secure;
mod secure_harness_selftest;
#[cfg(feature = "kerberos")]
mod secure_kerberos;
mod semaphore;
mod shared;
mod signals;
mod stall;
mod status_json;
mod supersede;
mod supersede_stale;
mod systemd;
mod terminal;
mod usage;
mod visible_wait;
mod waiter_lease;
mod zklock_killed;
