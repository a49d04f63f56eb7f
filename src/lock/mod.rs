//! The lock recipe (docs/design.md, "The lock recipe"): [`acquire`] is where
//! a lock of any kind is taken, by the lock loop of `queue.rs` or the
//! semaphore of `semaphore.rs`, both over the pure `recipe.rs`. Also the
//! lease that decides a held lock is lost, the holder data stored in our
//! nodes, what `status` reads, and the run record of `--once-per`.

pub mod directory;
pub mod holder;
pub mod inspect;
pub mod lease;
pub mod nodes;
pub mod queue;
pub mod recipe;
pub mod record;
pub mod semaphore;

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
    match request.kind {
        LockKind::Exclusive => take_turn(request, request.dir, LOCK, owned, observer).await,
        LockKind::Read => take_turn(request, request.dir, READ, owned, observer).await,
        LockKind::Write => take_turn(request, request.dir, WRITE, owned, observer).await,
        LockKind::Semaphore(limit) => {
            semaphore::acquire_permit(request, limit, owned, observer).await
        }
    }
}
