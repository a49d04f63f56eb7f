//! Just enough of the ZooKeeper wire format for the fault proxy to find a create.
//!
//! Every message is a frame: a 4-byte big-endian length, then that many bytes. The
//! first frame each way is the session handshake (ConnectRequest/ConnectResponse),
//! which has no header; later requests start with `xid: i32, type: i32`, and later
//! replies with `xid: i32, zxid: i64, err: i32`.

const OP_CREATE: i32 = 1;
const OP_CREATE2: i32 = 15;
const OP_DELETE: i32 = 2;
const OP_CLOSE: i32 = -11;
const OP_EXISTS: i32 = 3;
const OP_GET_DATA: i32 = 4;
const FLAGS_EPHEMERAL_SEQUENTIAL: i32 = 3;
// Far above ZooKeeper's default jute.maxbuffer (1 MiB): anything bigger means we lost
// track of the framing.
const MAX_FRAME: usize = 64 << 20;

/// A frame completed by [`FrameSplitter::push`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    /// Offset in the pushed chunk just past this frame's last byte.
    pub end: usize,
    /// Whether this is the connection's first frame (the handshake).
    pub first: bool,
    /// The frame without its length prefix.
    pub body: Vec<u8>,
}

/// Reassembles frames from a byte stream cut at arbitrary points.
#[derive(Debug, Default)]
pub(crate) struct FrameSplitter {
    partial: Vec<u8>,
    frames_seen: usize,
    broken: bool,
}

impl FrameSplitter {
    pub(crate) fn new() -> FrameSplitter {
        FrameSplitter::default()
    }

    /// False once a length made no sense; from then on no frames are reported.
    pub(crate) fn in_sync(&self) -> bool {
        !self.broken
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<Frame> {
        let mut frames = Vec::new();
        let mut pos = 0;
        while !self.broken {
            if self.partial.len() < 4 {
                let take = (4 - self.partial.len()).min(chunk.len() - pos);
                self.partial.extend_from_slice(&chunk[pos..pos + take]);
                pos += take;
                if self.partial.len() < 4 {
                    break;
                }
            }
            let len = i32::from_be_bytes(self.partial[..4].try_into().expect("4 bytes"));
            let Ok(len) = usize::try_from(len) else {
                self.broken = true;
                break;
            };
            if len > MAX_FRAME {
                self.broken = true;
                break;
            }
            let take = (4 + len - self.partial.len()).min(chunk.len() - pos);
            self.partial.extend_from_slice(&chunk[pos..pos + take]);
            pos += take;
            if self.partial.len() < 4 + len {
                break;
            }
            frames.push(Frame {
                end: pos,
                first: self.frames_seen == 0,
                body: self.partial.split_off(4),
            });
            self.partial.clear();
            self.frames_seen += 1;
        }
        frames
    }
}

/// A client-to-server frame, as far as the proxy cares.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Request {
    Connect,
    Create {
        xid: i32,
        op: i32,
        path: String,
        flags: i32,
    },
    Other {
        xid: i32,
        op: i32,
    },
}

impl Request {
    /// The op code; None for the handshake.
    pub(crate) fn op(&self) -> Option<i32> {
        match *self {
            Request::Connect => None,
            Request::Create { op, .. } | Request::Other { op, .. } => Some(op),
        }
    }

    /// The xid of a delete.
    pub(crate) fn delete_xid(&self) -> Option<i32> {
        match *self {
            Request::Other { xid, op } if op == OP_DELETE => Some(xid),
            _ => None,
        }
    }

    /// The xid of a read that can set a watch on a node: exists or getData.
    pub(crate) fn node_read_xid(&self) -> Option<i32> {
        match *self {
            Request::Other { xid, op } if op == OP_EXISTS || op == OP_GET_DATA => Some(xid),
            _ => None,
        }
    }

    pub(crate) fn close_xid(&self) -> Option<i32> {
        match *self {
            Request::Other { xid, op } if op == OP_CLOSE => Some(xid),
            _ => None,
        }
    }

    /// The xid of an EPHEMERAL_SEQUENTIAL create (or create2).
    pub(crate) fn ephemeral_sequential_create_xid(&self) -> Option<i32> {
        match *self {
            Request::Create {
                xid,
                flags: FLAGS_EPHEMERAL_SEQUENTIAL,
                ..
            } => Some(xid),
            _ => None,
        }
    }
}

/// Parses a request frame body; None if it is too short or malformed.
pub(crate) fn parse_request(body: &[u8], first: bool) -> Option<Request> {
    if first {
        return Some(Request::Connect);
    }
    let mut r = Reader(body);
    let xid = r.i32()?;
    let op = r.i32()?;
    if op == OP_CREATE || op == OP_CREATE2 {
        let (path, flags) = parse_create_body(r.0)?;
        return Some(Request::Create {
            xid,
            op,
            path,
            flags,
        });
    }
    Some(Request::Other { xid, op })
}

