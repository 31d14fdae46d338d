"""Records given to 4.x clients name the broker's remoting port as their store host."""

from __future__ import annotations

import struct

from broker.remoting4x.consuming import with_store_port
from common.codec import decode_record, encode_host, encode_record


def record(sys_flag: int, store: tuple[str, int], phys: int) -> bytes:
    born = ("::1", 5) if sys_flag & 0x10 else ("10.0.0.1", 5)
    return encode_record(
        queue_id=1, flag=0, queue_offset=0, physical_offset=phys, sys_flag=sys_flag,
        born_timestamp=1, born_host=encode_host(*born), store_timestamp=2,
        store_host=encode_host(*store), reconsume_times=0, prepared_transaction_offset=0,
        body=b"body", topic=b"T", properties=b"")


def test_each_record_s_store_port_is_rewritten_and_nothing_else() -> None:
    raw = (record(0, ("127.0.0.1", 10911), 0) + record(0x10, ("127.0.0.1", 10911), 100)
           + record(0x20, ("::1", 10911), 200) + record(0x30, ("::1", 10911), 300))
    patched = with_store_port(raw, 10915)
    assert len(patched) == len(raw)
    pos = 0
    for _ in range(4):
        before, after = decode_record(raw, pos), decode_record(patched, pos)
        assert after.store_host == (before.store_host[0], 10915)
        assert (after.body, after.born_host, after.commit_log_offset) == (
            before.body, before.born_host, before.commit_log_offset)
        pos += struct.unpack_from(">i", raw, pos)[0]
    assert with_store_port(raw, 0) == raw and with_store_port(b"", 10915) == b""
