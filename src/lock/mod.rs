//! The lock recipe (docs/design.md, "The lock recipe"); ARCHITECTURE.md
//! maps its modules.

pub mod directory;
pub mod holder;
pub mod inspect;
pub mod lease;
pub mod newest;
pub mod nodes;
pub mod queue;
pub mod recipe;
pub mod record;
pub mod semaphore;
pub mod supersede;

use anyhow::Result;

use self::queue::{Acquired, Node, Observer, Request, take_turn};
use self::recipe::{LOCK, LockKind, READ, WRITE};

/// Takes the lock at `request.dir`. Every node created is pushed to `owned`
/// at once (and removed when we delete it), so the caller can clean up even
/// if this future is dropped at a deadline or by a signal.
pub async fn acquire(
    request: &Request<'_>,
    owned: &mut Vec<Node>,
    observer: &mut dyn Observer,
) -> Result<Acquired> {
    let marker = match request.kind {
        LockKind::Exclusive => LOCK,
        LockKind::Read => READ,
        LockKind::Write => WRITE,
        LockKind::Semaphore(limit) => {
            return semaphore::acquire_permit(request, limit, owned, observer).await;
        }
    };
    take_turn(request, request.dir, marker, owned, observer).await
}
