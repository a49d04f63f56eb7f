//! The requests written on a connection and not yet answered, in the
//! order they were written: the order the server answers them in.

use std::collections::VecDeque;

use super::Queued;
use crate::zk::clock::Moment;
use crate::zk::ops::Request;
use crate::zk::records::xid;

/// A request written on the current connection, its answer to come.
pub(super) struct InFlight {
    pub(super) xid: i32,
    pub(super) queued: Queued,
    /// When it was written (about: just before the write).
    pub(super) sent: Moment,
}

/// The oldest request in flight that is an auth, or that is not.
pub(super) fn oldest(in_flight: &mut VecDeque<InFlight>, auth: bool) -> Option<InFlight> {
    let at = (in_flight.iter()).position(|flight| (flight.xid == xid::AUTH) == auth)?;
    in_flight.remove(at)
}

/// What writing requests on a connection takes from the driver.
pub(super) struct Written<'a> {
    pub(super) xid: &'a mut i32,
    pub(super) chroot: &'a str,
    pub(super) credentials: &'a mut Vec<(String, Vec<u8>)>,
}

impl Written<'_> {
    /// Appends `batch` to `out`, each request with the next xid (an auth
    /// with its own, its credentials kept for every later connection), and
    /// notes them as in flight, to be answered in that order.
    pub(super) fn queue(
        self,
        batch: Vec<Queued>,
        out: &mut Vec<u8>,
        in_flight: &mut VecDeque<InFlight>,
    ) {
        for queued in batch {
            let this = match &queued.request {
                Request::Auth { scheme, auth } => {
                    let credential = (scheme.clone(), auth.clone());
                    if !self.credentials.contains(&credential) {
                        self.credentials.push(credential);
                    }
                    xid::AUTH
                }
                _ => {
                    *self.xid += 1;
                    *self.xid
                }
            };
            queued.request.write_packet(this, self.chroot, out);
            in_flight.push_back(InFlight {
                xid: this,
                queued,
                sent: Moment::now(),
            });
        }
    }
}
