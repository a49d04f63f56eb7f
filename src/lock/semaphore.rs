//! Semaphores of N holders, Curator's `InterProcessSemaphoreV2` layout:
//! a gate lock in `PATH/locks`, leases in `PATH/leases`, N as the data of
//! `PATH`; and keeping plain locks and semaphores off each other's paths.

use anyhow::{Context, Result, bail};
use zookeeper_client as zk;

use crate::exit::Failure;
use crate::lock::acquire::{
    Acquired, Node, Observer, Request, create_ancestors, create_dir, create_node, denied, parent,
    take_turn,
};
use crate::lock::recipe::{self, LEASE, LOCK, SEMAPHORE_GATE, SEMAPHORE_LEASES};
use crate::session::retrying;

/// A plain lock asked for on a semaphore's path would not exclude the
/// semaphore's holders: refuse it, saying what the path is.
pub async fn refuse_as_lock(client: &zk::Client, dir: &str) -> Result<()> {
    let limit = retrying(|| client.get_data(dir))
        .await
        .ok()
        .and_then(|(data, _)| recipe::decode_limit(&data));
    match limit {
        Some(limit) => Err(Failure::usage(format!(
            "{dir} is a semaphore of {limit}; take it with --limit {limit}"
        ))),
        // A plain lock that merely has a child named like a semaphore's.
        None => Ok(()),
    }
}

/// A permit of the semaphore at `request.dir` (Curator's
/// `InterProcessSemaphoreV2` recipe): take the gate (an exclusive lock on
/// `dir/locks`), create our lease in `dir/leases`, and while holding the
/// gate, wait until at most `limit` leases exist; then release the gate.
/// Only the gate holder watches the pool, so a release wakes one process.
pub async fn acquire_permit(
    request: &Request<'_>,
    limit: u32,
    owned: &mut Vec<Node>,
    observer: &mut dyn Observer,
) -> Result<Acquired> {
    let client = request.client;
    claim_semaphore(client, request.dir, limit, request.acls).await?;
    let leases = format!("{}/{SEMAPHORE_LEASES}", request.dir);
    // The gate's watch lives until the gate is deleted, which consumes it;
    // dropped earlier, it would cost a RemoveWatches request.
    let (gate, _gate_watch) = if request.wait {
        let gate_dir = format!("{}/{SEMAPHORE_GATE}", request.dir);
        match take_turn(request, &gate_dir, LOCK, owned, observer).await? {
            Acquired::Held(gate, watch) => (Some(gate), watch),
            other => return Ok(other),
        }
    } else {
        // Without waiting there is nothing to be fair about: create, count,
        // give up if over. Still safe: of any set of holders, the one whose
        // lease came last counted all the others.
        (None, None)
    };
    let lease = create_node(client, &leases, LEASE, request.data, request.acls).await?;
    owned.push(lease.clone());
    loop {
        let (children, watcher) = retrying(|| client.list_and_watch_children(&leases))
            .await
            .context("listing the semaphore's leases")?;
        if !children.iter().any(|c| c == lease.name()) {
            return Ok(Acquired::Lost);
        }
        if children.len() <= limit as usize {
            break;
        }
        if gate.is_none() {
            return Ok(Acquired::Busy);
        }
        observer.pool_full(children.len() - 1);
        watcher.changed().await;
    }
    if let Some(gate) = gate {
        match retrying(|| client.delete(&gate.path, None)).await {
            Ok(()) | Err(zk::Error::NoNode) => owned.retain(|n| n.path != gate.path),
            Err(err) => return Err(err).context("releasing the semaphore's gate"),
        }
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
