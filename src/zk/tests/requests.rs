//! Every request's bytes, as kazoo writes them.

use super::{acls, hex};
use crate::zk::jute::Writer;
use crate::zk::ops::{CreateMode, MultiOp, ReadOp, Request};
use crate::zk::records::{ConnectRequest, xid};

/// The packet `request` makes with `xid`.
fn packet(request: Request, xid: i32, chroot: &str) -> Vec<u8> {
    let mut out = Vec::new();
    request.write_packet(xid, chroot, &mut out);
    out
}

fn path(p: &str) -> String {
    p.to_owned()
}

#[test]
fn connect_request() {
    let mut w = Writer::default();
    ConnectRequest {
        last_zxid_seen: 0x55,
        timeout_ms: 30000,
        session_id: 0x0102_0304_0506_0708,
        password: vec![b'p'; 16],
        read_only: true,
    }
    .write(&mut w);
    let mut framed = (w.bytes.len() as i32).to_be_bytes().to_vec();
    framed.extend(w.bytes);
    assert_eq!(
        framed,
        hex(
            "0000002d000000000000000000000055000075300102030405060708000000107070707070707070707070707070707001"
        )
    );
}

#[test]
fn requests_match_kazoo() {
    let create = Request::Create {
        path: path("/q/_c_x-lock-"),
        data: b"d".to_vec(),
        acl: acls(),
        mode: CreateMode::EphemeralSequential,
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "create2 below a chroot",
            packet(create, 1, "/app"),
            "00000057000000010000000f000000112f6170702f712f5f635f782d6c6f636b2d0000000164000000020000001f00000005776f726c6400000006616e796f6e65000000010000000664696765737400000004753a683d00000003",
        ),
        (
            "createContainer",
            packet(
                Request::Create {
                    path: path("/q"),
                    data: vec![],
                    acl: acls()[..1].to_vec(),
                    mode: CreateMode::Container,
                },
                2,
                "",
            ),
            "000000310000000200000013000000022f7100000000000000010000001f00000005776f726c6400000006616e796f6e6500000004",
        ),
        (
            "delete",
            packet(
                Request::Delete {
                    path: path("/q/n"),
                    version: -1,
                },
                3,
                "",
            ),
            "000000140000000300000002000000042f712f6effffffff",
        ),
        (
            "setData",
            packet(
                Request::SetData {
                    path: path("/q/n"),
                    data: b"xy".to_vec(),
                    version: 7,
                },
                4,
                "",
            ),
            "0000001a0000000400000005000000042f712f6e00000002787900000007",
        ),
        (
            "exists with a watch",
            packet(
                Request::Exists {
                    path: path("/q/n"),
                    watch: true,
                },
                5,
                "",
            ),
            "000000110000000500000003000000042f712f6e01",
        ),
        (
            "getData",
            packet(
                Request::GetData {
                    path: path("/q/n"),
                    watch: false,
                },
                6,
                "",
            ),
            "000000110000000600000004000000042f712f6e00",
        ),
        (
            "getChildren2 with a watch",
            packet(
                Request::GetChildren {
                    path: path("/q"),
                    watch: true,
                },
                7,
                "",
            ),
            "0000000f000000070000000c000000022f7101",
        ),
        (
            "getACL",
            packet(Request::GetAcl { path: path("/q") }, 8, ""),
            "0000000e0000000800000006000000022f71",
        ),
        (
            "sync",
            packet(Request::Sync { path: path("/q") }, 9, ""),
            "0000000e0000000900000009000000022f71",
        ),
        (
            "setACL",
            packet(
                Request::SetAcl {
                    path: path("/q/n"),
                    acl: acls(),
                    version: 4,
                },
                15,
                "",
            ),
            "000000450000000f00000007000000042f712f6e000000020000001f00000005776f726c6400000006616e796f6e65000000010000000664696765737400000004753a683d00000004",
        ),
        (
            "multi",
            packet(
                Request::Multi(vec![
                    MultiOp::Check {
                        path: path("/q/a"),
                        version: -1,
                    },
                    MultiOp::Create {
                        path: path("/q/b"),
                        data: b"v".to_vec(),
                        acl: acls()[..1].to_vec(),
                        mode: CreateMode::Ephemeral,
                    },
                    MultiOp::Delete {
                        path: path("/q/c"),
                        version: 2,
                    },
                ]),
                10,
                "",
            ),
            "000000700000000a0000000e0000000d00ffffffff000000042f712f61ffffffff0000000100ffffffff000000042f712f620000000176000000010000001f00000005776f726c6400000006616e796f6e65000000010000000200ffffffff000000042f712f6300000002ffffffff01ffffffff",
        ),
        (
            "multiRead",
            packet(
                Request::MultiRead(vec![
                    ReadOp::GetData(path("/q/a")),
                    ReadOp::GetChildren(path("/q")),
                ]),
                11,
                "",
            ),
            "000000330000000b000000160000000400ffffffff000000042f712f61000000000800ffffffff000000022f7100ffffffff01ffffffff",
        ),
        (
            "whoAmI",
            packet(Request::WhoAmI, 12, ""),
            "000000080000000c0000006b",
        ),
        (
            "digest auth",
            packet(
                Request::Auth {
                    scheme: "digest".into(),
                    auth: b"user:secret".to_vec(),
                },
                xid::AUTH,
                "",
            ),
            "00000025fffffffc0000006400000000000000066469676573740000000b757365723a736563726574",
        ),
        (
            "sasl",
            packet(Request::Sasl { token: vec![1, 2] }, 13, ""),
            "0000000e0000000d00000066000000020102",
        ),
        (
            "setWatches",
            packet(
                Request::SetWatches {
                    relative_zxid: 0x77,
                    data: vec![path("/d")],
                    exist: vec![],
                    child: vec![path("/c1"), path("/c2")],
                },
                xid::SET_WATCHES,
                "",
            ),
            "00000030fffffff800000065000000000000007700000001000000022f640000000000000002000000032f6331000000032f6332",
        ),
        (
            "ping",
            packet(Request::Ping, xid::PING, ""),
            "00000008fffffffe0000000b",
        ),
        (
            "closeSession",
            packet(Request::CloseSession, 14, ""),
            "000000080000000efffffff5",
        ),
    ];
    for (name, bytes, golden) in cases {
        assert_eq!(bytes, hex(golden), "{name}");
    }
}
