//! Semaphores of N holders in Curator's `InterProcessSemaphoreV2` layout,
//! and keeping plain locks and semaphores off each other's paths.

use anyhow::{Context, Result, bail};
use zklock::zk;

use crate::exit::Failure;
use crate::lock::nodes::{NodeSpec, create_node};
use crate::lock::parents::{MissingChroot, create_ancestors, create_dir, denied, parent};
use crate::lock::queue::{Acquired, QueueEvent, QueueEvents, Request, enqueue, take_turn};
use crate::lock::recipe::{self, LEASE, LOCK, SEMAPHORE_GATE, SEMAPHORE_LEASES, Standing};
use crate::session::retrying;

/// A permit of the semaphore at `request.dir` (docs/design.md,
/// "Semaphores"): take the gate, create our lease and, holding the gate,
/// wait until at most `limit` leases exist; then release the gate.
pub async fn acquire_permit(
    request: &Request<'_>,
    limit: u32,
    events: &mut impl QueueEvents,
) -> Result<Acquired> {
    let client = request.client;
    let gate_dir = recipe::child(request.dir, SEMAPHORE_GATE);
    claim_semaphore(client, request.dir, limit, request.acls).await?;
    let leases = recipe::child(request.dir, SEMAPHORE_LEASES);
    let taken = match request.wait {
        true => take_turn(request, &gate_dir, LOCK, events).await?,
        false => gate_without_waiting(request, &gate_dir, &leases, limit, events).await?,
    };
    let gate = match taken {
        Acquired::Held(gate, _) => gate,
        other => return Ok(other),
    };
    let spec = NodeSpec {
        dir: &leases,
        marker: LEASE,
        data: request.data,
        acls: request.acls,
        list: false,
    };
    let (lease, _) = create_node(client, request.owned, spec, None).await?;
    loop {
        let wait = request.wait;
        let listed = retrying(|| client.call(|b| b.get_children(&leases, wait)))
            .await
            .context("listing the semaphore's leases")?;
        let (children, watcher) = (listed.children, listed.watch);
        if !children.iter().any(|c| c == lease.name()) {
            return Ok(Acquired::Lost);
        }
        if children.len() <= limit as usize {
            break;
        }
        // The session's end deletes the lease, then the gate (last first),
        // so the next gate holder does not count our lease.
        let Some(watcher) = watcher else {
            return Ok(Acquired::Busy);
        };
        events.event(QueueEvent::PoolFull(children.len() - 1)).await;
        watcher.await.context("waiting for a permit")?;
    }
    match retrying(|| client.call(|b| b.delete(&gate.path, -1))).await {
        Ok(()) | Err(zk::records::Error::NoNode) => request.owned.remove(&gate.path),
        Err(err) => return Err(err).context("releasing the semaphore's gate"),
    }
    // A plain lock taken on this path while its semaphore children were
    // being reaped could not see us; one of the two must see the other, and
    // this look after our own node exists is ours.
    refuse_plain_lock(client, request.dir).await?;
    Ok(Acquired::Held(lease, None))
}

