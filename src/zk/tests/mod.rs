//! The codec against kazoo's serializer, and the session against a
//! scripted server. The golden hex is what src/zk/golden.py printed with
//! kazoo 2.10.0.

mod answers;
mod auth;
mod bounds;
mod patience;
mod requests;
mod script;
mod session;

use crate::zk::records::{Acl, Stat};

pub fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

pub fn acls() -> Vec<Acl> {
    vec![
        Acl {
            perms: 31,
            scheme: "world".into(),
            id: "anyone".into(),
        },
        Acl {
            perms: 1,
            scheme: "digest".into(),
            id: "u:h=".into(),
        },
    ]
}

pub const STAT: Stat = Stat {
    czxid: 10,
    mzxid: 11,
    ctime: 1_700_000_000_000,
    mtime: 1_700_000_000_001,
    version: 2,
    cversion: 3,
    aversion: 4,
    ephemeral_owner: 0x1234,
    data_length: 5,
    num_children: 6,
    pzxid: 12,
};
