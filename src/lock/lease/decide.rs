//! What a holder makes of what it learns (docs/design.md, "Session and
//! lease rules"): the link's states and the events on its nodes. Pure: the
//! loop in `mod.rs` feeds it and acts on its verdicts.

use zklock::zk::client::State;
use zklock::zk::records::{Error, EventType};

use super::policy::OnDisconnect;

/// Something the lease learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// The link's state changed to this.
    Link(State),
    /// The watch on our node `node` fired, or ended with why the session did.
    Watch {
        node: &'a str,
        event: Result<EventType, Error>,
    },
    /// Our node `node` as read again (to watch it again): its owner, or
    /// why not.
    Read {
        node: &'a str,
        owner: Result<i64, Error>,
    },
    /// The confirmation written through the leader (a check of our nodes)
    /// was answered: `node` is the one it failed on, if it did.
    Confirmed {
        node: &'a str,
        result: Result<(), Error>,
    },
    /// The confirmation has gone unanswered for C: the member stalled, or
    /// lost the leader.
    Unanswered,
    /// The lease deadline passed without an answer that moved it.
    DeadlinePassed,
}

/// What to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing changes.
    Keep,
    /// A disconnection: the lock is kept until the deadline, unless the
    /// session comes back.
    OutageBegins,
    /// The session is back (a server answered on a new connection).
    Restored,
    /// Read the node again, with a watch.
    Watch,
    /// The leader still keeps the session: the lease may move.
    Proven,
    /// Give the connection up and resume the session on another member.
    Leave,
    /// The lock is lost, for this reason (shown to the user).
    Lost(String),
}

/// The verdict on `event` for a holder whose nodes belong to the session
/// `owner`, `in_outage` when its connection is down.
pub fn decide(on_disconnect: OnDisconnect, in_outage: bool, owner: i64, event: Event) -> Verdict {
    match event {
        Event::Link(State::Connected) if in_outage => Verdict::Restored,
        Event::Link(State::Connected) => Verdict::Keep,
        Event::Link(State::Disconnected) => match on_disconnect {
            OnDisconnect::Kill => {
                Verdict::Lost("disconnected from ZooKeeper (--on-disconnect=kill)".into())
            }
            OnDisconnect::Lease if in_outage => Verdict::Keep,
            OnDisconnect::Lease => Verdict::OutageBegins,
        },
        Event::Link(State::Expired) => Verdict::Lost("the ZooKeeper session expired".into()),
        Event::Link(State::Closed) => Verdict::Lost("the ZooKeeper session was closed".into()),
        Event::Link(State::AuthFailed) => Verdict::Lost("ZooKeeper authentication failed".into()),
        Event::Watch { node, event } => match event {
            Ok(EventType::NodeDeleted) => Verdict::Lost(format!("{node} was deleted")),
            // Its data written (by us, marking it as holding): still ours.
            Ok(_) => Verdict::Watch,
            Err(why) => session_ended(node, why),
        },
        Event::Read { node, owner: read } => match read {
            Ok(found) if found == owner => Verdict::Keep,
            Ok(_) => Verdict::Lost(format!("{node} now belongs to another session")),
            Err(Error::NoNode) => Verdict::Lost(format!("{node} was deleted")),
            // The answer was lost with the connection: read again (the
            // client holds the request until it is connected).
            Err(Error::ConnectionLoss | Error::SessionMoved) => Verdict::Watch,
            Err(why) => session_ended(node, why),
        },
        Event::Confirmed { node, result } => match result {
            Ok(()) => Verdict::Proven,
            Err(Error::NoNode) => Verdict::Lost(format!("{node} was deleted")),
            // Confirmed again once connected.
            Err(Error::ConnectionLoss | Error::SessionMoved) => Verdict::Keep,
            Err(why @ (Error::SessionExpired | Error::AuthFailed | Error::Closed)) => {
                session_ended(node, why)
            }
            Err(other) => Verdict::Lost(format!("cannot confirm {node} with ZooKeeper: {other}")),
        },
        // The session may live on at another member; in kill mode the
        // connection is kept until the client gives it up (2T/3 of
        // silence): the lease decides when the command must stop.
        Event::Unanswered => match on_disconnect {
            OnDisconnect::Lease => Verdict::Leave,
            OnDisconnect::Kill => Verdict::Keep,
        },
        Event::DeadlinePassed => Verdict::Lost(
            "no answer from ZooKeeper past the lease deadline (the session may expire)".into(),
        ),
    }
}

