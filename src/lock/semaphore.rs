//! Semaphores of N holders, Curator's `InterProcessSemaphoreV2` layout:
//! a gate lock in `PATH/locks`, leases in `PATH/leases`, N as the data of
//! `PATH`; and keeping plain locks and semaphores off each other's paths.

use anyhow::{Context, Result, bail};
use zookeeper_client as zk;

use crate::exit::Failure;
use crate::lock::nodes::{Node, create_ancestors, create_dir, create_node, denied, parent};
use crate::lock::queue::{Acquired, Observer, Request, enqueue, take_turn};
use crate::lock::recipe::{self, LEASE, LOCK, SEMAPHORE_GATE, SEMAPHORE_LEASES, Standing};
use crate::session::retrying;

/// A permit of the semaphore at `request.dir` (Curator's
/// `InterProcessSemaphoreV2` recipe): take the gate (an exclusive lock on
/// `dir/locks`), create our lease in `dir/leases`, and while holding the
/// gate, wait until at most `limit` leases exist; then release the gate.
/// Only the gate holder watches the pool, so a release wakes one process.
/// Without waiting, the gate is queued for too: see [`gate_without_waiting`].
pub async fn acquire_permit(
    request: &Request<'_>,
    limit: u32,
    owned: &mut Vec<Node>,
    observer: &mut dyn Observer,
) -> Result<Acquired> {
    let client = request.client;
    let gate_dir = recipe::child(request.dir, SEMAPHORE_GATE);
    claim_semaphore(client, request.dir, limit, request.acls).await?;
    let leases = recipe::child(request.dir, SEMAPHORE_LEASES);
    let taken = match request.wait {
        true => take_turn(request, &gate_dir, LOCK, owned, observer).await?,
        false => gate_without_waiting(request, &gate_dir, &leases, limit, owned, observer).await?,
    };
    // The gate's watch lives until the gate is deleted, which consumes it;
    // dropped earlier, it would cost a RemoveWatches request.
    let (gate, _gate_watch) = match taken {
        Acquired::Held(gate, watch) => (gate, watch),
        other => return Ok(other),
    };
    let (lease, _) = create_node(client, &leases, LEASE, request.data, request.acls, false).await?;
    owned.push(lease.clone());
    loop {
        let (children, watcher) = match request.wait {
            true => retrying(|| client.list_and_watch_children(&leases))
                .await
                .map(|(children, watcher)| (children, Some(watcher))),
            false => retrying(|| client.list_children(&leases))
                .await
                .map(|children| (children, None)),
        }
        .context("listing the semaphore's leases")?;
        if !children.iter().any(|c| c == lease.name()) {
            return Ok(Acquired::Lost);
        }
        if children.len() <= limit as usize {
            break;
        }
        // The caller deletes the lease, then the gate (last created first),
        // so the next gate holder does not count our lease.
        let Some(watcher) = watcher else {
            return Ok(Acquired::Busy);
        };
        observer.pool_full(children.len() - 1);
        watcher.changed().await;
    }
    match retrying(|| client.delete(&gate.path, None)).await {
        Ok(()) | Err(zk::Error::NoNode) => owned.retain(|n| n.path != gate.path),
        Err(err) => return Err(err).context("releasing the semaphore's gate"),
    }
    // A plain lock taken on this path while its semaphore children were
    // being reaped could not see us; one of the two must see the other, and
    // this look after our own node exists is ours.
    let children = retrying(|| client.list_children(request.dir))
        .await
        .context("listing the semaphore")?;
    if children
        .iter()
        .any(|c| recipe::parse_contender(c).is_some())
    {
        bail!(Failure::usage(format!(
            "{} is in use as a plain lock, not a semaphore",
            request.dir
        )));
    }
    Ok(Acquired::Held(lease, None))
}

