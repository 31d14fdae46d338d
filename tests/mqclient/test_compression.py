"""Body compression: the codec and sysflag marks against RocketMQ 5's (MessageSysFlag,
CompressionType, the Java compressors' stream formats), the wire field, and end to end
through a real broker: every send kind, push consumers, mqadmin, filters, key lookups, and
a body that cannot be decompressed."""

from __future__ import annotations

import json
import threading
import zlib

import grpc
import lz4.frame
import pytest
import zstandard

from common import native
from common.codec import encode_host, encode_properties, encode_record
from common.compression import (
    COMPRESSED_FLAG,
    COMPRESSION_LZ4_TYPE,
    COMPRESSION_TYPE_COMPARATOR,
    COMPRESSION_ZLIB_TYPE,
    COMPRESSION_ZSTD_TYPE,
    PRODUCER_SYS_FLAGS,
    BodyCompressor,
    CompressionType,
    DecompressError,
    compress,
    compression_type,
    decompress_body,
)
from mqclient import ConsumeFromWhere, Message, MessageExt, MQClientError, Producer, PushConsumer
from mqclient.admin import AdminError, MQAdmin
from mqclient.codec import decode_records
from mqproto import common_pb2, messaging_pb2, messaging_pb2_grpc
from remoting.framing import SendBatchesWriter, encode_batch_message
from tests.mqclient.conftest import Cluster
from tests.support.brokers import pull_everything
from tests.support.waiting import wait_until

JSON_BODY = json.dumps([{"id": i, "name": f"user-{i}", "tags": ["a", "b"], "score": i * 1.5}
                        for i in range(200)]).encode()
TIMEOUT_S = 30.0


# -- the codec ---------------------------------------------------------------------------------
def test_sysflag_bits_and_type_values_are_rocketmq_5s() -> None:
    # MessageSysFlag: COMPRESSED_FLAG 0x1; COMPRESSION_{LZ4,ZSTD,ZLIB}_TYPE 1/2/3 << 8;
    # COMPRESSION_TYPE_COMPARATOR 0x7 << 8. CompressionType: LZ4(1), ZSTD(2), ZLIB(3).
    assert (COMPRESSED_FLAG, COMPRESSION_LZ4_TYPE, COMPRESSION_ZSTD_TYPE,
            COMPRESSION_ZLIB_TYPE, COMPRESSION_TYPE_COMPARATOR) == (1, 0x100, 0x200, 0x300,
                                                                    0x700)
    assert [(t.name, t.value) for t in CompressionType] == [("LZ4", 1), ("ZSTD", 2),
                                                            ("ZLIB", 3)]
    assert CompressionType.ZSTD.sys_flag == 0x201
    assert PRODUCER_SYS_FLAGS == 0x701
    # findByValue: 0 (clients before the type bits) is ZLIB; 4-7 are no type.
    assert compression_type(0x1) is CompressionType.ZLIB
    assert compression_type(0x101 | 0x10) is CompressionType.LZ4
    with pytest.raises(DecompressError, match="unknown compression type 5"):
        compression_type(0x501)
    assert CompressionType.of(" zstd ") is CompressionType.ZSTD
    with pytest.raises(ValueError, match="unsupported compress type"):
        CompressionType.of("snappy")


@pytest.mark.parametrize("kind", list(CompressionType))
def test_round_trip_in_the_java_compressors_formats(kind: CompressionType) -> None:
    data = compress(JSON_BODY, kind, 5 if kind is not CompressionType.ZSTD else 3)
    assert len(data) < len(JSON_BODY) / 3
    assert decompress_body(data, kind.sys_flag) == JSON_BODY
    # What the Java side writes and reads: a zlib stream (Deflater), an LZ4 frame
    # (LZ4FrameOutputStream), a zstd frame (ZstdOutputStream).
    if kind is CompressionType.ZLIB:
        assert zlib.decompress(data) == JSON_BODY
    elif kind is CompressionType.LZ4:
        assert data[:4] == b"\x04\x22\x4d\x18" and lz4.frame.decompress(data) == JSON_BODY
    else:
        assert data[:4] == b"\x28\xb5\x2f\xfd"
    # A Java producer's frames: streamed, without a content size in the zstd header.
    if kind is CompressionType.ZSTD:
        cobj = zstandard.ZstdCompressor().compressobj()
        streamed = cobj.compress(JSON_BODY) + cobj.flush()
        assert decompress_body(streamed, kind.sys_flag) == JSON_BODY


def test_a_body_is_compressed_from_the_threshold_on() -> None:
    c = BodyCompressor("zstd", 3, over=100)
    assert c.compress(b"x" * 99) == (b"x" * 99, 0)
    body, flag = c.compress(b"x" * 100)
    assert flag == 0x201 and decompress_body(body, flag) == b"x" * 100
    assert decompress_body(b"plain", 0x200) == b"plain"  # type bits without COMPRESSED
    for bad in (("zlib", 10), ("zstd", 0), ("lz4", 17), ("zlib", True)):
        with pytest.raises(ValueError, match="compress level"):
            BodyCompressor(*bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="over_howmuch"):
        BodyCompressor("zlib", 5, -1)


