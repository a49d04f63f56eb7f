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
//! `bench-floor HOSTS PARENT --pipelined` (the wan scenario): the protocol
//! minimum of an uncontended run, whether PARENT exists or not. Connect,
//! then send in one burst, without waiting for an answer in between (the
//! server answers a session's requests in order): a container create for
//! every level of PARENT (NodeExists is fine), the EPHEMERAL_SEQUENTIAL
//! node (create2) and the listing of PARENT; then close the session, which
//! removes the node in the same transaction (no delete), wait until the
//! server has confirmed the close, and run `true`.
//!
//! `bench-floor HOSTS PARENT --notify N` (scenario 2): what one ZooKeeper
//! notification costs between two processes, the part of every hand-off
//! that flock does not have. N times: a second process (`--watch`) sets a
//! data watch on a fresh node, both stay idle for 20 ms (as a waiter does
//! while the holder's command runs), then this one deletes the node. Prints
//! the nanoseconds from just before the delete to the watcher's wake-up,
//! one line each.
//!
//! `bench-floor HOSTS PREFIX --populate PATHS NODES` (the list scenario):
//! creates PATHS lock directories `PREFIX/lock-I`, each with NODES
//! Curator-named lock nodes holding zklock-like data, prints `ready`, and
//! keeps them until stdin closes.
//!
//! `bench-floor HOSTS PREFIX --list` (the list scenario): what `zklock
//! list PREFIX` reads, in one pass of the bare client with every request of
//! a tree level in flight at once: the children of every node, then data
//! and stat of every lock node.
//!
//! `bench-floor HOSTS PARENT CMD [ARGS...]` (scenario 2, hand-off): the
//! bare lock recipe. Create the node; until no node precedes ours, watch the
//! nearest preceding one (a data watch) and list again when it goes (unless
//! it was the only one ahead); run CMD; delete the node, close the session.

// A benchmark tool, not zklock: plain println! and eprintln! are fine here.
#![allow(clippy::print_stderr, clippy::print_stdout)]

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use zookeeper_client as zk;

// zklock's own: TCP_NODELAY on the crate's connections, which any wrapper on
// this crate should set (see the module's comment).
#[path = "../src/session/nodelay.rs"]
mod nodelay;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [hosts, parent] => uncontended(hosts, parent).await,
        [hosts, parent, flag, count] if flag == "--notify" => notify(hosts, parent, count).await,
        [hosts, _parent, flag] if flag == "--watch" => watch(hosts).await,
        [hosts, prefix, flag] if flag == "--list" => list(hosts, prefix).await,
        [hosts, parent, flag] if flag == "--pipelined" => pipelined(hosts, parent).await,
        [hosts, prefix, flag, paths, nodes] if flag == "--populate" => {
            populate(hosts, prefix, paths, nodes).await
        }
        [hosts, parent, command @ ..] => queued(hosts, parent, command).await,
        _ => {
            eprintln!("usage: bench-floor HOSTS PARENT [--pipelined | --notify N | CMD [ARGS...]]");
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
    nodelay::set_on_every_socket();
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

async fn pipelined(hosts: &str, parent: &str) -> Result<()> {
    let client = connect(hosts).await?;
    let mut levels = Vec::new();
    let mut dir = String::new();
    for part in parent.split('/').filter(|p| !p.is_empty()) {
        dir.push('/');
        dir.push_str(part);
        levels.push(dir.clone());
    }
    // The client sends each request when the method is called: every one
    // of them is on its way before the first answer is awaited.
    let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let ancestors: Vec<_> = levels
        .iter()
        .map(|dir| client.create(dir, &[], &container))
        .collect();
    let prefix = format!("{parent}/floor-");
    let ours = client.create(&prefix, &[], &ephemeral);
    let listing = client.list_children(parent);
    for created in ancestors {
        match created.await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(err) => return Err(err.into()),
        }
    }
    ours.await?;
    listing.await?;
    close(client).await;
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
        let ahead: Vec<_> = children.iter().take_while(|c| **c < node).collect();
        let Some(before) = ahead.last() else {
            break;
        };
        let gone = match client
            .get_and_watch_data(&format!("{parent}/{before}"))
            .await
        {
            Ok((_, _, watcher)) => watcher.changed().await.event_type == zk::EventType::NodeDeleted,
            Err(zk::Error::NoNode) => true,
            Err(err) => return Err(err.into()),
        };
        // As zklock: the only node ahead gone means nothing is ahead.
        if gone && ahead.len() == 1 {
            break;
        }
    }
    Command::new(&command[0]).args(&command[1..]).status()?;
    client.delete(&format!("{parent}/{node}"), None).await?;
    close(client).await;
    Ok(())
}

fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