/// The gate for a run that does not wait for a permit (`--no-wait`).
///
/// Skipping the gate (create a lease, count, give up if over N) is safe but
/// makes simultaneous runs see each other's leases and all give up: with N
/// free permits, none may run. So a no-wait run queues on the gate like any
/// other and waits only while a permit may still come its way:
///
/// - First in the gate queue: the gate is ours; the caller creates the lease
///   and counts, holding the permit at <= N and giving up otherwise.
/// - Behind someone, with at least N leases: the pool is full, or is about
///   to be once the gate holder's lease is admitted. Give up.
/// - Behind someone, with fewer than N leases: every gate holder from here
///   to us either passes through (takes a permit or gives up) or blocks on
///   a full pool. Blocking needs more than N leases, that is, leases created
///   after our look. So wait for the node ahead to go, or for the leases to
///   change (a child watch set with our look), whichever comes first, and
///   look again. The wait ends within the gate holders' round trips, unless
///   a gate holder ahead stalls (then at most its session timeout).
///
/// Only gate holders create leases and a lease counts only if its creator,
/// holding the gate, saw at most N (Curator's rule too), so waiting and
/// Curator clients on the same pool still never make more than N holders.
async fn gate_without_waiting(
    request: &Request<'_>,
    gate_dir: &str,
    leases: &str,
    limit: u32,
    owned: &mut Vec<Node>,
    observer: &mut dyn Observer,
) -> Result<Acquired> {
    let client = request.client;
    let (gate, mut listed) = enqueue(request, gate_dir, LOCK, owned, observer).await?;
    loop {
        let queue = match listed.take() {
            Some(queue) => queue,
            None => retrying(|| client.list_children(gate_dir))
                .await
                .context("listing the semaphore's gate")?,
        };
        let predecessor = match recipe::standing(&queue, gate.name()) {
            Standing::Held => return Ok(Acquired::Held(gate, None)),
            Standing::Missing => return Ok(Acquired::Lost),
            Standing::Waiting { predecessor, .. } => recipe::child(gate_dir, predecessor),
        };
        // One round trip for both: the look at the pool and the watch on the
        // node ahead.
        let (pool, ahead) = tokio::join!(
            retrying(|| client.list_and_watch_children(leases)),
            retrying(|| client.get_and_watch_data(&predecessor)),
        );
        let (pool, pool_watch) = match pool {
            Ok(found) => found,
            // No lease was ever created, or the empty container was reaped:
            // create it, so that the child watch can be set.
            Err(zk::Error::NoNode) => {
                create_ancestors(client, leases, request.acls).await?;
                continue;
            }
            Err(err) => return Err(err).context("listing the semaphore's leases"),
        };
        if pool.len() >= limit as usize {
            return Ok(Acquired::Busy);
        }
        match ahead {
            Err(zk::Error::NoNode) => continue,
            Err(err) => return Err(err).context("watching the node ahead in the gate"),
            Ok((_data, _stat, ahead_watch)) => tokio::select! {
                _ = ahead_watch.changed() => {}
                _ = pool_watch.changed() => {}
            },
        }
    }
}

/// Makes `dir` a semaphore of `limit` (its data), or checks that it is one.
/// A path in use as a plain lock, or a semaphore of another limit, is refused.
async fn claim_semaphore(
    client: &zk::Client,
    dir: &str,
    limit: u32,
    acls: &[zk::Acl],
) -> Result<()> {
    let wanted = recipe::encode_limit(limit);
    loop {
        match create_dir(client, dir, &wanted, acls).await {
            Ok(()) => return Ok(()),
            Err(zk::Error::NodeExists) => {}
            Err(zk::Error::NoNode) if parent(dir) == "/" => {
                bail!("cannot create {dir}: the chroot given with -z does not exist");
            }
            Err(zk::Error::NoNode) => {
                create_ancestors(client, parent(dir), acls).await?;
                continue;
            }
            Err(err) => {
                return Err(denied(err, parent(dir), "CREATE")).context(format!("creating {dir}"));
            }
        }
        let (data, stat) = match retrying(|| client.get_data(dir)).await {
            Err(zk::Error::NoNode) => continue, // an empty container, just reaped
            result => result.context(format!("reading {dir}"))?,
        };
        if data == wanted {
            return Ok(());
        }
        if let Some(other) = recipe::decode_limit(&data) {
            bail!(Failure::usage(format!(
                "{dir} is a semaphore of {other}, not {limit}"
            )));
        }
        if !data.is_empty() {
            bail!(Failure::usage(format!(
                "{dir} holds data that is not a semaphore limit"
            )));
        }
        let children = retrying(|| client.list_children(dir))
            .await
            .context(format!("listing {dir}"))?;
        if children
            .iter()
            .any(|c| recipe::parse_contender(c).is_some())
        {
            bail!(Failure::usage(format!(
                "{dir} is in use as a plain lock, not a semaphore"
            )));
        }
        // An empty directory (a plain lock's leftover container, or one
        // created before us): claim it, unless someone changed it meanwhile.
        match retrying(|| client.set_data(dir, &wanted, Some(stat.version))).await {
            Ok(_) => return Ok(()),
            Err(zk::Error::BadVersion | zk::Error::NoNode) => continue,
            Err(err) => return Err(err).context(format!("claiming {dir}")),
        }
    }
}
