"""Message trace: the encoder against records built field by field in RocketMQ's format
(TraceDataEncoder, TraceDataEncoderTest), the dispatcher's bounded buffer, and end to end
through a real broker with traceTopicEnable: producer, push consumer and transactional
producer records found by message id (`mqadmin queryMsgTraceById`) and by key."""

from __future__ import annotations

import json
import threading
import time

import pytest

from mqclient import ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from mqclient.admin import MQAdmin
from mqclient.cli import mqadmin
from mqclient.message import MessageQueue, MQClientError, SendFuture, SendResult, SendStatus
from mqclient.trace import (
    ConsumeReturnType,
    MessageType,
    TraceBean,
    TraceContext,
    TraceType,
    decode_trace_data,
    encode_context,
)
from mqclient.trace_dispatcher import TraceDispatcher
from mqclient.transaction import LocalTransactionState, TransactionProducer
from tests.mqclient.conftest import Cluster
from tests.support.waiting import wait_until

C, F = "\x01", "\x02"  # TraceConstants.CONTENT_SPLITOR, FIELD_SPLITOR
TIME = 1_765_000_000_123
MSG_ID = "AC1415116D1418B4AAC217FE1B4E0000"
OFFSET_ID = "0A9A002600002A9F0000000000002329"
TIMEOUT_S = 30.0


def java(*fields: object) -> str:
    """A record as StringBuilder.append writes its fields (null, true, false)."""
    def s(v: object) -> str:
        return "null" if v is None else ("true" if v is True else
                                         "false" if v is False else str(v))
    return C.join(map(s, fields)) + F


# -- the encoder -------------------------------------------------------------------------------
def test_pub_record_is_rocketmqs() -> None:
    # TraceDataEncoderTest.init / testEncoderFromContextBean, field for field.
    expected = java("Pub", TIME, "DefaultRegion", "PID-test", "topic-test", MSG_ID, "Tags",
                    "Keys", "127.0.0.1:10911", 26, 245, 0, OFFSET_ID, True)
    ctx = TraceContext(TraceType.Pub, TIME, "DefaultRegion", "PID-test", cost_time=245,
                       success=True, beans=[TraceBean(
                           topic="topic-test", msg_id=MSG_ID, offset_msg_id=OFFSET_ID,
                           tags="Tags", keys="Keys", store_host="127.0.0.1:10911",
                           body_length=26, msg_type=MessageType.Normal_Msg)])
    data, keys = encode_context(ctx)
    assert data == expected
    assert keys == [MSG_ID, "Keys"]  # getTransKey: the msgId and each key
    [back] = decode_trace_data(data)
    assert back == ctx


def test_a_message_without_tags_or_keys_writes_java_nulls_and_failures_false() -> None:
    ctx = TraceContext(TraceType.Pub, TIME, "DefaultRegion", "G", cost_time=3, success=False,
                       beans=[TraceBean(topic="T", msg_id=MSG_ID, offset_msg_id=OFFSET_ID,
                                        store_host="h:1", body_length=5,
                                        msg_type=MessageType.Delay_Msg)])
    data, keys = encode_context(ctx)
    assert data == java("Pub", TIME, "DefaultRegion", "G", "T", MSG_ID, None, None, "h:1",
                        5, 3, 3, OFFSET_ID, False)
    assert keys == [MSG_ID]


def test_sub_before_and_after_records_are_rocketmqs() -> None:
    beans = [TraceBean(topic="T", msg_id="ID1", keys="k1 k2", retry_times=0),
             TraceBean(topic="T", msg_id="ID2", keys=None, retry_times=2)]
    before = TraceContext(TraceType.SubBefore, TIME, "DefaultRegion", "CG",
                          request_id="REQ", beans=beans)
    data, keys = encode_context(before)
    assert data == (java("SubBefore", TIME, "DefaultRegion", "CG", "REQ", "ID1", 0, "k1 k2")
                    + java("SubBefore", TIME, "DefaultRegion", "CG", "REQ", "ID2", 2, None))
    assert keys == ["ID1", "k1", "k2", "ID2"]
    # AccessChannel.LOCAL: the timestamp and group close the record.
    after = TraceContext(TraceType.SubAfter, TIME + 7, "DefaultRegion", "CG", cost_time=3,
                         success=False, request_id="REQ",
                         context_code=ConsumeReturnType.EXCEPTION, beans=beans[:1])
    data, _ = encode_context(after)
    assert data == java("SubAfter", "REQ", "ID1", 3, False, "k1 k2", 2, TIME + 7, "CG")
    [back] = decode_trace_data(data)
    assert (back.trace_type, back.request_id, back.cost_time, back.success,
            back.context_code, back.timestamp, back.group) == (
        TraceType.SubAfter, "REQ", 3, False, 2, TIME + 7, "CG")
    assert [(b.msg_id, b.retry_times) for c in decode_trace_data(encode_context(before)[0])
            for b in c.beans] == [("ID1", 0), ("ID2", 2)]


