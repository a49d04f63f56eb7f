//! The lock recipe (DESIGN.md section 3): node names and ordering (pure),
//! the acquire loops, semaphores, the lease that decides a held lock is lost,
//! the holder data stored in our nodes, and the run record of `--once-per`.

pub mod acquire;
pub mod directory;
pub mod holder;
pub mod inspect;
pub mod lease;
pub mod nodes;
pub mod recipe;
pub mod record;
pub mod record_store;
pub mod semaphore;
pub mod turn;
