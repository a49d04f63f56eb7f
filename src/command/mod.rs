//! The command zklock runs: starting it, delivering signals, supervising
//! it and its process group until all of it is gone.

pub mod child;
pub mod keeper;
pub mod process;
pub mod signals;
pub mod spawn;
pub mod steps;
pub mod supervise;
