from __future__ import annotations

import struct

import crc32c
import pytest

from common import native
from common.codec import (
    CorruptRecord,
    decode_offset_msg_id,
    decode_properties,
    decode_record,
    encode_blank,
    encode_offset_msg_id,
    encode_properties,
    encode_record,
    java_string_hash,
    record_properties,
    record_property_values,
    tags_code,
)
from common.constants import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE
from store.dispatch import parse_dispatch


def test_record_bytes_written_out_by_hand() -> None:
    body = b"hello"
    props = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02"
    expected = b"".join([
        struct.pack(">i", 88 + 5 + 1 + 6 + 2 + len(props)),  # TOTALSIZE
        bytes.fromhex("DAA320A7"),  # MAGICCODE
        struct.pack(">i", crc32c.crc32c(body) & 0x7FFFFFFF),  # BODYCRC
        struct.pack(">i", 3),  # QUEUEID
        struct.pack(">i", 7),  # FLAG
        struct.pack(">q", 42),  # QUEUEOFFSET
        struct.pack(">q", 1000),  # PHYSICALOFFSET
        struct.pack(">i", 0),  # SYSFLAG
        struct.pack(">q", 1_700_000_000_000),  # BORNTIMESTAMP
        bytes([10, 0, 0, 1]) + struct.pack(">i", 5555),  # BORNHOST
        struct.pack(">q", 1_700_000_000_123),  # STORETIMESTAMP
        bytes([127, 0, 0, 1]) + struct.pack(">i", 10911),  # STOREHOST
        struct.pack(">i", 2),  # RECONSUMETIMES
        struct.pack(">q", 0),  # PREPARED TRANSACTION OFFSET
        struct.pack(">i", 5) + body,
        bytes([6]) + b"TopicA",
        struct.pack(">h", len(props)) + props,
    ])
    record = encode_record(
        queue_id=3, flag=7, queue_offset=42, physical_offset=1000, sys_flag=0,
        born_timestamp=1_700_000_000_000, born_host=bytes([10, 0, 0, 1, 0, 0, 0x15, 0xB3]),
        store_timestamp=1_700_000_000_123, store_host=bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F]),
        reconsume_times=2, prepared_transaction_offset=0, body=body, topic=b"TopicA",
        properties=props,
    )
    assert record == expected
    msg = decode_record(expected)
    assert msg.store_size == len(expected)
    assert (msg.queue_id, msg.flag, msg.queue_offset, msg.commit_log_offset) == (3, 7, 42, 1000)
    assert msg.born_host == ("10.0.0.1", 5555)
    assert msg.store_host == ("127.0.0.1", 10911)
    assert msg.store_timestamp == 1_700_000_000_123
    assert msg.reconsume_times == 2
    assert msg.body == body and msg.topic == "TopicA"
    assert msg.properties == {"TAGS": "TagA", "KEYS": "k1 k2"}
    assert msg.keys == ["k1", "k2"]
    assert msg.msg_id == "7F00000100002A9F00000000000003E8"


def test_ipv6_hosts_set_sys_flags_and_round_trip() -> None:
    born = bytes.fromhex("20010db8000000000000000000000001") + struct.pack(">i", 1234)
    store = bytes.fromhex("00000000000000000000000000000001") + struct.pack(">i", 10911)
    record = encode_record(
        queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0x10 | 0x20,
        born_timestamp=1, born_host=born, store_timestamp=2, store_host=store,
        reconsume_times=0, prepared_transaction_offset=0, body=b"x", topic=b"T",
        properties=b"",
    )
    assert len(record) == 88 + 24 + 1 + (1 + 1) + 2  # header, body, topic, properties
    msg = decode_record(record)
    assert msg.born_host == ("2001:db8::1", 1234)
    assert msg.store_host == ("::1", 10911)
    assert decode_offset_msg_id(msg.msg_id) == (("::1", 10911), 0)
    r = parse_dispatch(record, 0)
    assert not isinstance(r, int)
    assert r.store_timestamp == 2 and r.topic == "T"


def test_properties_codec() -> None:
    props = {"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "ABC", "empty": "", "ü": "ö"}
    data = encode_properties(props)
    assert data.startswith(b"TAGS\x01a\x02KEYS\x01k1 k2\x02")
    assert data.endswith(b"\x02")
    assert decode_properties(data) == props
    assert decode_properties(b"") == {}


def test_java_hash_and_tags_code() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -2147483648
    assert tags_code(None) == 0 and tags_code("") == 0
    assert tags_code("TagA") == java_string_hash("TagA")


def test_blank_and_corruption_detection() -> None:
    blank = encode_blank(100) + bytes(92)
    assert struct.unpack(">ii", blank[:8]) == (100, BLANK_MAGIC_CODE)
    assert parse_dispatch(blank, 0) == 100
    assert parse_dispatch(bytes(64), 0) == 0
    record = bytearray(encode_record(
        queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=0, born_timestamp=0,
        born_host=bytes(8), store_timestamp=0, store_host=bytes(8), reconsume_times=0,
        prepared_transaction_offset=0, body=b"payload", topic=b"T", properties=b""))
    assert struct.unpack(">i", record[4:8])[0] == MESSAGE_MAGIC_CODE
    record[90] ^= 0xFF  # inside the body
    with pytest.raises(CorruptRecord, match="CRC"):
        parse_dispatch(bytes(record), 0)
    with pytest.raises(CorruptRecord):
        decode_record(bytes(record[:50]))


def test_offset_msg_id() -> None:
    msg_id = encode_offset_msg_id(("192.168.0.7", 10911), 123456789)
    assert len(msg_id) == 32 and msg_id == msg_id.upper()
    assert decode_offset_msg_id(msg_id) == (("192.168.0.7", 10911), 123456789)
    with pytest.raises(ValueError):
        decode_offset_msg_id("XYZ")


def _record(sys_flag: int, body: bytes, topic: bytes, properties: bytes) -> bytes:
    v4 = bytes([127, 0, 0, 1]) + struct.pack(">i", 1)
    v6 = bytes(15) + b"\x01" + struct.pack(">i", 1)
    return encode_record(
        queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=sys_flag,
        born_timestamp=1, born_host=v6 if sys_flag & 0x10 else v4, store_timestamp=2,
        store_host=v6 if sys_flag & 0x20 else v4, reconsume_times=0,
        prepared_transaction_offset=0, body=body, topic=topic, properties=properties)


@pytest.mark.parametrize("sys_flag", [0, 0x10, 0x20, 0x30])
def test_property_values_of_a_record(sys_flag: int) -> None:
    props = encode_properties({"TAGS": "x", "a": "7", "xa": "no", "empty": "", "ü": "ö"})
    record = _record(sys_flag, b"a\x017\x02" * 50, b"TopicA", props)
    assert record_properties(record) == props
    names = (b"a", b"TAGS", b"missing", b"empty", "ü".encode(), b"x")
    expected = (b"7", b"x", None, b"", "ö".encode(), None)
    assert record_property_values(record, names) == expected
    if native.lib is not None:  # the C fast path reads the same
        assert native.lib.property_values(record, names) == expected
        assert native.lib.property_values(record, ()) == ()
        for cut in (0, 10, len(record) - len(props) - 1):  # too short: left to Python
            assert native.lib.property_values(record[:cut], names) is None
    assert record_property_values(_record(sys_flag, b"", b"T", b""), (b"a",)) == (None,)
    assert record_properties(record[:10]) == b""
