//! Taking a lock of any kind: the entry point over the plain lock loop
//! (`turn.rs`) and the semaphore recipe (`semaphore.rs`), both driven by
//! the pure helpers of `recipe.rs` and creating nodes through `nodes.rs`.

use anyhow::Result;

pub use crate::lock::nodes::{MissingChroot, Node, paths};
use crate::lock::recipe::{LOCK, LockKind, READ, WRITE};
use crate::lock::semaphore;
use crate::lock::turn::take_turn;
pub use crate::lock::turn::{Acquired, NodeWatch, Observer, Request};

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
