"""Send and pull against a broker in this process (real gRPC on a loopback port)."""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest

from mqproto import admin_pb2, common_pb2, messaging_pb2
from tests.support.brokers import BrokerThread, code, pull, pull_all, send

M = messaging_pb2
C = common_pb2
Start = Callable[..., BrokerThread]


def test_send_then_pull_round_trip(start_broker: Start) -> None:
    b = start_broker()
    r = send(b, "TopicA", b"hello", queue_id=1, tag="TagA", keys=["k1"],
             user_properties={"color": "red"})
    assert code(r) == "SUCCESS", r.status
    assert (r.result.queue_id, r.result.queue_offset) == (1, 0)
    assert len(r.result.message_id) == 32 and len(r.result.offset_msg_id) == 32
    [m] = pull_all(b, "TopicA", 1, expect=1)
    assert (m.topic, m.body, m.tag, list(m.keys)) == ("TopicA", b"hello", "TagA", ["k1"])
    assert dict(m.user_properties) == {"color": "red"}
    sp = m.system_properties
    assert sp.message_id == r.result.message_id
    assert sp.offset_msg_id == r.result.offset_msg_id
    assert sp.store_host == b.address and sp.born_host.startswith("127.0.0.1:")

    by_id = b.messaging.QueryMessageById(M.QueryMessageByIdRequest(
        offset_msg_id=r.result.offset_msg_id))
    assert code(by_id) == "SUCCESS" and by_id.message.body == b"hello"
    by_key = b.messaging.QueryMessageByKey(M.QueryMessageByKeyRequest(topic="TopicA", key="k1"))
    assert [x.body for x in by_key.messages] == [b"hello"]
    by_uniq = b.messaging.QueryMessageByKey(M.QueryMessageByKeyRequest(
        topic="TopicA", key=r.result.message_id, unique_key=True))
    assert [x.body for x in by_uniq.messages] == [b"hello"]
    none = b.messaging.QueryMessageByKey(M.QueryMessageByKeyRequest(topic="TopicA", key="zz"))
    assert code(none) == "QUERY_NOT_FOUND"
    missing = b.messaging.QueryMessageById(M.QueryMessageByIdRequest(
        offset_msg_id=r.result.offset_msg_id[:-4] + "FFFF"))
    assert code(missing) == "QUERY_NOT_FOUND"
    bad = b.messaging.QueryMessageById(M.QueryMessageByIdRequest(offset_msg_id="xyz"))
    assert code(bad) == "INVALID_PARAMETER"

    assert b.messaging.GetMaxOffset(M.GetMaxOffsetRequest(topic="TopicA", queue_id=1)).offset == 1
    assert b.messaging.GetMinOffset(M.GetMinOffsetRequest(topic="TopicA", queue_id=1)).offset == 0
    found = b.messaging.SearchOffsetByTimestamp(M.SearchOffsetByTimestampRequest(
        topic="TopicA", queue_id=1, timestamp=sp.store_timestamp + 1))
    assert code(found) == "SUCCESS" and found.offset == 1


def test_batch_is_one_append_in_one_queue(start_broker: Start) -> None:
    b = start_broker()
    r = b.messaging.SendBatch(M.SendBatchRequest(
        topic="TopicB", queue_id=2,
        messages=[M.Message(body=f"m{i}".encode(), tag=f"T{i % 2}") for i in range(10)]))
    assert code(r) == "SUCCESS"
    assert [x.queue_offset for x in r.results] == list(range(10))
    offsets = [x.commit_log_offset for x in r.results]
    assert offsets == sorted(offsets) and len(set(x.message_id for x in r.results)) == 10
    got = pull_all(b, "TopicB", 2, sub="T1", expect=5)
    assert [m.body for m in got] == [b"m1", b"m3", b"m5", b"m7", b"m9"]

    mixed = b.messaging.SendBatch(M.SendBatchRequest(topic="TopicB", messages=[
        M.Message(body=b"a"), M.Message(topic="Other", body=b"b")]))
    assert code(mixed) == "MESSAGE_ILLEGAL" and not mixed.results
    empty = b.messaging.SendBatch(M.SendBatchRequest(topic="TopicB"))
    assert code(empty) == "INVALID_PARAMETER"
    # The batch's topic is the one named in the request (access is checked for it): a
    # batch naming none is refused, whatever its messages name.
    unnamed = b.messaging.SendBatch(M.SendBatchRequest(messages=[
        M.Message(topic="TopicB", body=b"a"), M.Message(topic="TopicB", body=b"b")]))
    assert code(unnamed) == "INVALID_PARAMETER" and "names no topic" in unnamed.status.remark
    assert not unnamed.results


