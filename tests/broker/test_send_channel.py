"""The broker's send channel (broker/send_channel.py) against a broker in this process, over
raw sockets: GetSendChannel, SEND_BATCH frames answered by id (pipelined, in any order),
answers for bad payloads, closing on bytes that are not frames, and sendChannelEnable=false
(where the mqclient Producer sends by gRPC SendBatch)."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from broker.topic_config import TopicConfig
from common.constants import PERM_READ
from mqclient import Message, Producer, SendStatus
from mqclient.send_channel import split_address
from mqproto import common_pb2, messaging_pb2
from remoting.framing import (
    KIND_SEND_BATCH,
    KIND_SEND_BATCHES,
    FrameReader,
    encode_batch_message,
    encode_frame,
)
from tests.support.brokers import BrokerThread, pull_all
from tests.support.processes import Processes

Start = Callable[..., BrokerThread]
Frame = tuple[int, int, bytes]
C = common_pb2
M = messaging_pb2
IO_TIMEOUT_S = 10.0


def send_channel_address(b: BrokerThread) -> str:
    r = b.messaging.GetSendChannel(M.GetSendChannelRequest(), timeout=IO_TIMEOUT_S)
    assert r.status.code == C.SUCCESS, r.status
    return r.address


def props(pairs: list[tuple[str, str]]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs).encode()


def batch_request(topic: str, elements: list[tuple[bytes, list[tuple[str, str]]]],
                  queue_id: int = 0) -> bytes:
    """A serialized SendBatchRequest of (body, properties) MessageBatch elements."""
    encoded = b"".join(encode_batch_message(0, body, props(pairs)) for body, pairs in elements)
    return M.SendBatchRequest(producer_group="PG", topic=topic, queue_id=queue_id,
                              encoded_messages=encoded, default_topic_queue_nums=4,
                              born_timestamp=int(time.time() * 1000)).SerializeToString()


class Raw:
    """A plain TCP connection to a send channel, reading answers with FrameReader."""

    def __init__(self, address: str) -> None:
        self.sock = socket.create_connection(split_address(address), timeout=IO_TIMEOUT_S)
        self.reader = FrameReader()
        self.ready: list[Frame] = []

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def receive(self, count: int, timeout: float = IO_TIMEOUT_S) -> list[Frame]:
        """Exactly `count` frames (fewer: AssertionError)."""
        deadline = time.monotonic() + timeout
        while len(self.ready) < count:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{len(self.ready)} of {count} answers within {timeout} s"
            self.sock.settimeout(remaining)
            data = self.sock.recv(1 << 20)
            assert data, f"connection closed after {len(self.ready)} of {count} answers"
            self.ready += self.reader.feed(data)
        out, self.ready = self.ready[:count], self.ready[count:]
        return out

    def nothing_more(self, wait: float = 0.3) -> None:
        assert not self.ready, self.ready
        self.sock.settimeout(wait)
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected bytes {data[:50]!r}")

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the peer closes the connection within `timeout` (data is dropped)."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            self.sock.settimeout(remaining)
            try:
                if not self.sock.recv(1 << 16):
                    return True
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
        return False

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw() -> Iterator[Callable[[str], Raw]]:
    opened: list[Raw] = []

    def connect(address: str) -> Raw:
        opened.append(Raw(address))
        return opened[-1]

    yield connect
    for r in opened:
        r.close()


def answer(frame: Frame, request_id: int) -> M.SendBatchResponse:
    got_id, kind, payload = frame
    assert (got_id, kind) == (request_id, KIND_SEND_BATCH)
    return M.SendBatchResponse.FromString(payload)


def test_get_send_channel_and_a_batch_round_trip(start_broker: Start,
                                                 raw: Callable[[str], Raw]) -> None:
    b = start_broker()
    address = send_channel_address(b)
    host, port = split_address(address)
    assert host == "127.0.0.1" and 0 < port < 65536
    assert address != b.address
    assert address == b.controller.send_channel_addr

    conn = raw(address)
    first = [(b"body-%d" % i, [("UNIQ_KEY", f"UK{i:04d}"), ("TAGS", "TagA")]) for i in range(3)]
    conn.send(encode_frame(77, KIND_SEND_BATCH, batch_request("TopicSC", first, queue_id=2)))
    r = answer(conn.receive(1)[0], 77)
    assert r.status.code == C.SUCCESS, r.status
    assert (r.queue_id, r.first_queue_offset, len(r.commit_log_offsets)) == (2, 0, 3)
    assert list(r.commit_log_offsets) == sorted(set(r.commit_log_offsets))
    assert len(r.offset_msg_id_host) == 16

    second = [(b"", [("UNIQ_KEY", "UK-empty")]), (b"\x00\xff" * 5000, [("UNIQ_KEY", "UK-big")])]
    conn.send(encode_frame(0xFFFFFFFF, KIND_SEND_BATCH,
                           batch_request("TopicSC", second, queue_id=2)))
    r2 = answer(conn.receive(1)[0], 0xFFFFFFFF)
    assert r2.status.code == C.SUCCESS, r2.status
    assert (r2.queue_id, r2.first_queue_offset, len(r2.commit_log_offsets)) == (2, 3, 2)
    assert r2.commit_log_offsets[0] > r.commit_log_offsets[-1]
    conn.nothing_more()

    got = pull_all(b, "TopicSC", 2, expect=5)
    assert [m.body for m in got] == [body for body, _ in first + second]
    assert [m.system_properties.message_id for m in got] == \
        ["UK0000", "UK0001", "UK0002", "UK-empty", "UK-big"]
    assert [m.system_properties.queue_offset for m in got] == list(range(5))
    assert [m.system_properties.commit_log_offset for m in got] == \
        [*r.commit_log_offsets, *r2.commit_log_offsets]
    assert [m.system_properties.offset_msg_id for m in got] == \
        [f"{r.offset_msg_id_host}{o:016X}" for o in [*r.commit_log_offsets,
                                                       *r2.commit_log_offsets]]
    assert {m.tag for m in got[:3]} == {"TagA"} and {m.system_properties.queue_id
                                                      for m in got} == {2}


# ASYNC_FLUSH requests complete as they are read; SYNC_FLUSH ones wait for the flush in a task.
FLUSH_TYPES = pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])


@FLUSH_TYPES
def test_pipelined_requests_each_get_one_answer(start_broker: Start, raw: Callable[[str], Raw],
                                                flush: str) -> None:
    b = start_broker(flushDiskType=flush)
    conn = raw(send_channel_address(b))
    rng = random.Random(5)
    ids = rng.sample(range(2**32), 200)  # not in order, any 32-bit value
    frames = [encode_frame(i, KIND_SEND_BATCH, batch_request(
        "TopicPipe", [(b"m%d" % i, [("UNIQ_KEY", f"U{i:X}")])], queue_id=i % 4))
        for i in ids]
    conn.send(*frames)  # all in one write
    answers = conn.receive(200)
    assert Counter(request_id for request_id, _, _ in answers) == Counter(ids)
    by_id = {request_id: M.SendBatchResponse.FromString(p) for request_id, _, p in answers}
    assert all(r.status.code == C.SUCCESS for r in by_id.values())
    assert all(r.queue_id == i % 4 and len(r.commit_log_offsets) == 1 for i, r in by_id.items())
    conn.nothing_more()

    stored: dict[int, list[M.Message]] = {q: pull_all(b, "TopicPipe", q) for q in range(4)}
    assert sum(len(v) for v in stored.values()) == 200
    for i in ids:
        r = by_id[i]
        m = stored[i % 4][r.first_queue_offset]
        assert (m.body, m.system_properties.message_id) == (b"m%d" % i, f"U{i:X}")
        assert m.system_properties.commit_log_offset == r.commit_log_offsets[0]


def test_a_large_frame_among_small_ones(start_broker: Start, raw: Callable[[str], Raw]) -> None:
    """A 3 MB request between small ones, all in one write, then again cut in pieces."""
    b = start_broker()
    conn = raw(send_channel_address(b))
    rng = random.Random(3)
    big = [(rng.randbytes(1024 * 1024), [("UNIQ_KEY", f"BIG{i}")]) for i in range(3)]
    frames = [
        encode_frame(1, KIND_SEND_BATCH, batch_request("TopicLarge", [(b"small-1", [])])),
        encode_frame(2, KIND_SEND_BATCH, batch_request("TopicLarge", big)),
        encode_frame(3, KIND_SEND_BATCH, batch_request("TopicLarge", [(b"small-3", [])])),
    ]
    conn.send(*frames)
    codes = {i: M.SendBatchResponse.FromString(p) for i, _, p in conn.receive(3)}
    assert {i: r.status.code for i, r in codes.items()} == {1: C.SUCCESS, 2: C.SUCCESS,
                                                            3: C.SUCCESS}
    assert len(codes[2].commit_log_offsets) == 3
    data = b"".join(frames)
    for start in range(0, len(data), 100_000):  # the same frames trickling in
        conn.send(data[start:start + 100_000])
    assert sorted(i for i, _, _ in conn.receive(3)) == [1, 2, 3]
    conn.nothing_more()
    got = pull_all(b, "TopicLarge", 0, expect=10)
    bodies = [body for body, _ in big]
    assert sorted(m.body for m in got) == sorted([b"small-1", b"small-3", *bodies] * 2)


@FLUSH_TYPES
def test_more_requests_in_flight_than_the_connection_takes(
        start_broker: Start, raw: Callable[[str], Raw], flush: str) -> None:
    """3000 frames written at once, over MAX_INFLIGHT_PER_CONNECTION (1024) waiting for a
    flush: the broker stops reading the connection for a while, then resumes; every request
    is answered once."""
    b = start_broker(flushDiskType=flush)
    conn = raw(send_channel_address(b))
    count = 3000
    payload = batch_request("TopicMany", [(b"x", [])], queue_id=1)
    data = b"".join(encode_frame(i, KIND_SEND_BATCH, payload) for i in range(count))
    errors: list[BaseException] = []

    def write() -> None:
        try:
            conn.send(data)
        except BaseException as e:  # reported below
            errors.append(e)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    answers = conn.receive(count, timeout=30)
    writer.join(IO_TIMEOUT_S)
    assert not writer.is_alive() and not errors
    assert sorted(request_id for request_id, _, _ in answers) == list(range(count))
    offsets = sorted(M.SendBatchResponse.FromString(p).first_queue_offset
                     for _, _, p in answers)
    assert offsets == list(range(count))
    conn.nothing_more()


@pytest.mark.parametrize("payload", [b"\xff\xff\xff", b"\x0a", b""],
                         ids=["not-protobuf", "cut-protobuf", "empty-request"])
def test_a_payload_that_is_not_a_send_batch_request(
        payload: bytes, start_broker: Start, raw: Callable[[str], Raw]) -> None:
    b = start_broker()
    conn = raw(send_channel_address(b))
    conn.send(encode_frame(5, KIND_SEND_BATCH, payload))
    r = answer(conn.receive(1)[0], 5)
    assert r.status.code == C.INVALID_PARAMETER, r.status
    assert not r.commit_log_offsets
    # The connection goes on: a good request right after, and a bad and a good one at once.
    conn.send(encode_frame(6, KIND_SEND_BATCH,
                           batch_request("TopicBadPayload", [(b"ok", [])])))
    assert answer(conn.receive(1)[0], 6).status.code == C.SUCCESS
    conn.send(encode_frame(7, KIND_SEND_BATCH, payload),
              encode_frame(8, KIND_SEND_BATCH, batch_request("TopicBadPayload", [(b"ok2", [])])))
    codes = {i: M.SendBatchResponse.FromString(p).status.code for i, _, p in conn.receive(2)}
    assert codes == {7: C.INVALID_PARAMETER, 8: C.SUCCESS}
    assert [m.body for m in pull_all(b, "TopicBadPayload", 0, expect=2)] == [b"ok", b"ok2"]


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x02",  # a length of 2 (< 5)
    b"\x00\x00\x00\x00" + b"\x00" * 20,  # a length of 0
    encode_frame(1, 9, b"payload"),  # an unknown kind
    encode_frame(1, 0, b""),  # kind 0
    b"\x7f\xff\xff\xff",  # a length over MAX_FRAME_BYTES
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # some other protocol
], ids=["length-2", "length-0", "kind-9", "kind-0", "too-long", "http"])
def test_bytes_that_are_not_frames_close_the_connection(
        garbage: bytes, start_broker: Start, raw: Callable[[str], Raw]) -> None:
    b = start_broker()
    address = send_channel_address(b)
    other = raw(address)  # an open connection of someone else
    other.send(encode_frame(1, KIND_SEND_BATCH, batch_request("TopicGarbage", [(b"a", [])])))
    assert answer(other.receive(1)[0], 1).status.code == C.SUCCESS

    bad = raw(address)
    bad.send(garbage)
    assert bad.closed_by_peer(timeout=5.0)

    # The broker goes on serving: the other connection and a new one.
    other.send(encode_frame(2, KIND_SEND_BATCH, batch_request("TopicGarbage", [(b"b", [])])))
    assert answer(other.receive(1)[0], 2).status.code == C.SUCCESS
    fresh = raw(address)
    fresh.send(encode_frame(3, KIND_SEND_BATCH, batch_request("TopicGarbage", [(b"c", [])])))
    assert answer(fresh.receive(1)[0], 3).status.code == C.SUCCESS
    assert [m.body for m in pull_all(b, "TopicGarbage", 0, expect=3)] == [b"a", b"b", b"c"]


def test_a_batch_with_a_reserved_property_stores_nothing(
        start_broker: Start, raw: Callable[[str], Raw]) -> None:
    b = start_broker()
    conn = raw(send_channel_address(b))
    conn.send(encode_frame(1, KIND_SEND_BATCH, batch_request("TopicRes", [(b"warm", [])])))
    assert answer(conn.receive(1)[0], 1).status.code == C.SUCCESS
    end = b.controller.store.max_phy_offset

    bad_batches = [
        ([(b"x", [("REAL_TOPIC", "T")])], "reserved"),
        ([(b"ok", [("UNIQ_KEY", "U1")]), (b"x", [("REAL_QID", "1")]), (b"ok", [])],  # all or none
         "reserved"),
        ([(b"x", [("TRAN_MSG", "true")])], "reserved"),
        ([(b"ok", []), (b"x", [("DELAY", "1")])], "one delay level"),
        ([(b"x", [("DELAY", "soon")])], "not a level"),
    ]
    for i, (elements, remark) in enumerate(bad_batches, start=10):
        conn.send(encode_frame(i, KIND_SEND_BATCH, batch_request("TopicRes", elements)))
        r = answer(conn.receive(1)[0], i)
        assert r.status.code == C.MESSAGE_ILLEGAL, r.status
        assert remark in r.status.remark
        assert not r.commit_log_offsets
    assert b.controller.store.max_phy_offset == end
    assert [m.body for m in pull_all(b, "TopicRes", 0, expect=1)] == [b"warm"]
    conn.nothing_more()


@FLUSH_TYPES
def test_batches_of_several_topics_in_one_frame(start_broker: Start, raw: Callable[[str], Raw],
                                                flush: str) -> None:
    """Issue 18: a SEND_BATCHES frame carries batches of many topics and queues; each is
    stored or refused on its own, answered in request order."""
    b = start_broker(flushDiskType=flush, autoCreateTopicEnable=True)
    conn = raw(send_channel_address(b))
    batches = [M.SendBatchRequest.FromString(batch_request(
        f"Multi{i % 3}", [(b"m%d" % i, [("UNIQ_KEY", f"UKM{i:03d}")])], queue_id=i % 2))
        for i in range(6)]
    batches.insert(2, M.SendBatchRequest.FromString(batch_request(
        "bad topic", [(b"x", [("UNIQ_KEY", "UKBAD")])])))
    payload = M.SendBatchesRequest(batches=batches).SerializeToString()
    conn.send(encode_frame(5, KIND_SEND_BATCHES, payload))
    [(got_id, kind, data)] = conn.receive(1)
    assert (got_id, kind) == (5, KIND_SEND_BATCHES)
    responses = M.SendBatchesResponse.FromString(data).responses
    assert [r.status.code for r in responses] == [C.SUCCESS] * 2 + [C.MESSAGE_ILLEGAL] + [
        C.SUCCESS] * 4
    assert [r.queue_id for i, r in enumerate(responses) if i != 2] == [0, 1, 0, 1, 0, 1]
    got = pull_all(b, "Multi1", 1, expect=1)
    assert [m.body for m in got] == [b"m1"]
    # A payload that is not a SendBatchesRequest: one refusal, the connection stays.
    conn.send(encode_frame(6, KIND_SEND_BATCHES, b"\xff\xff\xff"))
    [(_, _, data)] = conn.receive(1)
    [refused] = M.SendBatchesResponse.FromString(data).responses
    assert refused.status.code == C.INVALID_PARAMETER


@FLUSH_TYPES
def test_a_frame_of_existing_topics_is_one_append_each_batch_answered(
        start_broker: Start, raw: Callable[[str], Raw], flush: str) -> None:
    """Batches of topics in the table go in one store append (their answers and offsets as
    one append each would give, in request order); a batch refused fails alone, and a topic
    the send creates is stored after them."""
    b = start_broker(flushDiskType=flush, autoCreateTopicEnable=True)
    b.call(lambda: b.controller.topics.update_many(
        [TopicConfig(f"Kept{i}", 4, 4) for i in range(3)]
        + [TopicConfig("ReadOnly", 4, 4, perm=PERM_READ)]))
    appends: list[int] = []
    store = b.controller.store
    append_groups = store.append_groups

    def counted(groups: list[list[Any]]) -> list[Any]:
        appends.append(len(groups))
        return append_groups(groups)

    store.append_groups = counted  # type: ignore[method-assign]
    conn = raw(send_channel_address(b))
    requests = [
        batch_request("Kept0", [(b"a0", []), (b"a1", [])], queue_id=1),
        batch_request("ReadOnly", [(b"no", [])]),
        batch_request("NewTopic", [(b"n0", [])]),
        batch_request("Kept1", [(b"b0", [])], queue_id=9),  # no queue 9
        batch_request("Kept1", [(b"b1", [("DELAY", "4")])], queue_id=2),  # 30 s
        batch_request("Kept2", [(b"c0", [("DELAY", "1")]), (b"c1", [])]),  # two levels
        batch_request("Kept0", [(b"a2", [])], queue_id=1),
    ]
    payload = M.SendBatchesRequest(batches=[M.SendBatchRequest.FromString(r)
                                            for r in requests]).SerializeToString()
    conn.send(encode_frame(7, KIND_SEND_BATCHES, payload))
    [(_, _, data)] = conn.receive(1)
    responses = M.SendBatchesResponse.FromString(data).responses
    assert [r.status.code for r in responses] == [
        C.SUCCESS, C.NO_PERMISSION, C.SUCCESS, C.INVALID_PARAMETER, C.SUCCESS,
        C.MESSAGE_ILLEGAL, C.SUCCESS], [r.status for r in responses]
    first, _, created, _, delayed, _, last = responses
    assert (first.queue_id, first.first_queue_offset, last.first_queue_offset) == (1, 0, 2)
    assert (delayed.queue_id, created.first_queue_offset) == (2, 0)
    offsets = [*first.commit_log_offsets, *delayed.commit_log_offsets,
               *last.commit_log_offsets, *created.commit_log_offsets]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5
    if flush == "ASYNC_FLUSH":  # the three taken batches in one append (the new topic's
        assert appends[0] == 3  # put follows its creation, on its own)
    assert [m.body for m in pull_all(b, "Kept0", 1, expect=3)] == [b"a0", b"a1", b"a2"]
    assert [m.body for m in pull_all(b, "NewTopic", 0, expect=1)] == [b"n0"]
    assert pull_all(b, "Kept1", 2) == []  # delayed 30 s (1 s passed under load): not yet due


def test_send_channel_disabled(start_broker: Start, processes: Processes) -> None:
    namesrv = processes.namesrv()
    b = start_broker(namesrvAddr=namesrv.address, sendChannelEnable=False)
    assert send_channel_address(b) == ""
    assert b.controller.send_channel is None

    with Producer("PG", namesrv.address, default_topic_queue_nums=2,
                  send_timeout_s=5) as producer:
        sync = producer.send(Message("TopicGrpc", b"sync", tags="T"))
        batch = producer.send_batch([Message("TopicGrpc", b"batch%d" % i) for i in range(3)])
        futures = [producer.send_async(Message("TopicGrpc", b"async%d" % i)) for i in range(20)]
        results = [sync, *batch, *(f.result(timeout=10) for f in futures)]
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        # The producer knows the broker has no channel: it used gRPC SendBatch.
        assert producer.instance.channels.known_send_address(b.address) == ""

    stored = {m.system_properties.message_id: m for q in range(2)
              for m in pull_all(b, "TopicGrpc", q)}
    assert len(stored) == 24
    for r in results:
        m = stored[r.msg_id]
        assert m.system_properties.offset_msg_id == r.offset_msg_id
        assert (m.system_properties.queue_id, m.system_properties.queue_offset) == \
            (r.message_queue.queue_id, r.queue_offset)
    assert sorted(m.body for m in stored.values()) == sorted(
        [b"sync", *(b"batch%d" % i for i in range(3)), *(b"async%d" % i for i in range(20))])
