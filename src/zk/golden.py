"""Prints the golden bytes that src/zk/tests/ checks the codec against.

Run by hand, not by CI, with kazoo 2.10.0 (the venv .ci/test makes):
    target/kazoo-venv/bin/python src/zk/golden.py
Requests are framed as kazoo frames them (length, xid, type, record). kazoo
has no setWatches, multiRead or whoAmI: those are composed from kazoo's own
primitives. Answers are built with kazoo's structs and decoded back by
kazoo's deserializers, so both sides agree on each one.
"""
import struct

from kazoo.protocol import serialization as s
from kazoo.security import ACL, Id

ACLS = [ACL(31, Id("world", "anyone")), ACL(1, Id("digest", "u:h="))]
STAT = (10, 11, 1700000000000, 1700000000001, 2, 3, 4, 0x1234, 5, 6, 12)


def packet(xid, request):
    b = bytearray()
    if xid:
        b.extend(s.int_struct.pack(xid))
    if request.type:
        b.extend(s.int_struct.pack(request.type))
    b += request.serialize()
    return s.int_struct.pack(len(b)) + b


def raw(xid, type, body):
    b = s.int_struct.pack(xid) + s.int_struct.pack(type) + bytes(body)
    return s.int_struct.pack(len(b)) + b


def header(type, done=False, err=-1):
    return s.MultiHeader(type, done, err).serialize()


def show(name, data):
    print(f"{name} {bytes(data).hex()}")


connect = s.Connect(0, 0x55, 30000, 0x0102030405060708, b"p" * 16, True)
body = connect.serialize()
show("connect", s.int_struct.pack(len(body)) + body)
show("create2_ephemeral_sequential", packet(1, s.Create2("/app/q/_c_x-lock-", b"d", ACLS, 3)))
show("create_container", raw(2, 19, s.Create2("/q", b"", ACLS[:1], 4).serialize()))
show("delete", packet(3, s.Delete("/q/n", -1)))
show("set_data", packet(4, s.SetData("/q/n", b"xy", 7)))
show("exists_watch", packet(5, s.Exists("/q/n", True)))
show("get_data", packet(6, s.GetData("/q/n", False)))
show("get_children2_watch", packet(7, s.GetChildren2("/q", True)))
show("get_acl", packet(8, s.GetACL("/q")))
show("sync", packet(9, s.Sync("/q")))
show("set_acl", packet(15, s.SetACL("/q/n", ACLS, 4)))
show("multi", packet(10, s.Transaction([
    s.CheckVersion("/q/a", -1),
    s.Create("/q/b", b"v", ACLS[:1], 1),
    s.Delete("/q/c", 2),
])))
show("multi_read", raw(11, 22, header(4) + s.GetData("/q/a", False).serialize()
                       + header(8) + s.GetChildren("/q", False).serialize()
                       + header(-1, True)))
show("who_am_i", raw(12, 107, b""))
show("auth_digest", packet(-4, s.Auth(0, "digest", "user:secret")))
show("sasl", packet(13, s.SASL(b"\x01\x02")))
show("set_watches", raw(-8, 101, s.long_struct.pack(0x77)
                        + s.int_struct.pack(1) + s.write_string("/d")
                        + s.int_struct.pack(0)
                        + s.int_struct.pack(2) + s.write_string("/c1") + s.write_string("/c2")))
show("ping", packet(-2, s.Ping))
show("close", packet(14, s.Close))

# Answers (records after the reply header).
stat = s.stat_struct.pack(*STAT)
conn = (s.int_struct.pack(0) + s.int_struct.pack(20000)
        + s.long_struct.pack(0x0102030405060708) + s.write_buffer(b"p" * 16) + b"\x01")
assert s.Connect.deserialize(conn, 0)[0].read_only
show("connect_response", conn)
reply = s.reply_header_struct.pack(7, 0x99, -101)
assert s.ReplyHeader.deserialize(reply, 0)[0] == (7, 0x99, -101)
show("reply_header", reply)
created = s.write_string("/app/q/_c_x-lock-0000000001") + stat
assert s.Create2.deserialize(created, 0)[1].ephemeralOwner == 0x1234
show("create2_response", created)
data = s.write_buffer(b"hello") + stat
assert s.GetData.deserialize(data, 0)[0] == b"hello"
show("get_data_response", data)
children = s.int_struct.pack(2) + s.write_string("a") + s.write_string("b") + stat
assert s.GetChildren2.deserialize(children, 0)[0] == ["a", "b"]
show("get_children2_response", children)
acl = s.int_struct.pack(1) + struct.pack("!i", 31) + s.write_string("world") + s.write_string("anyone") + stat
assert s.GetACL.deserialize(acl, 0)[0][0].perms == 31
show("get_acl_response", acl)
multi = (header(13, False, 0) + header(1, False, 0) + s.write_string("/app/q/b")
         + header(2, False, 0) + header(-1, True))
assert s.Transaction.deserialize(multi, 0) == [True, "/app/q/b", True]
show("multi_response", multi)
failed = (header(-1, False, -103) + s.int_struct.pack(-103)
          + header(-1, False, -2) + s.int_struct.pack(-2) + header(-1, True))
show("multi_failed_response", failed)
event = struct.pack("!ii", 2, 3) + s.write_string("/app/q/n")
assert s.Watch.deserialize(event, 0)[0] == (2, 3, "/app/q/n")
show("watcher_event", event)