def test_auto_create_topic_queue_count(start_broker: Start) -> None:
    b = start_broker(defaultTopicQueueNums=4)
    version = b.call(lambda: b.controller.topics.data_version)
    r = b.messaging.SendMessage(M.SendMessageRequest(
        message=M.Message(topic="NewTopic", body=b"x"), default_topic_queue_nums=2))
    assert code(r) == "SUCCESS"
    config = b.call(lambda: b.controller.topics.get("NewTopic"))
    assert (config.read_queue_nums, config.write_queue_nums) == (2, 2)
    assert b.call(lambda: b.controller.topics.data_version) != version
    assert "NewTopic" in (b.controller.root / "config" / "topics.json").read_text()
    big = send(b, "Another", b"x", queue_id=3)  # client default 0: the broker's default (4)
    assert code(big) == "SUCCESS"
    assert b.call(lambda: b.controller.topics.get("Another")).write_queue_nums == 4


def test_unknown_topic_without_auto_create(start_broker: Start) -> None:
    b = start_broker(autoCreateTopicEnable=False)
    r = send(b, "NoSuchTopic", b"x")
    assert code(r) == "TOPIC_NOT_EXIST" and "NoSuchTopic" in r.status.remark
    p = pull(b, "NoSuchTopic", 0, 0)
    assert code(p) == "TOPIC_NOT_EXIST"


@pytest.mark.parametrize(("topic", "expected"), [
    ("bad topic", "MESSAGE_ILLEGAL"),
    ("", "MESSAGE_ILLEGAL"),
    ("x" * 128, "MESSAGE_ILLEGAL"),
    ("SCHEDULE_TOPIC_XXXX", "MESSAGE_ILLEGAL"),
    ("rmq_sys_x", "MESSAGE_ILLEGAL"),
    ("TBW102", "MESSAGE_ILLEGAL"),
])
def test_topic_rules_on_send(start_broker: Start, topic: str, expected: str) -> None:
    b = start_broker()
    r = send(b, topic, b"x")
    assert code(r) == expected and r.status.remark
    assert b.controller.store.max_phy_offset == 0


def test_bad_messages_write_nothing(start_broker: Start) -> None:
    b = start_broker(maxMessageSize=1024)
    assert code(send(b, "T", b"ok")) == "SUCCESS"
    end = b.controller.store.max_phy_offset
    cases = [
        (send(b, "T", b"x" * 1025), "MESSAGE_ILLEGAL", "maxMessageSize"),
        (send(b, "T", b"x", user_properties={"TAGS": "t"}), "MESSAGE_ILLEGAL", "reserved"),
        (send(b, "T", b"x", keys=["a b"]), "MESSAGE_ILLEGAL", "blanks"),
        (send(b, "T", b"x", user_properties={"p": "v" * 40_000}), "PROPERTIES_SIZE_EXCEEDED",
         "properties"),
        (send(b, "T", b"x", queue_id=99), "INVALID_PARAMETER", "queueId[99] is illegal"),
    ]
    for r, expected, remark in cases:
        assert (code(r), remark in r.status.remark) == (expected, True), r.status
        assert not r.HasField("result")
    batch = b.messaging.SendBatch(M.SendBatchRequest(
        topic="T", messages=[M.Message(body=b"x" * 600), M.Message(body=b"y" * 600)]))
    assert code(batch) == "MESSAGE_ILLEGAL"
    # Far past maxMessageSize the transport refuses it; the broker is unaffected.
    with pytest.raises(grpc.RpcError) as e:
        send(b, "T", b"x" * (3 << 20))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert b.controller.store.max_phy_offset == end
    assert code(send(b, "T", b"still serving")) == "SUCCESS"
    assert [m.body for m in pull_all(b, "T", 0, expect=2)] == [b"ok", b"still serving"]


def test_a_send_refused_for_its_queue_id_creates_no_topic(start_broker: Start) -> None:
    """A trial's `mqadmin sendMessage -i 999999` to a new topic was refused, and created it."""
    b = start_broker(defaultTopicQueueNums=4)
    r = send(b, "Fresh", b"x", queue_id=4)
    assert code(r) == "INVALID_PARAMETER" and "it was not created" in r.status.remark
    assert b.controller.topics.get("Fresh") is None
    assert code(send(b, "Fresh", b"x", queue_id=3)) == "SUCCESS"


def test_negative_queue_id_lets_the_broker_choose(start_broker: Start) -> None:
    b = start_broker(defaultTopicQueueNums=4)
    ids = {send(b, "Spread", b"x", queue_id=-1).result.queue_id for _ in range(40)}
    assert ids <= {0, 1, 2, 3} and len(ids) > 1


