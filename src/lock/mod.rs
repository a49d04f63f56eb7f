//! The lock recipe (docs/design.md, "The lock recipe"); ARCHITECTURE.md
//! maps its modules.

pub mod directory;
pub mod holder;
pub mod inspect;
pub mod lease;
pub mod newest;
pub mod nodes;
pub mod parents;
pub mod queue;
pub mod queue_policy;
pub mod recipe;
pub mod record;
pub mod semaphore;
pub mod supersede;

use anyhow::Result;

use self::queue::{Acquired, QueueEvents, Request, take_turn};
use self::recipe::{LOCK, LockKind, READ, WRITE};

/// Takes the lock at `request.dir`. Every node created is added to
/// `request.owned` at once (and removed when we delete it), so the
/// session's end deletes it even if this future is dropped at a deadline or
/// by a signal.
pub async fn acquire(request: &Request<'_>, events: &mut impl QueueEvents) -> Result<Acquired> {
    let Some(marker) = marker(request.kind) else {
        let LockKind::Semaphore(limit) = request.kind else {
            unreachable!("every other kind has a marker")
        };
        return semaphore::acquire_permit(request, limit, events).await;
    };
    take_turn(request, request.dir, marker, events).await
}

/// The marker in the names of a lock's contenders of `kind`; None for a
/// semaphore, whose contenders queue elsewhere (semaphore.rs).
pub fn marker(kind: LockKind) -> Option<&'static str> {
    match kind {
        LockKind::Exclusive => Some(LOCK),
        LockKind::Read => Some(READ),
        LockKind::Write => Some(WRITE),
        LockKind::Semaphore(_) => None,
    }
}