def test_end_transaction_record_is_rocketmqs() -> None:
    ctx = TraceContext(TraceType.EndTransaction, TIME, "DefaultRegion", "PID-test", beans=[
        TraceBean(topic="topic-test", msg_id=MSG_ID, tags="Tags", keys="Keys",
                  store_host="127.0.0.1:10911", msg_type=MessageType.Trans_msg_Commit,
                  transaction_id="transactionId", transaction_state="COMMIT_MESSAGE",
                  from_transaction_check=False)])
    data, keys = encode_context(ctx)
    assert data == java("EndTransaction", TIME, "DefaultRegion", "PID-test", "topic-test",
                        MSG_ID, "Tags", "Keys", "127.0.0.1:10911", 2, "transactionId",
                        "COMMIT_MESSAGE", False)
    assert len(keys) == 2
    [back] = decode_trace_data(data)
    assert back.beans[0].transaction_state == "COMMIT_MESSAGE"


def test_decoder_reads_the_older_pub_layouts() -> None:
    # 13 fields (no offsetMsgId) and 15 (a client host after success), as Java reads them.
    old = C.join(["Pub", str(TIME), "R", "G", "T", MSG_ID, "t", "k", "h:1", "5", "9", "0",
                  "true"])
    newer = C.join(["Pub", str(TIME), "R", "G", "T", MSG_ID, "t", "k", "h:1", "5", "9", "0",
                    OFFSET_ID, "false", "10.0.0.1"])
    a, b = decode_trace_data(old + F + newer + F)
    assert a.success and a.beans[0].offset_msg_id == ""
    assert not b.success and b.beans[0].client_host == "10.0.0.1"
    assert decode_trace_data("Unknown" + C + "x" + F) == []


class _Sink:
    """Stands in for the inner producer: records the trace messages."""

    class instance:  # noqa: N801 (the attribute the dispatcher reads)
        client_ip = "127.0.0.1"

    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send_async(self, msg: Message, timeout_s: float) -> object:
        import concurrent.futures
        self.sent.append(msg)
        f: concurrent.futures.Future[None] = concurrent.futures.Future()
        f.set_result(None)
        return f

    def flush(self) -> None:
        pass


def _pub(i: int, topic: str = "T") -> TraceContext:
    return TraceContext(TraceType.Pub, TIME, group="G", beans=[TraceBean(
        topic=topic, msg_id=f"ID{i}", offset_msg_id=OFFSET_ID, keys=f"key{i}")])


def test_a_full_buffer_drops_records_and_counts_them() -> None:
    sink = _Sink()
    d = TraceDispatcher(sink, buffer_size=3, batch_num=2)  # type: ignore[arg-type]
    assert [d.append(_pub(i)) for i in range(5)] == [True, True, True, False, False]
    assert d.dropped == 2
    d.flush()
    # Two contexts per trace message; keys: the ids and keys; the store host from the id.
    assert [m.key_list() for m in sink.sent] == [["ID0", "key0", "ID1", "key1"],
                                                 ["ID2", "key2"]]
    contexts = decode_trace_data(sink.sent[0].body.decode())
    assert contexts[0].beans[0].store_host == "10.154.0.38:10911"
    assert all(m.topic == "RMQ_SYS_TRACE_TOPIC" for m in sink.sent)
    assert d.append(_pub(9))  # room again


