//! The protocol floor for `bench/run`: the least any lock wrapper on this
//! client crate can do. No signal handling, no process group, no node data,
//! no lease watch, no error recovery: whatever zklock measures above this is
//! the price of its guarantees (or a bug).
//!
//! `bench-floor HOSTS PARENT` (scenario 1, one uncontended run): connect,
//! create an EPHEMERAL_SEQUENTIAL node (create2) under the existing PARENT,
//! list PARENT, delete the node, close the session and wait until the
//! server has confirmed the close, then run `true`.
//!
//! `bench-floor HOSTS PARENT CMD [ARGS...]` (scenario 2, hand-off): the
//! bare lock recipe. Create the node; until no node precedes ours, watch the
//! nearest preceding one (a data watch) and list again when it goes; run
//! CMD; delete the node, close the session.

// A benchmark tool, not zklock: plain eprintln! is fine here.
#![allow(clippy::print_stderr)]

use std::process::{Command, ExitCode};
use std::time::Duration;

use zookeeper_client as zk;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [hosts, parent] => uncontended(hosts, parent).await,
        [hosts, parent, command @ ..] => queued(hosts, parent, command).await,
        _ => {
            eprintln!("usage: bench-floor HOSTS PARENT [CMD [ARGS...]]");
            return ExitCode::from(64);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bench-floor: {err}");
            ExitCode::from(70)
        }
    }
}

async fn connect(hosts: &str) -> Result<zk::Client> {
    // The same session timeout zklock asks for by default, so the server
    // does the same bookkeeping for both.
    let client = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(hosts)
        .await?;
    Ok(client)
}

async fn create(client: &zk::Client, parent: &str) -> Result<String> {
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (_stat, seq) = client
        .create(&format!("{parent}/floor-"), &[], &options)
        .await?;
    Ok(format!("floor-{seq}"))
}

/// Dropping the last handle sends CloseSession; Closed means the server
/// answered it, the point from which the next waiter could proceed.
async fn close(client: zk::Client) {
    let mut states = client.state_watcher();
    drop(client);
    while !states.changed().await.is_terminated() {}
}

async fn uncontended(hosts: &str, parent: &str) -> Result<()> {
    let client = connect(hosts).await?;
    let node = create(&client, parent).await?;
    client.list_children(parent).await?;
    client.delete(&format!("{parent}/{node}"), None).await?;
    close(client).await;
    // `true` from PATH, as `zklock run ... -- true` runs it.
    Command::new("true").status()?;
    Ok(())
}

async fn queued(hosts: &str, parent: &str, command: &[String]) -> Result<()> {
    let client = connect(hosts).await?;
    let node = create(&client, parent).await?;
    loop {
        let mut children = client.list_children(parent).await?;
        // Every child is ours: same prefix, so names sort by sequence.
        children.sort();
        let Some(before) = children.iter().take_while(|c| **c < node).last() else {
            break;
        };
        match client
            .get_and_watch_data(&format!("{parent}/{before}"))
            .await
        {
            Ok((_, _, watcher)) => drop(watcher.changed().await),
            Err(zk::Error::NoNode) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Command::new(&command[0]).args(&command[1..]).status()?;
    client.delete(&format!("{parent}/{node}"), None).await?;
    close(client).await;
    Ok(())
}
