//! The protocol floor for `bench/run`: the least any lock on zklock's own
//! client (`zklock::zk`) can do. No signal handling, no process group, no
//! node data, no lease watch, no error recovery: whatever zklock measures
//! above this is the price of its guarantees (or a bug).
//!
//! `bench-floor HOSTS PARENT` (scenario 1, one uncontended run): connect
//! with, behind the ConnectRequest in the same write, the create of an
//! EPHEMERAL_SEQUENTIAL node (create2) under the existing PARENT and the
//! listing of PARENT; then, in one burst, delete the node and close the
//! session, wait for the server's answer to the close, and run `true`.
//!
//! `bench-floor HOSTS PARENT --pipelined` (the wan scenario): the same,
//! whether PARENT exists or not: the first burst starts with a container
//! create for every level of PARENT (NodeExists is fine).
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
//! list PREFIX` reads, in one pass with every request of a tree level in
//! flight at once: the children of every node, then data and stat of every
//! lock node.
//!
//! With `BENCH_FLOOR_TLS=CA:CERT:KEY` in the environment (PEM files),
//! every connection is mutual TLS with that CA and client identity, as
//! `zklock --tls-ca CA --tls-cert CERT --tls-key KEY` connects (the wan
//! scenario's TLS row).
//!
//! `bench-floor HOSTS PARENT CMD [ARGS...]` (scenario 2, hand-off): the
//! bare lock recipe. Create the node and list (in the connect's burst);
//! until no node precedes ours, watch the nearest preceding one (a data
//! watch) and list again when it goes (unless it was the only one ahead);
//! run CMD; delete the node and close the session in one burst.

// A benchmark tool, not zklock: plain println! and eprintln! are fine here.
#![allow(clippy::print_stderr, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use zklock::zk::answers::ReadResult;
use zklock::zk::burst::{Burst, Pending};
use zklock::zk::client::{Client, Config};
use zklock::zk::ops::{CreateMode, ReadOp};
use zklock::zk::records::{Acl, Error, EventType};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [hosts, parent] => uncontended(hosts, parent, false).await,
        [hosts, parent, flag] if flag == "--pipelined" => uncontended(hosts, parent, true).await,
        [hosts, parent, flag, count] if flag == "--notify" => notify(hosts, parent, count).await,
        [hosts, _parent, flag] if flag == "--watch" => watch(hosts).await,
        [hosts, prefix, flag] if flag == "--list" => list(hosts, prefix).await,
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

fn open_acl() -> Vec<Acl> {
    vec![Acl::open()]
}

/// Opens a session with `burst` behind the ConnectRequest, in one write.
async fn connect(hosts: &str, burst: Burst) -> Result<Client> {
    let config = Config {
        hosts: hosts.split(',').map(str::to_owned).collect(),
        chroot: String::new(),
        // The same session timeout zklock asks for by default, so the
        // server does the same bookkeeping for both.
        session_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(30),
        attempt_timeout: Duration::from_secs(10),
        tls: tls_from_env()?,
        auth: Vec::new(),
        sasl: None,
        max_packet: zklock::zk::client::DEFAULT_MAX_PACKET,
    };
    Ok(Client::connect(config, burst).await?)
}

/// The client configuration `BENCH_FLOOR_TLS=CA:CERT:KEY` asks for, if set.
fn tls_from_env() -> Result<Option<std::sync::Arc<rustls::ClientConfig>>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let Ok(files) = std::env::var("BENCH_FLOOR_TLS") else {
        return Ok(None);
    };
    let [ca, cert, key] = files.split(':').collect::<Vec<_>>()[..] else {
        return Err("BENCH_FLOOR_TLS is CA:CERT:KEY".into());
    };
    let mut roots = rustls::RootCertStore::empty();
    for der in CertificateDer::pem_file_iter(ca)? {
        roots.add(der?)?;
    }
    let chain = CertificateDer::pem_file_iter(cert)?.collect::<std::result::Result<_, _>>()?;
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(key)?)?;
    Ok(Some(std::sync::Arc::new(config)))
}