@pytest.mark.parametrize("kind", list(CompressionType))
def test_bad_compressed_bytes_give_a_clear_error(kind: CompressionType) -> None:
    good = compress(JSON_BODY, kind)
    for bad in (b"not compressed at all", good[: len(good) // 2], b""):
        with pytest.raises(DecompressError, match=f"^{kind.name} body of {len(bad)} bytes"):
            decompress_body(bad, kind.sys_flag)
    with pytest.raises(DecompressError, match="over 1000"):
        decompress_body(good, kind.sys_flag, max_size=1000)


def test_the_send_batches_writer_writes_sys_flags_as_protobuf_does() -> None:
    elements = [encode_batch_message(0, b"a", b""), encode_batch_message(0, b"bb", b"")]
    writer = SendBatchesWriter("PG", 4)
    writer.add("T", 1, elements, sum(map(len, elements)), 1234, [0, 0x201])
    writer.add("U", 2, elements[:1], len(elements[0]), 1234, None)
    expected = messaging_pb2.SendBatchesRequest(batches=[
        messaging_pb2.SendBatchRequest(producer_group="PG", topic="T", queue_id=1,
                                       default_topic_queue_nums=4,
                                       encoded_messages=b"".join(elements),
                                       born_timestamp=1234, sys_flags=[0, 0x201]),
        messaging_pb2.SendBatchRequest(producer_group="PG", topic="U", queue_id=2,
                                       default_topic_queue_nums=4,
                                       encoded_messages=elements[0], born_timestamp=1234)])
    assert b"".join(writer.parts()) == expected.SerializeToString()


def _record(body: bytes, sys_flag: int) -> bytes:
    return encode_record(
        queue_id=0, flag=0, queue_offset=0, physical_offset=0, sys_flag=sys_flag,
        born_timestamp=1, born_host=encode_host("127.0.0.1", 1), store_timestamp=2,
        store_host=encode_host("127.0.0.1", 2), reconsume_times=0,
        prepared_transaction_offset=0, body=body, topic=b"T",
        properties=encode_properties({"UNIQ_KEY": "ID1", "TAGS": "t"}))


@pytest.mark.parametrize("fast", [True, False])
def test_pulled_records_are_decompressed_by_both_decoders(
        fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not fast:
        monkeypatch.setattr(native, "lib", None)
    elif native.lib is None:
        pytest.skip("no C extension built")
    raw = (_record(compress(JSON_BODY, "lz4"), 0x101) + _record(b"plain", 0)
           + _record(b"garbage", 0x301))
    good, plain, bad = decode_records(raw, "b")
    assert (good.body, good.sys_flag, good.body_error) == (JSON_BODY, 0x100, "")
    assert (plain.body, plain.sys_flag) == (b"plain", 0)
    assert bad.body == b"garbage" and bad.sys_flag == 0x301
    assert bad.body_error.startswith("ZLIB body of 7 bytes cannot be decompressed")


# -- end to end --------------------------------------------------------------------------------
class Bodies:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[MessageExt] = []

    def __call__(self, msgs: list[MessageExt]) -> None:
        with self.lock:
            self.got.extend(msgs)

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [m.body for m in self.got]


def _consumer(cluster: Cluster, consumers: list[PushConsumer], group: str, topic: str,
              listener: object, expression: str = "*") -> PushConsumer:
    c = PushConsumer(group, cluster.namesrv_addr,
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(topic, expression)
    c.register_listener_concurrently(listener)  # type: ignore[arg-type]
    consumers.append(c)
    return c.start()


def test_every_send_kind_compresses_and_every_reader_decompresses(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    broker = cluster.start_broker("broker-a")
    big = [JSON_BODY + b"%d" % i for i in range(6)]
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=1,
                  compress_type="zstd", compress_level=3) as producer:
        sync = producer.send(Message("TopicZ", big[0], tags="A", keys=["k-sync"]))
        small = producer.send(Message("TopicZ", b"small", tags="B", keys=["k-small"]))
        futures = [producer.send_async(Message("TopicZ", big[1], tags="A")),
                   producer.send_async(Message("TopicZ", b"small-async", tags="B"))]
        producer.send_oneway(Message("TopicZ", big[2], tags="A"))
        batch = producer.send_batch([Message("TopicZ", big[3], tags="A", keys=["k-batch"]),
                                     Message("TopicZ", b"small-batch", tags="B")])
        orderly = producer.send_orderly(Message("TopicZ", big[4], tags="A"), "key")
        for f in futures:
            f.result(TIMEOUT_S)
        producer.flush()
    with Producer("PG2", cluster.namesrv_addr, compress_type="lz4") as lz4_producer:
        lz4_producer.send(Message("TopicZ", big[5], tags="A"))
    with Producer("PG3", cluster.namesrv_addr, compress_msg_body_over_howmuch=1 << 30
                  ) as plain_producer:
        plain_producer.send(Message("TopicZ", JSON_BODY, tags="A"))
    expected = sorted([*big, JSON_BODY, b"small", b"small-async", b"small-batch"])

    # The store keeps what it was sent: compressed bodies, marked.
    stored = pull_everything(messaging_pb2_grpc.MessagingServiceStub(
        grpc.insecure_channel(broker.address)), "TopicZ", 0)
    # (async and one-way sends may be stored in any order among themselves)
    as_stored = sorted((m.system_properties.sys_flag & 0x701,
                        decompress_body(m.body, m.system_properties.sys_flag)) for m in stored)
    assert as_stored == sorted([(0x201, b) for b in big[:5]] + [(0x101, big[5])]
                               + [(0, b) for b in (b"small", b"small-async", b"small-batch",
                                                   JSON_BODY)])
    assert all(len(m.body) < len(JSON_BODY) / 3 for m in stored
               if m.system_properties.sys_flag & 1)

    everything, only_a = Bodies(), Bodies()
    _consumer(cluster, consumers, "CG", "TopicZ", everything)
    _consumer(cluster, consumers, "CG-A", "TopicZ", only_a, "A")  # tag filter
    wait_until(lambda: len(everything.bodies()) >= len(expected), timeout=TIMEOUT_S)
    assert sorted(everything.bodies()) == expected
    assert all(m.sys_flag & 1 == 0 and not m.body_error for m in everything.got)
    wait_until(lambda: len(only_a.bodies()) >= 7, timeout=TIMEOUT_S)
    assert sorted(only_a.bodies()) == sorted([*big, JSON_BODY])

    with MQAdmin(cluster.namesrv_addr) as admin:
        m = admin.query_msg_by_id(sync.offset_msg_id)
        assert m.body == big[0] and m.sys_flag & 0x701 == 0x200 and not m.body_error
        assert admin.query_msg_by_id(small.offset_msg_id).body == b"small"
        [k] = admin.query_msg_by_key("TopicZ", "k-batch")  # the index reads properties
        assert k.body == big[3] and k.msg_id == batch[0].msg_id
        read = admin.consume_messages("TopicZ")
        assert sorted(r.body for r in read) == expected
        assert admin.query_msg_by_id(orderly.offset_msg_id).body == big[4]


def test_a_body_that_cannot_be_decompressed_goes_to_the_dead_letter_queue(
        cluster: Cluster, consumers: list[PushConsumer], capsys: pytest.CaptureFixture[str]
        ) -> None:
    broker = cluster.start_broker("broker-a")
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=1) as producer:
        producer.send(Message("TopicBad", b"before"))
        # A message marked ZSTD whose bytes are not: as a broken producer would send it.
        stub = messaging_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(broker.address))
        r = stub.SendBatch(messaging_pb2.SendBatchRequest(
            producer_group="PG", topic="TopicBad", queue_id=0,
            encoded_messages=encode_batch_message(
                0, b"not zstd at all",
                b"UNIQ_KEY\x01BAD0000000000000000000000000001\x02KEYS\x01bad-key\x02"),
            sys_flags=[0x201]), timeout=TIMEOUT_S)
        assert r.status.code == common_pb2.SUCCESS
        refused = stub.SendBatch(messaging_pb2.SendBatchRequest(
            producer_group="PG", topic="TopicBad", encoded_messages=encode_batch_message(
                0, b"x", b""), sys_flags=[0x4]), timeout=TIMEOUT_S)  # a transaction bit
        assert refused.status.code == common_pb2.MESSAGE_ILLEGAL
        assert "sets only the bits 0x701" in refused.status.remark
        producer.send(Message("TopicBad", b"after"))

    got = Bodies()
    _consumer(cluster, consumers, "CG", "TopicBad", got)
    wait_until(lambda: len(got.bodies()) >= 2, timeout=TIMEOUT_S)
    with MQAdmin(cluster.namesrv_addr) as admin:
        wait_until(lambda: _dlq_size(admin, "CG") == 1, timeout=TIMEOUT_S,
                   message="the undecodable message in %DLQ%CG")
        [dead] = admin.query_msg_by_key("%DLQ%CG", "bad-key")  # its keys kept
        assert dead.msg_id == "BAD0000000000000000000000000001"
        assert dead.body == b"not zstd at all"  # as stored, with the reason
        assert dead.body_error.startswith("ZSTD body of 15 bytes cannot be decompressed")
    assert sorted(got.bodies()) == [b"after", b"before"]  # the listener never saw it


def _dlq_size(admin: MQAdmin, group: str) -> int:
    try:
        return admin.topic_status(f"%DLQ%{group}")[0].max_offset
    except AdminError:  # not created yet
        return 0


def test_bad_options_are_refused(cluster: Cluster) -> None:
    with pytest.raises(MQClientError, match="ILLEGAL_ARGUMENT: unsupported compress type"):
        Producer("PG", cluster.namesrv_addr, compress_type="gzip")
    with pytest.raises(MQClientError, match="ILLEGAL_ARGUMENT: compress level"):
        Producer("PG", cluster.namesrv_addr, compress_type="zlib", compress_level=12)
