//! Every answer's decoding, as kazoo decodes it, and round trips.

use super::{STAT, acls, hex};
use crate::zk::answers::{MultiResult, Response};
use crate::zk::jute::{Reader, Writer};
use crate::zk::ops::{CreateMode, Request};
use crate::zk::records::{ConnectResponse, Error, EventType, ReplyHeader, WatcherEvent};

fn path(p: &str) -> String {
    p.to_owned()
}

#[test]
fn handshake_and_header_answers_decode() {
    let bytes = hex("0000000000004e200102030405060708000000107070707070707070707070707070707001");
    let response = ConnectResponse::read(&mut Reader::new(&bytes)).unwrap();
    assert_eq!(
        response,
        ConnectResponse {
            timeout_ms: 20000,
            session_id: 0x0102_0304_0506_0708,
            password: vec![b'p'; 16],
            read_only: true,
        }
    );
    let mut w = Writer::default();
    response.write(&mut w);
    assert_eq!(w.bytes, bytes, "round trip");
    // A server before 3.4 sends no read-only flag.
    let old = &bytes[..bytes.len() - 1];
    assert!(
        !ConnectResponse::read(&mut Reader::new(old))
            .unwrap()
            .read_only
    );

    let header = ReplyHeader::read(&mut Reader::new(&hex("000000070000000000000099ffffff9b")));
    let header = header.unwrap();
    assert_eq!((header.xid, header.zxid), (7, 0x99));
    assert_eq!(Error::from_i32(header.err), Error::NoNode);

    let bytes = hex("0000000200000003000000082f6170702f712f6e");
    let event = WatcherEvent::read(&mut Reader::new(&bytes)).unwrap();
    assert_eq!(event.event_type, EventType::NodeDeleted);
    assert_eq!(event.path, "/app/q/n");
    let mut w = Writer::default();
    event.write(&mut w);
    assert_eq!(w.bytes, bytes, "round trip");
}

const STAT_HEX: &str = "000000000000000a000000000000000b0000018bcfe568000000018bcfe5680100000002000000030000000400000000000012340000000500000006000000000000000c";

/// Decodes `golden` (followed by the golden stat when `with_stat`) as the
/// answer to `request`, below the chroot /app.
fn answer(request: Request, golden: &str, with_stat: bool) -> Response {
    let mut bytes = hex(golden);
    if with_stat {
        bytes.extend(hex(STAT_HEX));
    }
    let mut r = Reader::new(&bytes);
    let response = request.read_response("/app", &mut r).unwrap();
    assert!(r.is_empty(), "{request:?}: bytes left over");
    response
}

#[test]
fn answers_decode_as_kazoo_decodes_them() {
    let mut w = Writer::default();
    STAT.write(&mut w);
    assert_eq!(w.bytes, hex(STAT_HEX), "stat round trip");

    let create = Request::Create {
        path: path("/q/_c_x-lock-"),
        data: vec![],
        acl: vec![],
        mode: CreateMode::EphemeralSequential,
    };
    assert_eq!(
        answer(
            create,
            "0000001b2f6170702f712f5f635f782d6c6f636b2d30303030303030303031",
            true
        ),
        Response::Created {
            path: path("/q/_c_x-lock-0000000001"),
            stat: STAT
        }
    );
    let get = Request::GetData {
        path: path("/q/n"),
        watch: false,
    };
    assert_eq!(
        answer(get, "0000000568656c6c6f", true),
        Response::Data {
            data: b"hello".to_vec(),
            stat: STAT
        }
    );
    let list = Request::GetChildren {
        path: path("/q"),
        watch: true,
    };
    assert_eq!(
        answer(list, "0000000200000001610000000162", true),
        Response::Children {
            children: vec![path("a"), path("b")],
            stat: STAT
        }
    );
    let acl = Request::GetAcl { path: path("/q") };
    assert_eq!(
        answer(
            acl,
            "000000010000001f00000005776f726c6400000006616e796f6e65",
            true
        ),
        Response::Acl {
            acl: acls()[..1].to_vec(),
            stat: STAT
        }
    );
    let exists = Request::Exists {
        path: path("/q"),
        watch: true,
    };
    assert_eq!(answer(exists, "", true), Response::Stat(STAT));
    let set_acl = Request::SetAcl {
        path: path("/q"),
        acl: acls(),
        version: -1,
    };
    assert_eq!(answer(set_acl, "", true), Response::Stat(STAT));
}

#[test]
fn multi_answers_decode_per_operation() {
    let multi = Request::Multi(vec![]);
    assert_eq!(
        answer(
            multi.clone(),
            "0000000d0000000000000000010000000000000000082f6170702f712f62000000020000000000ffffffff01ffffffff",
            false
        ),
        Response::Multi(vec![
            Ok(MultiResult::Checked),
            Ok(MultiResult::Created(path("/q/b"))),
            Ok(MultiResult::Deleted),
        ])
    );
    assert_eq!(
        answer(
            multi,
            "ffffffff00ffffff99ffffff99ffffffff00fffffffefffffffeffffffff01ffffffff",
            false
        ),
        Response::Multi(vec![
            Err(Error::BadVersion),
            Err(Error::RuntimeInconsistency)
        ])
    );
    // The operations before the one that failed carry 0: rolled back.
    assert_eq!(
        answer(
            Request::Multi(vec![]),
            "ffffffff000000000000000000ffffffff00ffffff99ffffff99ffffffff01ffffffff",
            false
        ),
        Response::Multi(vec![Err(Error::RolledBack), Err(Error::BadVersion)])
    );
}