def test_pull_offset_corrections(start_broker: Start) -> None:
    b = start_broker()
    for i in range(5):
        send(b, "P", b"%d" % i)
    pull_all(b, "P", 0, expect=5)
    at_end = pull(b, "P", 0, 5)
    assert (code(at_end), at_end.next_begin_offset) == ("NO_NEW_MSG", 5)
    assert at_end.get_message_status == M.OFFSET_OVERFLOW_ONE
    beyond = pull(b, "P", 0, 50)
    assert code(beyond) == "OFFSET_ILLEGAL" and beyond.get_message_status == M.OFFSET_OVERFLOW_BADLY
    assert (beyond.next_begin_offset, beyond.min_offset, beyond.max_offset) == (0, 0, 5)
    empty_queue = pull(b, "P", 3, 7)  # a queue of the topic with no message
    assert code(empty_queue) == "OFFSET_ILLEGAL" and empty_queue.next_begin_offset == 0
    assert code(pull(b, "P", 3, 0)) == "NO_NEW_MSG"
    assert code(pull(b, "P", 8, 0)) == "INVALID_PARAMETER"  # 8 read queues: 0..7
    assert code(pull(b, "P", -1, 0)) == "INVALID_PARAMETER"
    assert code(pull(b, "P", 0, -5)) == "INVALID_PARAMETER"
    no_group = b.messaging.PullMessage(M.PullMessageRequest(topic="P", queue_id=0))
    assert code(no_group) == "INVALID_PARAMETER"
    middle = pull(b, "P", 0, 2)
    assert [m.body for m in middle.messages] == [b"2", b"3", b"4"]
    assert middle.next_begin_offset == 5


def test_long_poll_is_woken_by_a_send(start_broker: Start) -> None:
    b = start_broker()
    send(b, "LP", b"first")
    pull_all(b, "LP", 0, expect=1)
    future = b.messaging.PullMessage.future(M.PullMessageRequest(
        consumer_group="CG", topic="LP", queue_id=0, queue_offset=1,
        suspend_timeout_millis=10_000), timeout=20)
    time.sleep(0.3)
    assert not future.done()
    sent = time.monotonic()
    send(b, "LP", b"second")
    r = future.result()
    latency = time.monotonic() - sent
    assert code(r) == "SUCCESS" and [m.body for m in r.messages] == [b"second"]
    assert latency < 0.1, latency


def test_long_poll_times_out_and_respects_the_deadline(start_broker: Start) -> None:
    b = start_broker()
    begin = time.monotonic()
    r = pull(b, "Quiet", 0, 0, suspend_ms=300)  # auto-created? no: pull does not create
    assert code(r) == "TOPIC_NOT_EXIST"
    send(b, "Quiet", b"x")
    pull_all(b, "Quiet", 0, expect=1)
    begin = time.monotonic()
    r = pull(b, "Quiet", 0, 1, suspend_ms=300)
    assert code(r) == "NO_NEW_MSG" and 0.25 < time.monotonic() - begin < 2
    begin = time.monotonic()
    r = b.messaging.PullMessage(M.PullMessageRequest(
        consumer_group="CG", topic="Quiet", queue_id=0, queue_offset=1,
        suspend_timeout_millis=30_000), timeout=1.0)
    assert code(r) == "NO_NEW_MSG" and time.monotonic() - begin < 1.0


def test_long_poll_with_tags_returns_matching_messages(start_broker: Start) -> None:
    b = start_broker()
    send(b, "Tagged", b"x", tag="A")
    pull_all(b, "Tagged", 0, expect=1)
    future = b.messaging.PullMessage.future(M.PullMessageRequest(
        consumer_group="CG", topic="Tagged", queue_id=0, queue_offset=1, subscription="B",
        suspend_timeout_millis=5_000), timeout=10)
    time.sleep(0.1)
    send(b, "Tagged", b"a", tag="A")
    send(b, "Tagged", b"b", tag="B")
    offset, got = 1, []
    r = future.result()
    while True:
        got.extend(m.body for m in r.messages)
        offset = r.next_begin_offset
        if b"b" in got:
            break
        assert code(r) in ("SUCCESS", "NO_MATCHED_MSG", "NO_NEW_MSG")
        r = pull(b, "Tagged", 0, offset, sub="B", suspend_ms=2_000)
    assert got == [b"b"] and offset == 3


def test_sync_flush_send(start_broker: Start) -> None:
    b = start_broker(flushDiskType="SYNC_FLUSH")
    r = send(b, "Durable", b"x" * 100)
    assert code(r) == "SUCCESS"
    assert b.controller.store.commitlog.flushed_offset >= r.result.commit_log_offset + 100


def test_slave_refuses_writes(start_broker: Start) -> None:
    b = start_broker(brokerRole="SLAVE", brokerId=1, autoCreateTopicEnable=True)
    r = send(b, "T", b"x")
    assert code(r) == "SERVICE_NOT_AVAILABLE" and "slave" in r.status.remark
    assert b.call(lambda: b.controller.topics.get("T")) is None
    b.admin.CreateOrUpdateTopic(admin_pb2.CreateOrUpdateTopicRequest(
        topic_config=C.TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1,
                                   perm=6)))
    behind = pull(b, "T", 0, 5)  # a slave may just lag its master: keep the offset
    assert (code(behind), behind.next_begin_offset) == ("NO_MATCHED_MSG", 5)