fn session_ended(node: &str, why: Error) -> Verdict {
    Verdict::Lost(match why {
        Error::SessionExpired => "the ZooKeeper session expired".into(),
        Error::AuthFailed => "ZooKeeper authentication failed".into(),
        Error::Closed => "the ZooKeeper session was closed".into(),
        other => format!("cannot watch {node}: {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: i64 = 0x42;

    fn lease(in_outage: bool, event: Event) -> Verdict {
        decide(OnDisconnect::Lease, in_outage, OURS, event)
    }

    fn is_lost(verdict: &Verdict) -> bool {
        matches!(verdict, Verdict::Lost(_))
    }

    #[test]
    fn a_disconnection_is_an_outage_until_the_session_is_back() {
        let down = Event::Link(State::Disconnected);
        assert_eq!(lease(false, down.clone()), Verdict::OutageBegins);
        // Another loss while reconnecting changes nothing.
        assert_eq!(lease(true, down), Verdict::Keep);
        assert_eq!(
            lease(true, Event::Link(State::Connected)),
            Verdict::Restored
        );
        assert_eq!(lease(false, Event::Link(State::Connected)), Verdict::Keep);
    }

    #[test]
    fn kill_mode_loses_the_lock_at_any_disconnection() {
        let verdict = decide(
            OnDisconnect::Kill,
            false,
            OURS,
            Event::Link(State::Disconnected),
        );
        assert_eq!(
            verdict,
            Verdict::Lost("disconnected from ZooKeeper (--on-disconnect=kill)".into())
        );
    }

    #[test]
    fn a_session_that_ends_loses_the_lock_whatever_says_so() {
        for state in [State::Expired, State::Closed, State::AuthFailed] {
            for outage in [false, true] {
                assert!(is_lost(&lease(outage, Event::Link(state))), "{state:?}");
            }
        }
        for why in [Error::SessionExpired, Error::AuthFailed, Error::Closed] {
            let fired = Event::Watch {
                node: "/l/n",
                event: Err(why),
            };
            assert!(is_lost(&lease(false, fired)), "{why:?}");
            let read = Event::Read {
                node: "/l/n",
                owner: Err(why),
            };
            assert!(is_lost(&lease(false, read)), "{why:?}");
        }
        assert!(is_lost(&lease(false, Event::DeadlinePassed)));
    }

    #[test]
    fn a_confirmation_proves_the_lease_or_finds_the_lock_lost() {
        let node = "/l/_c_x-lock-0000000001";
        let confirmed = |result| lease(false, Event::Confirmed { node, result });
        assert_eq!(confirmed(Ok(())), Verdict::Proven);
        assert_eq!(
            confirmed(Err(Error::NoNode)),
            Verdict::Lost(format!("{node} was deleted"))
        );
        assert_eq!(
            confirmed(Err(Error::SessionExpired)),
            Verdict::Lost("the ZooKeeper session expired".into())
        );
        // Its answer lost with the connection: confirmed again later.
        assert_eq!(confirmed(Err(Error::ConnectionLoss)), Verdict::Keep);
        assert_eq!(confirmed(Err(Error::SessionMoved)), Verdict::Keep);
        assert!(is_lost(&confirmed(Err(Error::NoAuth))));
    }

    #[test]
    fn an_unanswered_confirmation_leaves_the_member_only_in_lease_mode() {
        assert_eq!(lease(false, Event::Unanswered), Verdict::Leave);
        // Kill mode keeps a stalled connection: leaving it would lose the
        // lock, where the session and the lease may still hold.
        let kill = decide(OnDisconnect::Kill, false, OURS, Event::Unanswered);
        assert_eq!(kill, Verdict::Keep);
    }

    #[test]
    fn our_node_deleted_or_taken_over_is_lost_and_written_is_watched_again() {
        let node = "/l/_c_x-lock-0000000001";
        let fired = |event| lease(false, Event::Watch { node, event });
        assert_eq!(
            fired(Ok(EventType::NodeDeleted)),
            Verdict::Lost(format!("{node} was deleted"))
        );
        assert_eq!(fired(Ok(EventType::NodeDataChanged)), Verdict::Watch);
        let read = |owner| lease(false, Event::Read { node, owner });
        assert_eq!(read(Ok(OURS)), Verdict::Keep);
        assert_eq!(
            read(Ok(OURS + 1)),
            Verdict::Lost(format!("{node} now belongs to another session"))
        );
        assert_eq!(
            read(Err(Error::NoNode)),
            Verdict::Lost(format!("{node} was deleted"))
        );
        // A lost answer says nothing: read again.
        assert_eq!(read(Err(Error::ConnectionLoss)), Verdict::Watch);
    }
}