/// Parses a CreateRequest (after the request header) into its path and flags.
pub(crate) fn parse_create_body(body: &[u8]) -> Option<(String, i32)> {
    let mut r = Reader(body);
    let path = r.ustring()?.unwrap_or_default();
    r.buffer()?;
    let acl_count = r.i32()?;
    for _ in 0..acl_count.max(0) {
        r.i32()?;
        r.ustring()?;
        r.ustring()?;
    }
    let flags = r.i32()?;
    Some((path, flags))
}

/// The xid of a reply frame body; None for the handshake or a short frame.
pub(crate) fn reply_xid(body: &[u8], first: bool) -> Option<i32> {
    if first {
        return None;
    }
    Reader(body).i32()
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.bytes(4)?.try_into().ok()?))
    }

    /// A length-prefixed byte buffer; length -1 is null.
    fn buffer(&mut self) -> Option<Option<&[u8]>> {
        let len = self.i32()?;
        if len < 0 {
            return Some(None);
        }
        self.bytes(len as usize).map(Some)
    }

    fn ustring(&mut self) -> Option<Option<String>> {
        Some(
            self.buffer()?
                .map(|b| String::from_utf8_lossy(b).into_owned()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ustring(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as i32).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    fn create(
        xid: i32,
        op: i32,
        path: &str,
        data: Option<&[u8]>,
        acls: usize,
        flags: i32,
    ) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&xid.to_be_bytes());
        body.extend_from_slice(&op.to_be_bytes());
        ustring(&mut body, path);
        match data {
            Some(d) => {
                body.extend_from_slice(&(d.len() as i32).to_be_bytes());
                body.extend_from_slice(d);
            }
            None => body.extend_from_slice(&(-1i32).to_be_bytes()),
        }
        body.extend_from_slice(&(acls as i32).to_be_bytes());
        for _ in 0..acls {
            body.extend_from_slice(&31i32.to_be_bytes());
            ustring(&mut body, "world");
            ustring(&mut body, "anyone");
        }
        body.extend_from_slice(&flags.to_be_bytes());
        frame(&body)
    }

    fn stream() -> Vec<u8> {
        let mut s = frame(&[0u8; 45]);
        s.extend(frame(&[0, 0, 0, 1, 0, 0, 0, 11]));
        s.extend(create(2, OP_CREATE2, "/lock/_c_x-lock-", Some(b"{}"), 1, 3));
        s.extend(create(3, OP_CREATE, "/lock", None, 2, 0));
        s
    }

    fn parse_all(frames: &[Frame]) -> Vec<Request> {
        frames
            .iter()
            .map(|f| parse_request(&f.body, f.first).expect("parses"))
            .collect()
    }

    #[test]
    fn splits_a_stream_in_one_chunk() {
        let s = stream();
        let frames = FrameSplitter::new().push(&s);
        assert_eq!(frames.len(), 4);
        assert_eq!(frames[3].end, s.len());
        let requests = parse_all(&frames);
        assert_eq!(requests[0], Request::Connect);
        assert_eq!(requests[1], Request::Other { xid: 1, op: 11 });
        assert_eq!(
            requests[2],
            Request::Create {
                xid: 2,
                op: OP_CREATE2,
                path: "/lock/_c_x-lock-".into(),
                flags: 3
            }
        );
        assert_eq!(requests[2].ephemeral_sequential_create_xid(), Some(2));
        assert_eq!(
            requests[3],
            Request::Create {
                xid: 3,
                op: OP_CREATE,
                path: "/lock".into(),
                flags: 0
            }
        );
        assert_eq!(requests[3].ephemeral_sequential_create_xid(), None);
    }

    #[test]
    fn same_frames_whatever_the_chunking() {
        let s = stream();
        let whole = FrameSplitter::new().push(&s);
        for size in [1, 2, 3, 5, 7, 64] {
            let mut splitter = FrameSplitter::new();
            let mut got = Vec::new();
            let mut offset = 0;
            for chunk in s.chunks(size) {
                for f in splitter.push(chunk) {
                    assert!(f.end <= chunk.len());
                    got.push(Frame {
                        end: offset + f.end,
                        ..f
                    });
                }
                offset += chunk.len();
            }
            assert_eq!(got, whole, "chunk size {size}");
        }
    }

    #[test]
    fn empty_frame_completes_at_chunk_end() {
        let frames = FrameSplitter::new().push(&[0, 0, 0, 0]);
        assert_eq!(
            frames,
            vec![Frame {
                end: 4,
                first: true,
                body: vec![]
            }]
        );
    }

    #[test]
    fn nonsense_length_stops_parsing() {
        let mut splitter = FrameSplitter::new();
        assert!(splitter.push(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]).is_empty());
        assert!(!splitter.in_sync());
        assert!(splitter.push(&stream()).is_empty());
    }

    #[test]
    fn truncated_create_is_malformed() {
        let c = create(5, OP_CREATE, "/a", Some(b"x"), 1, 3);
        let body = &c[4..c.len() - 2];
        assert_eq!(parse_request(body, false), None);
    }

    #[test]
    fn reply_xid_skips_the_handshake() {
        let mut reply = 7i32.to_be_bytes().to_vec();
        reply.extend_from_slice(&[0; 12]);
        assert_eq!(reply_xid(&reply, false), Some(7));
        assert_eq!(reply_xid(&reply, true), None);
    }
}