async fn notify(hosts: &str, parent: &str, count: &str) -> Result<()> {
    let count: usize = count.parse()?;
    let client = connect(hosts).await?;
    let me = std::env::current_exe()?;
    let mut watcher = Command::new(me)
        .args([hosts, parent, "--watch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut to_watcher = watcher.stdin.take().ok_or("no stdin")?;
    let mut from_watcher = BufReader::new(watcher.stdout.take().ok_or("no stdout")?);
    let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let mut line = String::new();
    for i in 0..count {
        let node = format!("{parent}/notify-{i}");
        client.create(&node, &[], &options).await?;
        writeln!(to_watcher, "{node}")?;
        line.clear();
        from_watcher.read_line(&mut line)?; // "watching"
        tokio::time::sleep(Duration::from_millis(20)).await;
        let deleting = monotonic_ns();
        client.delete(&node, None).await?;
        line.clear();
        from_watcher.read_line(&mut line)?;
        let woken: i64 = line.trim().parse()?;
        println!("{}", woken - deleting);
    }
    drop(to_watcher);
    watcher.wait()?;
    close(client).await;
    Ok(())
}

async fn watch(hosts: &str) -> Result<()> {
    let client = connect(hosts).await?;
    let mut stdout = std::io::stdout();
    for node in std::io::stdin().lines() {
        let node = node?;
        // On an ensemble this session's member may not have applied the
        // other session's create yet; sync catches it up (before the timing).
        client.sync(&node).await?;
        let (_, _, watcher) = client.get_and_watch_data(&node).await?;
        writeln!(stdout, "watching")?;
        stdout.flush()?;
        watcher.changed().await;
        writeln!(stdout, "{}", monotonic_ns())?;
        stdout.flush()?;
    }
    close(client).await;
    Ok(())
}

type Call<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send>>;

/// Runs every future of `calls` at once on the client's connection.
async fn all_at_once<T: Send + 'static>(calls: Vec<Call<T>>) -> Result<Vec<T>> {
    let tasks: Vec<_> = calls.into_iter().map(tokio::spawn).collect();
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(task.await?);
    }
    Ok(results)
}

async fn populate(hosts: &str, prefix: &str, paths: &str, nodes: &str) -> Result<()> {
    let (paths, nodes): (usize, usize) = (paths.parse()?, nodes.parse()?);
    let client = connect(hosts).await?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let mut dir = String::new();
    for part in prefix.split('/').filter(|p| !p.is_empty()) {
        dir.push('/');
        dir.push_str(part);
        match client.create(&dir, &[], &persistent).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(err) => return Err(err.into()),
        }
    }
    let dirs: Vec<String> = (0..paths).map(|i| format!("{prefix}/lock-{i}")).collect();
    let calls = dirs
        .iter()
        .map(|dir| {
            let (client, dir) = (client.clone(), dir.clone());
            Box::pin(async move {
                let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                client.create(&dir, &[], &options).await.map(drop)
            }) as Call<_>
        })
        .collect();
    for result in all_at_once(calls).await? {
        match result {
            Ok(()) | Err(zk::Error::NodeExists) => {}
            Err(err) => return Err(err.into()),
        }
    }
    let data = br#"{"host":"bench-host","pid":4242,"zklock_pid":4240,"user":"bench","command":"/usr/local/bin/backup.sh --full","version":"0.1.0"}"#;
    let calls = dirs
        .iter()
        .flat_map(|dir| {
            (0..nodes).map(move |n| format!("{dir}/_c_{n:08}-0000-4000-8000-000000000000-lock-"))
        })
        .map(|prefix| {
            let client = client.clone();
            Box::pin(async move {
                let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                client.create(&prefix, data, &options).await.map(drop)
            }) as Call<std::result::Result<(), zk::Error>>
        })
        .collect();
    for result in all_at_once(calls).await? {
        result?;
    }
    println!("ready");
    std::io::stdout().flush()?;
    for _ in std::io::stdin().lines() {}
    close(client).await;
    Ok(())
}

/// One multi-read per 100 paths, every batch in flight at once; the
/// results in the order of `paths`.
async fn multi_read(
    client: &zk::Client,
    paths: &[String],
    children: bool,
) -> Result<Vec<zk::MultiReadResult>> {
    let mut batches = Vec::new();
    for chunk in paths.chunks(100) {
        let (client, chunk) = (client.clone(), chunk.to_vec());
        batches.push(tokio::spawn(async move {
            let mut reader = client.new_multi_reader();
            for path in &chunk {
                if children {
                    reader.add_get_children(path)?;
                } else {
                    reader.add_get_data(path)?;
                }
            }
            reader.commit().await
        }));
    }
    let mut results = Vec::with_capacity(paths.len());
    for batch in batches {
        results.extend(batch.await??);
    }
    Ok(results)
}

async fn list(hosts: &str, prefix: &str) -> Result<()> {
    let client = connect(hosts).await?;
    let mut level = vec![prefix.to_owned()];
    let mut lock_nodes = Vec::new();
    while !level.is_empty() {
        let mut next = Vec::new();
        for (dir, listing) in level.iter().zip(multi_read(&client, &level, true).await?) {
            let zk::MultiReadResult::Children { children } = listing else {
                continue;
            };
            for child in children {
                let path = format!("{}/{child}", dir.trim_end_matches('/'));
                if child.contains("-lock-") {
                    lock_nodes.push(path);
                } else if !(dir == "/" && child == "zookeeper") {
                    next.push(path);
                }
            }
        }
        level = next;
    }
    multi_read(&client, &lock_nodes, false).await?;
    close(client).await;
    Ok(())
}
