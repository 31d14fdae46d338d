"""mqproto Message <-> store records: properties, reserved names, hosts, ids."""

from __future__ import annotations

import pytest

from broker.convert import (
    UniqKeyFactory,
    format_host,
    message_from_proto,
    message_to_proto,
    parse_host,
    peer_host,
)
from broker.status import RequestError
from common.codec import (
    decode_record,
    encode_host,
    encode_properties,
    encode_record,
)
from mqproto import common_pb2, messaging_pb2

M = messaging_pb2


def convert(pb: messaging_pb2.Message) -> object:
    return message_from_proto(pb, topic="T", queue_id=2, born_host=("10.1.2.3", 5555),
                              now_ms=1000, uniq_key="GENERATED")


def test_fields_and_properties() -> None:
    pb = M.Message(topic="T", flag=3, body=b"b", tag="TagA", keys=["k1", "k2"],
                   user_properties={"color": "red"},
                   system_properties=M.SystemProperties(message_id="ID1", born_timestamp=77,
                                                        born_host="192.168.0.9:123",
                                                        message_group="order-1",
                                                        reconsume_times=2))
    m = convert(pb)
    assert m.topic == "T" and m.queue_id == 2 and m.flag == 3 and m.body == b"b"
    assert m.properties == {"color": "red", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ID1",
                            "SHARDING_KEY": "order-1"}
    assert (m.born_timestamp, m.born_host, m.reconsume_times) == (77, ("192.168.0.9", 123), 2)


def test_defaults_come_from_the_broker() -> None:
    m = convert(M.Message(topic="T", body=b""))
    assert m.properties == {"UNIQ_KEY": "GENERATED"}
    assert (m.born_timestamp, m.born_host) == (1000, ("10.1.2.3", 5555))
    m = convert(M.Message(body=b"", system_properties=M.SystemProperties(born_host="host:1")))
    assert m.born_host == ("10.1.2.3", 5555)  # not an IP: the peer address is used


@pytest.mark.parametrize("pb", [
    M.Message(user_properties={"TAGS": "x"}),
    M.Message(user_properties={"UNIQ_KEY": "x"}),
    M.Message(user_properties={"DELAY": "3"}),
    M.Message(user_properties={"": "x"}),
    M.Message(user_properties={"a\x01b": "x"}),
    M.Message(user_properties={"a": "x\x02y"}),
    M.Message(tag="a\x02"),
    M.Message(keys=["with space"]),
    M.Message(keys=[""]),
])
def test_illegal_messages(pb: messaging_pb2.Message) -> None:
    with pytest.raises(RequestError) as e:
        convert(pb)
    assert e.value.code == common_pb2.MESSAGE_ILLEGAL


def test_record_back_to_proto() -> None:
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ID1", "color": "red",
             "RETRY_TOPIC": "T0", "SHARDING_KEY": "g"}
    record = encode_record(
        queue_id=1, flag=4, queue_offset=9, physical_offset=100, sys_flag=0, born_timestamp=5,
        born_host=encode_host("10.0.0.1", 40000), store_timestamp=6,
        store_host=encode_host("10.0.0.2", 10911), reconsume_times=1,
        prepared_transaction_offset=0, body=b"hello", topic=b"T",
        properties=encode_properties(props))
    ext = decode_record(record)
    pb = message_to_proto(ext)
    assert (pb.topic, pb.flag, pb.body, pb.tag, list(pb.keys)) == ("T", 4, b"hello", "TagA",
                                                                  ["k1", "k2"])
    assert dict(pb.user_properties) == {"color": "red"}
    sp = pb.system_properties
    assert sp.message_id == "ID1"
    assert sp.offset_msg_id == "0A00000200002A9F0000000000000064"
    assert (sp.born_host, sp.store_host) == ("10.0.0.1:40000", "10.0.0.2:10911")
    assert (sp.queue_id, sp.queue_offset, sp.commit_log_offset) == (1, 9, 100)
    assert (sp.born_timestamp, sp.store_timestamp, sp.reconsume_times) == (5, 6, 1)
    assert sp.store_size == len(record) and sp.body_crc == ext.body_crc
    assert sp.message_group == "g"
    assert dict(sp.reserved_properties) == {"RETRY_TOPIC": "T0"}
    assert sp.transaction_type == M.TRANSACTION_NOT_TYPE


def test_hosts() -> None:
    assert parse_host("1.2.3.4:5") == ("1.2.3.4", 5)
    assert parse_host("[::1]:5") == ("::1", 5)
    assert parse_host("name:5") is None and parse_host("1.2.3.4") is None
    assert format_host(("::1", 5)) == "[::1]:5"
    assert peer_host("ipv4:127.0.0.1:4321") == ("127.0.0.1", 4321)
    assert peer_host("ipv6:[::1]:4321") == ("::1", 4321)
    assert peer_host("unix:/tmp/x") == ("127.0.0.1", 0)


def test_uniq_keys_are_distinct_32_hex() -> None:
    f = UniqKeyFactory("10.0.0.1")
    keys = {f(1_700_000_000_000) for _ in range(1000)}
    assert len(keys) == 1000
    key = next(iter(keys))
    assert len(key) == 32 and key == key.upper() and key.startswith("0A000001")
