//! The steps a wait takes beside the recipe: `--supersede` (supersede.rs)
//! and `--max-waiting`, called by the lock loop (queue.rs) through
//! [`QueuePolicy`], so that the loop is the recipe alone.

use crate::lock::holder::Seen;
use crate::lock::recipe::{self, Standing};

/// What a policy makes of a listing of the queue.
pub enum Step {
    /// Wait (or hold) as the recipe says.
    Stay,
    /// The policy changed the queue: the listing is stale.
    Relist,
    /// Not joining: this many runs were already waiting ahead of us.
    QueueFull(usize),
    /// A newer `--supersede` run is known: its node or record as read.
    Superseded(Option<Seen>),
}

/// A step of the wait that is not the lock recipe's.
pub trait QueuePolicy {
    /// On every listing of the queue made while our node `me` is in it.
    async fn on_listing(&mut self, children: &[String], me: &str) -> Step;
    /// Our node vanished (`children`: a listing made since, if any). Some:
    /// the wait ends so, rather than queueing again.
    async fn on_vanished(&mut self, children: Option<&[String]>) -> Option<Step>;
    /// Whether our turn is known only from a listing, never from the one
    /// node ahead going (supersede.rs: a stale run must not start).
    fn lists_before_holding(&self) -> bool {
        false
    }
}

/// `--max-waiting`: join only a queue with fewer than `limit` waiting ahead,
/// on the first listing after we queued (a run already in the queue stays
/// in it). A free lock is taken, even with 0. Our node exists at that
/// listing, so every node counted really is ahead of us.
pub struct MaxWaiting(pub Option<u32>);

impl QueuePolicy for MaxWaiting {
    async fn on_listing(&mut self, children: &[String], me: &str) -> Step {
        let Some(limit) = self.0.take() else {
            return Step::Stay;
        };
        let waiting = recipe::waiting_ahead(children, me);
        let would_wait = matches!(recipe::standing(children, me), Standing::Waiting { .. });
        match would_wait && waiting >= limit as usize {
            true => Step::QueueFull(waiting),
            false => Step::Stay,
        }
    }

    async fn on_vanished(&mut self, _: Option<&[String]>) -> Option<Step> {
        None
    }
}

/// Both, in order: the first that does not [`Step::Stay`] decides.
impl<A: QueuePolicy, B: QueuePolicy> QueuePolicy for (A, B) {
    async fn on_listing(&mut self, children: &[String], me: &str) -> Step {
        match self.0.on_listing(children, me).await {
            Step::Stay => self.1.on_listing(children, me).await,
            step => step,
        }
    }

    async fn on_vanished(&mut self, children: Option<&[String]>) -> Option<Step> {
        match self.0.on_vanished(children).await {
            None => self.1.on_vanished(children).await,
            step => step,
        }
    }

    fn lists_before_holding(&self) -> bool {
        self.0.lists_before_holding() || self.1.lists_before_holding()
    }
}

/// A policy that may be off.
impl<P: QueuePolicy> QueuePolicy for Option<P> {
    async fn on_listing(&mut self, children: &[String], me: &str) -> Step {
        match self {
            Some(policy) => policy.on_listing(children, me).await,
            None => Step::Stay,
        }
    }

    async fn on_vanished(&mut self, children: Option<&[String]>) -> Option<Step> {
        match self {
            Some(policy) => policy.on_vanished(children).await,
            None => None,
        }
    }

    fn lists_before_holding(&self) -> bool {
        self.as_ref().is_some_and(P::lists_before_holding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn max_waiting_counts_once_and_takes_a_free_lock() {
        let me = "x__lock__0000000003";
        let queue = names(&["x__lock__0000000001", "x__lock__0000000002", me]);
        assert!(matches!(
            MaxWaiting(Some(1)).on_listing(&queue, me).await,
            Step::QueueFull(1)
        ));
        assert!(matches!(
            MaxWaiting(Some(2)).on_listing(&queue, me).await,
            Step::Stay
        ));
        // Only as we join.
        let mut policy = MaxWaiting(Some(2));
        let joined = names(&["x__lock__0000000002", me]);
        assert!(matches!(policy.on_listing(&joined, me).await, Step::Stay));
        assert!(matches!(policy.on_listing(&queue, me).await, Step::Stay));
        // A free lock, even with 0.
        assert!(matches!(
            MaxWaiting(Some(0)).on_listing(&names(&[me]), me).await,
            Step::Stay
        ));
    }
}