/// The gate for a run that does not wait for a permit (`--no-wait`).
///
/// Skipping the gate would let simultaneous runs see each other's leases and
/// all give up, even with N free permits. So it queues on the gate: first in
/// line, the gate is ours (the caller counts the leases). Behind someone,
/// with N or more leases the pool is full: give up. With fewer, a gate
/// holder ahead can only block on a pool overfilled by leases created after
/// our look, so wait for the node ahead to go or the leases to change, and
/// look again (a stalled gate holder ahead: at most its session timeout).
/// Only gate holders that saw at most N leases keep theirs
/// (Curator's rule too), so there are never more than N holders.
async fn gate_without_waiting(
    request: &Request<'_>,
    gate_dir: &str,
    leases: &str,
    limit: u32,
    events: &mut impl QueueEvents,
) -> Result<Acquired> {
    let client = request.client;
    let (gate, mut listed) = enqueue(request, gate_dir, LOCK, events).await?;
    loop {
        let queue = match listed.take() {
            Some(queue) => queue,
            None => {
                retrying(|| client.call(|b| b.get_children(gate_dir, false)))
                    .await
                    .context("listing the semaphore's gate")?
                    .children
            }
        };
        let predecessor = match recipe::standing(&queue, gate.name()) {
            Standing::Held => return Ok(Acquired::Held(gate, None)),
            Standing::Missing => return Ok(Acquired::Lost),
            Standing::Waiting { predecessor, .. } => recipe::child(gate_dir, predecessor),
        };
        // One round trip for both: the look at the pool and the watch on the
        // node ahead.
        let (pool, ahead) = tokio::join!(
            retrying(|| client.call(|b| b.get_children(leases, true))),
            retrying(|| client.call(|b| b.get_data(&predecessor, true))),
        );
        let (pool, pool_watch) = match pool {
            Ok(found) => (found.children, found.watch.expect("a watch asked for")),
            // No lease was ever created, or the empty container was reaped:
            // create it, so that the child watch can be set.
            Err(zk::records::Error::NoNode) => {
                create_ancestors(client, leases, request.acls).await?;
                continue;
            }
            Err(err) => return Err(err).context("listing the semaphore's leases"),
        };
        if pool.len() >= limit as usize {
            return Ok(Acquired::Busy);
        }
        match ahead {
            Err(zk::records::Error::NoNode) => continue,
            Err(err) => return Err(err).context("watching the node ahead in the gate"),
            Ok(found) => tokio::select! {
                _ = found.watch.expect("a watch asked for") => {}
                _ = pool_watch => {}
            },
        }
    }
}

/// Makes `dir` a semaphore of `limit` (its data), or checks that it is one.
/// A path in use as a plain lock, or a semaphore of another limit, is refused.
async fn claim_semaphore(
    client: &zk::client::Client,
    dir: &str,
    limit: u32,
    acls: &[zk::records::Acl],
) -> Result<()> {
    let wanted = recipe::encode_limit(limit);
    loop {
        match create_dir(client, dir, &wanted, acls).await {
            Ok(()) => return Ok(()),
            Err(zk::records::Error::NodeExists) => {}
            Err(zk::records::Error::NoNode) if parent(dir) == "/" => {
                return Err(
                    anyhow::Error::new(MissingChroot).context(format!("cannot create {dir}"))
                );
            }
            Err(zk::records::Error::NoNode) => {
                create_ancestors(client, parent(dir), acls).await?;
                continue;
            }
            Err(err) => {
                return Err(denied(err, parent(dir), "CREATE")).context(format!("creating {dir}"));
            }
        }
        let (data, stat) = match retrying(|| client.call(|b| b.get_data(dir, false)))
            .await
            .map(|d| (d.data, d.stat))
        {
            Err(zk::records::Error::NoNode) => continue, // an empty container, just reaped
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
        refuse_plain_lock(client, dir).await?;
        // An empty directory (a plain lock's leftover container, or one
        // created before us): claim it, unless someone changed it meanwhile.
        match retrying(|| client.call(|b| b.set_data(dir, &wanted, stat.version))).await {
            Ok(_) => return Ok(()),
            Err(zk::records::Error::BadVersion | zk::records::Error::NoNode) => continue,
            Err(err) => return Err(err).context(format!("claiming {dir}")),
        }
    }
}

/// Refuses `dir` if a plain lock's contenders are among its children.
async fn refuse_plain_lock(client: &zk::client::Client, dir: &str) -> Result<()> {
    let children = retrying(|| client.call(|b| b.get_children(dir, false)))
        .await
        .with_context(|| format!("listing {dir}"))?
        .children;
    if children
        .iter()
        .any(|c| recipe::parse_contender(c).is_some())
    {
        bail!(Failure::usage(format!(
            "{dir} is in use as a plain lock, not a semaphore"
        )));
    }
    Ok(())
}