def test_async_sends_get_the_same_pub_record_as_the_encoder_writes() -> None:
    sink = _Sink()
    d = TraceDispatcher(sink)  # type: ignore[arg-type]
    d.group = "PG"
    done, failed = SendFuture(), SendFuture()
    done.set_result(SendResult(SendStatus.SEND_OK, MSG_ID, OFFSET_ID,
                               MessageQueue("T", "b", 0), 0))
    failed.set_exception(MQClientError("TIMEOUT", "x"))
    d.append_send(TIME, Message("T", b"12345", tags="tg", keys=["a", "b"]), done)
    d.append_send(TIME, Message("T", b"x"), failed)  # no record: no result
    d.append_send(TIME, Message("T", b"abc", delay_level=2), done)  # no tags, no keys
    d.flush()
    [msg] = sink.sent
    first, second = decode_trace_data(msg.body.decode())
    data = msg.body.decode()
    assert data == (
        encode_context(TraceContext(TraceType.Pub, TIME, group="PG",
                                    cost_time=first.cost_time, beans=[TraceBean(
                                        topic="T", msg_id=MSG_ID, offset_msg_id=OFFSET_ID,
                                        tags="tg", keys="a b", store_host="10.154.0.38:10911",
                                        body_length=5)]))[0]
        + encode_context(TraceContext(TraceType.Pub, TIME, group="PG",
                                      cost_time=second.cost_time, beans=[TraceBean(
                                          topic="T", msg_id=MSG_ID, offset_msg_id=OFFSET_ID,
                                          store_host="10.154.0.38:10911", body_length=3,
                                          msg_type=MessageType.Delay_Msg)]))[0])
    assert first.cost_time >= 0
    assert msg.key_list() == [MSG_ID, "a", "b"]


def test_trace_messages_keep_their_keys_within_the_properties_limit() -> None:
    sink = _Sink()
    d = TraceDispatcher(sink)  # type: ignore[arg-type]
    for i in range(100):
        ctx = _pub(i)
        ctx.beans[0].keys = f"{i:03d}" + "k" * 500
        d.append(ctx)
    d.flush()
    assert len(sink.sent) >= 3
    assert all(len(" ".join(m.key_list())) < 32_767 for m in sink.sent)
    assert sum(len(decode_trace_data(m.body.decode())) for m in sink.sent) == 100


def test_records_of_different_topics_go_in_different_trace_messages() -> None:
    sink = _Sink()
    d = TraceDispatcher(sink, "MyTrace")  # type: ignore[arg-type]
    for i in range(3):
        d.append(_pub(i, "A" if i % 2 else "B"))
    d.flush()
    assert sorted(len(decode_trace_data(m.body.decode())) for m in sink.sent) == [1, 2]
    assert {m.topic for m in sink.sent} == {"MyTrace"}


# -- end to end --------------------------------------------------------------------------------
def _views(cluster: Cluster, msg_id: str, kinds: set[str], topic: str = "RMQ_SYS_TRACE_TOPIC"
           ) -> list:  # type: ignore[type-arg]
    with MQAdmin(cluster.namesrv_addr) as admin:
        def found() -> list:  # type: ignore[type-arg]
            try:
                views = admin.query_msg_trace_by_id(msg_id, trace_topic=topic)
            except Exception:
                return []
            return views if {v.trace_type for v in views} >= kinds else []
        return wait_until(found, timeout=TIMEOUT_S, message=f"trace {kinds} of {msg_id}")