/// Every level of `path`, from the root down, `path` included.
fn levels(path: &str) -> Vec<String> {
    let mut levels = Vec::new();
    let mut dir = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        dir.push('/');
        dir.push_str(part);
        levels.push(dir.clone());
    }
    levels
}

/// Waits for every create of `creates`; NodeExists is fine.
async fn created_or_there(creates: Vec<Pending<impl Sized>>) -> Result<()> {
    for created in creates {
        match created.await {
            Ok(_) | Err(Error::NodeExists) => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(())
}

/// Connects with the create of our node and the listing of `parent` in
/// the first burst (behind the container levels of `parent` when
/// `levels_too`): our node's path and the listing.
async fn enqueue(
    hosts: &str,
    parent: &str,
    levels_too: bool,
) -> Result<(Client, String, Vec<String>)> {
    let mut burst = Burst::default();
    let ancestors: Vec<_> = match levels_too {
        true => (levels(parent).iter())
            .map(|dir| burst.create(dir, b"", &open_acl(), CreateMode::Container))
            .collect(),
        false => Vec::new(),
    };
    let prefix = format!("{parent}/floor-");
    let ours = burst.create(&prefix, b"", &open_acl(), CreateMode::EphemeralSequential);
    let listing = burst.get_children(parent, false);
    let client = connect(hosts, burst).await?;
    created_or_there(ancestors).await?;
    let node = ours.await?.path;
    Ok((client, node, listing.await?.children))
}

/// Deletes our node and closes the session in one burst; returns on the
/// server's answer to the close, the point from which the next waiter
/// could proceed.
async fn release(client: Client, node: &str) -> Result<()> {
    let mut burst = Burst::default();
    let deleted = burst.delete(node, -1);
    let closed = burst.close();
    client.send(burst);
    deleted.await?;
    closed.await?;
    Ok(())
}

/// Closes the session; returns on the server's answer.
async fn close(client: Client) -> Result<()> {
    Ok(client.call(|b| b.close()).await?)
}

async fn uncontended(hosts: &str, parent: &str, levels_too: bool) -> Result<()> {
    let (client, node, _) = enqueue(hosts, parent, levels_too).await?;
    release(client, &node).await?;
    // `true` from PATH, as `zklock run ... -- true` runs it.
    Command::new("true").status()?;
    Ok(())
}

async fn queued(hosts: &str, parent: &str, command: &[String]) -> Result<()> {
    let (client, node, mut children) = enqueue(hosts, parent, false).await?;
    let ours = node.rsplit('/').next().unwrap_or(&node).to_owned();
    loop {
        // Every child is ours: same prefix, so names sort by sequence.
        children.sort();
        let ahead: Vec<_> = children.iter().take_while(|c| **c < ours).collect();
        let Some(before) = ahead.last() else {
            break;
        };
        let before = format!("{parent}/{before}");
        let gone = match client.call(|b| b.get_data(&before, true)).await {
            Ok(data) => {
                let watch = data.watch.ok_or("no watch set")?;
                watch.await?.event_type == EventType::NodeDeleted
            }
            Err(Error::NoNode) => true,
            Err(err) => return Err(err.into()),
        };
        // As zklock: the only node ahead gone means nothing is ahead.
        if gone && ahead.len() == 1 {
            break;
        }
        children = client
            .call(|b| b.get_children(parent, false))
            .await?
            .children;
    }
    Command::new(&command[0]).args(&command[1..]).status()?;
    release(client, &node).await
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
    let client = connect(hosts, Burst::default()).await?;
    let me = std::env::current_exe()?;
    let mut watcher = Command::new(me)
        .args([hosts, parent, "--watch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut to_watcher = watcher.stdin.take().ok_or("no stdin")?;
    let mut from_watcher = BufReader::new(watcher.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    for i in 0..count {
        let node = format!("{parent}/notify-{i}");
        let mode = CreateMode::Ephemeral;
        client
            .call(|b| b.create(&node, b"", &open_acl(), mode))
            .await?;
        writeln!(to_watcher, "{node}")?;
        line.clear();
        from_watcher.read_line(&mut line)?; // "watching"
        tokio::time::sleep(Duration::from_millis(20)).await;
        let deleting = monotonic_ns();
        client.call(|b| b.delete(&node, -1)).await?;
        line.clear();
        from_watcher.read_line(&mut line)?;
        let woken: i64 = line.trim().parse()?;
        println!("{}", woken - deleting);
    }
    drop(to_watcher);
    watcher.wait()?;
    close(client).await
}

async fn watch(hosts: &str) -> Result<()> {
    let client = connect(hosts, Burst::default()).await?;
    let mut stdout = std::io::stdout();
    for node in std::io::stdin().lines() {
        let node = node?;
        // On an ensemble this session's member may not have applied the
        // other session's create yet; sync catches it up (before the timing).
        client.call(|b| b.sync(&node)).await?;
        let data = client.call(|b| b.get_data(&node, true)).await?;
        let watch = data.watch.ok_or("no watch set")?;
        writeln!(stdout, "watching")?;
        stdout.flush()?;
        watch.await?;
        writeln!(stdout, "{}", monotonic_ns())?;
        stdout.flush()?;
    }
    close(client).await
}

async fn populate(hosts: &str, prefix: &str, paths: &str, nodes: &str) -> Result<()> {
    let (paths, nodes): (usize, usize) = (paths.parse()?, nodes.parse()?);
    let client = connect(hosts, Burst::default()).await?;
    let persistent =
        |burst: &mut Burst, dir: &str| burst.create(dir, b"", &open_acl(), CreateMode::Persistent);
    let mut burst = Burst::default();
    let mut creates: Vec<_> = (levels(prefix).iter())
        .map(|dir| persistent(&mut burst, dir))
        .collect();
    let dirs: Vec<String> = (0..paths).map(|i| format!("{prefix}/lock-{i}")).collect();
    creates.extend(dirs.iter().map(|dir| persistent(&mut burst, dir)));
    client.send(burst);
    created_or_there(creates).await?;
    let data = br#"{"host":"bench-host","pid":4242,"zklock_pid":4240,"user":"bench","command":"/usr/local/bin/backup.sh --full","version":"0.1.0"}"#;
    let mut burst = Burst::default();
    let nodes: Vec<_> = (dirs.iter())
        .flat_map(|dir| {
            (0..nodes).map(move |n| format!("{dir}/_c_{n:08}-0000-4000-8000-000000000000-lock-"))
        })
        .map(|node| burst.create(&node, data, &open_acl(), CreateMode::EphemeralSequential))
        .collect();
    client.send(burst);
    for node in nodes {
        node.await?;
    }
    println!("ready");
    std::io::stdout().flush()?;
    // Read off the runtime's thread, so that the session keeps pinging.
    tokio::task::spawn_blocking(|| for _ in std::io::stdin().lines() {}).await?;
    close(client).await
}

/// One multiRead per 100 paths, every batch in flight at once; the
/// results in the order of `paths`.
async fn multi_read(
    client: &Client,
    paths: &[String],
    read: fn(String) -> ReadOp,
) -> Result<Vec<std::result::Result<ReadResult, Error>>> {
    let mut burst = Burst::default();
    let batches: Vec<_> = (paths.chunks(100))
        .map(|chunk| burst.multi_read(chunk.iter().cloned().map(read).collect()))
        .collect();
    client.send(burst);
    let mut results = Vec::with_capacity(paths.len());
    for batch in batches {
        results.extend(batch.await?);
    }
    Ok(results)
}

async fn list(hosts: &str, prefix: &str) -> Result<()> {
    let client = connect(hosts, Burst::default()).await?;
    let mut level = vec![prefix.to_owned()];
    let mut lock_nodes = Vec::new();
    while !level.is_empty() {
        let mut next = Vec::new();
        let listings = multi_read(&client, &level, ReadOp::GetChildren).await?;
        for (dir, listing) in level.iter().zip(listings) {
            let Ok(ReadResult::Children(children)) = listing else {
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
    multi_read(&client, &lock_nodes, ReadOp::GetData).await?;
    close(client).await
}
