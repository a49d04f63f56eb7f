//! The session's watches, kept by the server's path, so that they fire
//! when their event arrives and are set again on a new connection. A watch
//! nobody holds any more is forgotten here, without a request: the server's
//! watch fires once, unheard, and is not set again.

use std::collections::HashMap;
use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::zk::ops::Request;
use crate::zk::records::{Error, EventType};

/// Which of a node's watches: its data (getData), its existence (exists),
/// its children (getChildren).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchKind {
    Data,
    Exist,
    Child,
}

/// A watch that fired: what happened, at which path (the caller's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedEvent {
    pub event_type: EventType,
    pub path: String,
}

type Sender = oneshot::Sender<Result<WatchedEvent, Error>>;

/// The most path bytes one setWatches carries (as ZooKeeper's Java client).
pub const SET_WATCHES_BYTES: usize = 128 * 1024;

/// One watch, set by a request's answer. Resolves once: with its event, or
/// with why the session ended first. Dropping it forgets it.
#[derive(Debug)]
pub struct Watch(oneshot::Receiver<Result<WatchedEvent, Error>>);

impl Future for Watch {
    type Output = Result<WatchedEvent, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(Error::Closed)))
    }
}

#[derive(Debug, Default)]
pub struct Watches {
    set: HashMap<(WatchKind, String), Vec<Sender>>,
}

/// The watches an event fires (as ZooKeeper's Java client fires them).
fn fired_by(event: EventType) -> &'static [WatchKind] {
    match event {
        EventType::NodeCreated | EventType::NodeDataChanged => &[WatchKind::Data, WatchKind::Exist],
        EventType::NodeChildrenChanged => &[WatchKind::Child],
        EventType::NodeDeleted => &[WatchKind::Data, WatchKind::Exist, WatchKind::Child],
        EventType::Other(_) => &[],
    }
}

impl Watches {
    /// Registers a watch the server has set on `server_path`.
    pub fn add(&mut self, kind: WatchKind, server_path: &str) -> Watch {
        let (tx, rx) = oneshot::channel();
        (self.set.entry((kind, server_path.to_owned())).or_default()).push(tx);
        Watch(rx)
    }

    /// Delivers an event from the server to the watches it fires.
    pub fn fire(&mut self, event: EventType, server_path: &str, path: &str) {
        for kind in fired_by(event) {
            for tx in self
                .set
                .remove(&(*kind, server_path.to_owned()))
                .unwrap_or_default()
            {
                let _ = tx.send(Ok(WatchedEvent {
                    event_type: event,
                    path: path.to_owned(),
                }));
            }
        }
    }

    /// The setWatches requests that set again, on a new connection, the
    /// watches someone still holds, for what changed after `relative_zxid`.
    /// Each carries at most [`SET_WATCHES_BYTES`] of paths, so that none
    /// nears the server's packet limit (jute.maxbuffer).
    pub fn set_again(&mut self, relative_zxid: i64) -> Vec<Request> {
        let mut requests = Vec::new();
        let [mut data, mut exist, mut child] = [Vec::new(), Vec::new(), Vec::new()];
        let mut bytes = 0;
        for (kind, paths) in self.wanted().into_iter().enumerate() {
            for path in paths {
                if bytes + path.len() > SET_WATCHES_BYTES && bytes > 0 {
                    requests.push(Request::SetWatches {
                        relative_zxid,
                        data: mem::take(&mut data),
                        exist: mem::take(&mut exist),
                        child: mem::take(&mut child),
                    });
                    bytes = 0;
                }
                bytes += path.len();
                [&mut data, &mut exist, &mut child][kind].push(path);
            }
        }
        if bytes > 0 {
            requests.push(Request::SetWatches {
                relative_zxid,
                data,
                exist,
                child,
            });
        }
        requests
    }

    /// The server paths to set again, by kind (data, exist, child): only
    /// the watches someone still holds.
    fn wanted(&mut self) -> [Vec<String>; 3] {
        self.set.retain(|_, senders| {
            senders.retain(|tx| !tx.is_closed());
            !senders.is_empty()
        });
        let mut paths = [Vec::new(), Vec::new(), Vec::new()];
        for (kind, path) in self.set.keys() {
            paths[*kind as usize].push(path.clone());
        }
        for list in &mut paths {
            list.sort();
        }
        paths
    }

    /// Ends every watch with why the session ended.
    pub fn end(&mut self, why: Error) {
        for (_, senders) in self.set.drain() {
            for tx in senders {
                let _ = tx.send(Err(why));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn a_deletion_fires_every_kind_and_a_change_only_its_own() {
        let mut watches = Watches::default();
        let data = watches.add(WatchKind::Data, "/app/n");
        let exist = watches.add(WatchKind::Exist, "/app/n");
        let child = watches.add(WatchKind::Child, "/app/n");
        watches.fire(EventType::NodeDataChanged, "/app/n", "/n");
        let event = data.now_or_never().unwrap().unwrap();
        assert_eq!(
            (event.event_type, event.path.as_str()),
            (EventType::NodeDataChanged, "/n")
        );
        assert!(exist.now_or_never().unwrap().is_ok());
        assert_eq!(
            watches.wanted(),
            [vec![], vec![], vec!["/app/n".to_owned()]]
        );
        watches.fire(EventType::NodeDeleted, "/app/n", "/n");
        assert!(child.now_or_never().unwrap().is_ok());
        assert_eq!(
            watches.wanted(),
            [vec![], vec![], vec![]] as [Vec<String>; 3]
        );
    }

    #[test]
    fn a_dropped_watch_is_not_set_again() {
        let mut watches = Watches::default();
        let kept = watches.add(WatchKind::Exist, "/a");
        drop(watches.add(WatchKind::Child, "/b"));
        assert_eq!(watches.wanted(), [vec![], vec!["/a".to_owned()], vec![]]);
        watches.end(Error::SessionExpired);
        assert_eq!(kept.now_or_never(), Some(Err(Error::SessionExpired)));
    }

    #[test]
    fn many_watches_are_set_again_in_several_requests_of_bounded_size() {
        let mut watches = Watches::default();
        let path = |i: usize| format!("/{i:0>1000}");
        let held: Vec<Watch> = (0..300)
            .map(|i| {
                watches.add(
                    if i % 2 == 0 {
                        WatchKind::Data
                    } else {
                        WatchKind::Child
                    },
                    &path(i),
                )
            })
            .collect();
        let requests = watches.set_again(0x77);
        assert_eq!(requests.len(), 3, "300 kB of paths in 128 kB requests");
        let mut all = Vec::new();
        for request in requests {
            let Request::SetWatches {
                relative_zxid,
                data,
                exist,
                child,
            } = request
            else {
                panic!("{request:?}");
            };
            assert_eq!(relative_zxid, 0x77);
            let bytes: usize = [&data, &exist, &child]
                .iter()
                .flat_map(|v| v.iter())
                .map(String::len)
                .sum();
            assert!(bytes <= SET_WATCHES_BYTES, "{bytes}");
            all.extend(data.into_iter().chain(child));
        }
        all.sort();
        assert_eq!(all, (0..300).map(path).collect::<Vec<_>>());
        drop(held);
        assert!(watches.set_again(0x77).is_empty());
    }
}