def test_send_and_consume_traces_are_found_by_id_and_key(
        cluster: Cluster, consumers: list[PushConsumer], capsys: pytest.CaptureFixture[str]
        ) -> None:
    cluster.start_broker("broker-a", traceTopicEnable=True)
    with Producer("PG", cluster.namesrv_addr, enable_msg_trace=True) as producer:
        sync = producer.send(Message("TopicT", b"hello", tags="TagA", keys=["order-1"]))
        fut = producer.send_async(Message("TopicT", b"async"))
        fut.result(TIMEOUT_S)
        untraced = Producer("PG-off", cluster.namesrv_addr).start()
        plain = untraced.send(Message("TopicT", b"no trace"))
        untraced.shutdown()

    failed_once: set[str] = set()
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            if msgs[0].body == b"hello" and msgs[0].msg_id not in failed_once:
                failed_once.add(msgs[0].msg_id)
                return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer("CG", cluster.namesrv_addr, enable_msg_trace=True,
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe("TopicT")
    c.register_listener_concurrently(listener)
    consumers.append(c.start())

    views = _views(cluster, sync.msg_id, {"Pub", "SubBefore", "SubAfter"})
    [pub] = [v for v in views if v.trace_type == "Pub"]
    assert (pub.group, pub.topic, pub.tags, pub.keys, pub.status, pub.offset_msg_id) == (
        "PG", "TopicT", "TagA", "order-1", "success", sync.offset_msg_id)
    assert pub.store_host and pub.client_host
    # The failed first call, then (after the retry delay) the successful one: wait for it.
    views = wait_until(lambda: [v for v in _views(cluster, sync.msg_id, {"SubAfter"})
                                if v.trace_type == "SubAfter" and v.status == "success"],
                       timeout=TIMEOUT_S, message="the retried consume's SubAfter")
    afters = [v for v in _views(cluster, sync.msg_id, {"SubAfter"})
              if v.trace_type == "SubAfter"]
    assert {(v.group, v.status, v.context_code) for v in afters} >= {
        ("CG", "failed", ConsumeReturnType.FAILED), ("CG", "success", 0)}
    befores = [v for v in _views(cluster, sync.msg_id, {"SubBefore"})
               if v.trace_type == "SubBefore"]
    assert sorted(v.retry_times for v in befores)[:2] == [0, 1]
    assert {v.request_id for v in befores} == {v.request_id for v in afters}

    _views(cluster, fut.result().msg_id, {"Pub", "SubAfter"})  # async sends too
    with MQAdmin(cluster.namesrv_addr) as admin:
        # A producer without trace writes no Pub (the traced consumer's records are there).
        assert "Pub" not in {v.trace_type for v in admin.query_msg_trace_by_id(plain.msg_id)}
        # The business key finds the trace messages too (keyed by id and key).
        by_key = admin.query_msg_by_key("RMQ_SYS_TRACE_TOPIC", "order-1")
        assert by_key and all(sync.msg_id in m.keys for m in by_key)

    assert mqadmin.main(["-n", cluster.namesrv_addr, "queryMsgTraceById", "-i",
                         sync.msg_id]) == 0
    out = capsys.readouterr().out
    assert "#ProducerGroup" in out and "#ConsumerGroup" in out
    assert any(line.split()[:2] == ["Pub", "PG"] for line in out.splitlines())
    assert any(line.split()[:2] == ["Sub", "CG"] for line in out.splitlines())
    assert mqadmin.main(["-n", cluster.namesrv_addr, "queryMsgTraceById", "-i",
                         sync.msg_id, "--json"]) == 0
    assert {v["trace_type"] for v in json.loads(capsys.readouterr().out)} >= {
        "Pub", "SubBefore", "SubAfter"}


def test_a_custom_trace_topic_and_transactions(cluster: Cluster) -> None:
    cluster.start_broker("broker-a", traceTopicEnable=True, msgTraceTopicName="MyTraceTopic")

    class Listener:
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

    with TransactionProducer("TPG", cluster.namesrv_addr, Listener(), enable_msg_trace=True,
                             trace_topic="MyTraceTopic") as producer:
        r = producer.send(Message("TopicTx", b"tx", tags="TagT", keys=["tx-1"]))
    views = _views(cluster, r.msg_id, {"Pub", "EndTransaction"}, "MyTraceTopic")
    [pub] = [v for v in views if v.trace_type == "Pub"]
    [end] = [v for v in views if v.trace_type == "EndTransaction"]
    assert (end.group, end.topic, end.tags, end.keys, end.transaction_state,
            end.from_transaction_check) == ("TPG", "TopicTx", "TagT", "tx-1",
                                            "COMMIT_MESSAGE", False)
    assert pub.group == "TPG"


def test_trace_never_fails_a_send_when_its_topic_refuses(cluster: Cluster) -> None:
    cluster.start_broker("broker-a")
    # A reserved system topic: no broker takes a client's message there.
    with Producer("PG", cluster.namesrv_addr, enable_msg_trace=True,
                  trace_topic="rmq_sys_no_trace") as producer:
        started = time.monotonic()
        results = [producer.send(Message("TopicN", b"x%d" % i)) for i in range(20)]
        assert len(results) == 20 and time.monotonic() - started < 10
        trace = producer.trace
        assert trace is not None
        trace.flush()
        wait_until(lambda: trace.failed > 0, timeout=TIMEOUT_S,
                   message="the trace send failing")
        assert trace.dropped == 0
