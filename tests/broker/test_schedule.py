"""Delayed messages and consumption retries (SPEC §6, §7) against a broker in this process."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from broker.schedule import to_schedule_topic
from mqproto import messaging_pb2
from store.message import Message
from store.reading import GetMessageStatus
from tests.support.brokers import BrokerThread, code, pull, pull_all, send
from tests.support.clock import FakeClock
from tests.support.waiting import assert_never, wait_until

M = messaging_pb2
Start = Callable[..., BrokerThread]
SCHEDULE = "SCHEDULE_TOPIC_XXXX"


def delayed(level: int) -> M.SystemProperties:
    return M.SystemProperties(delay_time_level=level)


def queue_size(b: BrokerThread, topic: str, queue_id: int) -> int:
    return b.call(lambda: b.controller.store.get_max_offset_in_queue(topic, queue_id))


def test_schedule_topic_moves_and_restores_a_message() -> None:
    msg = Message("T", b"x", {"DELAY": "40", "TAGS": "a", "u": "1"}, queue_id=3)
    held = to_schedule_topic(msg, levels=18)
    assert (held.topic, held.queue_id, held.body) == (SCHEDULE, 17, b"x")
    assert held.properties == {"DELAY": "18", "TAGS": "a", "u": "1", "REAL_TOPIC": "T",
                               "REAL_QID": "3"}
    assert (msg.topic, msg.queue_id, msg.properties["DELAY"]) == ("T", 3, "40")


def test_a_delayed_message_waits_its_level_then_keeps_everything_but_the_delay(
        start_broker: Start) -> None:
    b = start_broker(messageDelayLevel="1s 2s 3s")
    r = send(b, "T", b"later", queue_id=2, tag="TagA", keys=["k1"],
             user_properties={"color": "red"},
             system_properties=M.SystemProperties(delay_time_level=1, born_timestamp=1234))
    assert code(r) == "SUCCESS", r.status
    sent_at = time.monotonic()
    [held] = pull_all(b, SCHEDULE, 0, expect=1)
    assert held.system_properties.real_topic == "T"
    assert held.system_properties.real_queue_id == 2
    assert held.system_properties.delay_time_level == 1
    assert queue_size(b, "T", 2) == 0
    wait_until(lambda: queue_size(b, "T", 2) == 1, timeout=5)
    assert time.monotonic() - sent_at >= 0.9
    [got] = pull_all(b, "T", 2, expect=1)
    sp = got.system_properties
    assert (got.body, got.tag, list(got.keys), dict(got.user_properties)) == (
        b"later", "TagA", ["k1"], {"color": "red"})
    assert sp.message_id == r.result.message_id
    assert (sp.delay_time_level, sp.real_topic, sp.born_timestamp) == (0, "", 1234)
    assert sp.store_timestamp - held.system_properties.store_timestamp >= 1000
    assert b.controller.delay_offsets.offset_table == {1: 1}


def test_levels_deliver_in_order_and_past_the_table_take_the_last(start_broker: Start) -> None:
    b = start_broker(messageDelayLevel="1s 1s")
    for i in range(20):
        assert code(send(b, "T", str(i).encode(), system_properties=delayed(1 + i % 3))) == (
            "SUCCESS")
    # Levels 2 and 3 share the table's last level (queue 1).
    wait_until(lambda: (queue_size(b, SCHEDULE, 0), queue_size(b, SCHEDULE, 1)) == (7, 13),
                    timeout=2)
    got = pull_all(b, "T", 0, expect=20)
    by_level = [[int(m.body) for m in got if int(m.body) % 3 == 0],
                [int(m.body) for m in got if int(m.body) % 3 != 0]]
    assert by_level == [list(range(0, 20, 3)), [i for i in range(20) if i % 3]]
    assert len(got) == 20


def test_delivery_follows_the_broker_clock(start_broker: Start) -> None:
    clock = FakeClock()
    b = start_broker({"clock_ms": clock}, messageDelayLevel="1m 1h")
    assert code(send(b, "T", b"x", system_properties=delayed(2))) == "SUCCESS"
    clock.advance(59 * 60)
    assert_never(lambda: queue_size(b, "T", 0) == 1, 0.5)
    clock.advance(60)
    wait_until(lambda: queue_size(b, "T", 0) == 1, timeout=3)


def test_progress_survives_a_restart_and_nothing_is_delivered_twice(
        start_broker: Start, tmp_path: object) -> None:
    b = start_broker(messageDelayLevel="1s 3s")
    assert code(send(b, "T", b"early", system_properties=delayed(1))) == "SUCCESS"
    assert code(send(b, "T", b"late", system_properties=delayed(2))) == "SUCCESS"
    wait_until(lambda: queue_size(b, "T", 0) == 1, timeout=5)
    b.stop()
    saved = json.loads((b.controller.root / "config" / "delayOffset.json").read_text())
    assert saved == {"offsetTable": {"1": 1}}  # level 2 has delivered nothing yet

    b2 = start_broker(messageDelayLevel="1s 3s")
    got = pull_all(b2, "T", 0, expect=2)
    time.sleep(1.5)  # a second pass of level 1 would have put "early" again by now
    got = pull_all(b2, "T", 0, expect=2)
    assert [m.body for m in got] == [b"early", b"late"]
    assert b2.controller.delay_offsets.offset_table == {1: 1, 2: 1}


def test_a_batch_has_one_delay_level(start_broker: Start) -> None:
    b = start_broker(messageDelayLevel="1s 2s")
    for levels in ([1, 0], [0, 1], [1, 2]):
        r = b.messaging.SendBatch(M.SendBatchRequest(topic="T", messages=[
            M.Message(body=b"a", system_properties=delayed(level)) for level in levels]))
        assert code(r) == "MESSAGE_ILLEGAL" and "one delay level" in r.status.remark
    assert b.controller.store.max_phy_offset == 0
    r = b.messaging.SendBatch(M.SendBatchRequest(topic="T", queue_id=1, messages=[
        M.Message(body=bytes([i]), system_properties=delayed(2)) for i in range(3)]))
    assert code(r) == "SUCCESS", r.status
    # The answer names the real queue; the schedule queue holds them until due.
    assert [(e.queue_id, e.queue_offset) for e in r.results] == [(1, 0), (1, 1), (1, 2)]
    assert [m.body for m in pull_all(b, "T", 1, expect=3)] == [bytes([i]) for i in range(3)]


def send_back(b: BrokerThread, msg: M.Message, group: str = "G", **kw: object
              ) -> M.ConsumerSendMsgBackResponse:
    sp = msg.system_properties
    return b.messaging.ConsumerSendMsgBack(M.ConsumerSendMsgBackRequest(
        consumer_group=group, commit_log_offset=sp.commit_log_offset,
        origin_message_id=sp.message_id, origin_topic=msg.topic, **kw), timeout=10)


def dlq_messages(b: BrokerThread, group: str) -> list[Message]:
    """The dead-letter queue is write-only for consumers (as in RocketMQ): read the store."""
    wait_until(lambda: queue_size(b, f"%DLQ%{group}", 0) > 0, timeout=2)
    result = b.call(lambda: b.controller.store.get_message("admin", f"%DLQ%{group}", 0, 0, 32))
    assert result.status is GetMessageStatus.FOUND, result.status
    return result.decoded()


def test_a_failed_message_retries_with_growing_delay_then_goes_to_the_dlq(
        start_broker: Start) -> None:
    b = start_broker(messageDelayLevel="1s 1s 1s 1s 1s 1s")
    r = send(b, "T", b"poison", tag="t", user_properties={"p": "1"})
    [first] = pull_all(b, "T", 0, expect=1)
    assert code(send_back(b, first, max_reconsume_times=2)) == "SUCCESS"
    config = b.controller.topics.get("%RETRY%G")
    assert config is not None and (config.read_queue_nums, config.perm) == (1, 6)
    [held] = pull_all(b, SCHEDULE, 2, expect=1)  # level 3 + 0 times consumed
    assert held.system_properties.real_topic == "%RETRY%G"

    [retry1] = pull_all(b, "%RETRY%G", 0, expect=1)
    sp = retry1.system_properties
    assert (sp.reconsume_times, sp.message_id, retry1.body, retry1.tag) == (
        1, r.result.message_id, b"poison", "t")
    assert dict(retry1.user_properties) == {"p": "1"}
    reserved = dict(sp.reserved_properties)
    assert reserved["RETRY_TOPIC"] == "T"
    assert reserved["ORIGIN_MESSAGE_ID"] == r.result.message_id

    assert code(send_back(b, retry1, max_reconsume_times=2)) == "SUCCESS"
    wait_until(lambda: queue_size(b, SCHEDULE, 3) == 1, timeout=2)  # level 3 + 1
    retry2 = pull_all(b, "%RETRY%G", 0, expect=2)[1]
    assert retry2.system_properties.reconsume_times == 2

    assert code(send_back(b, retry2, max_reconsume_times=2)) == "SUCCESS"
    [dead] = dlq_messages(b, "G")
    assert (dead.reconsume_times, dead.body, dead.properties["RETRY_TOPIC"]) == (
        3, b"poison", "T")
    assert "DELAY" not in dead.properties
    dlq = b.controller.topics.get("%DLQ%G")
    assert dlq is not None and dlq.perm == 2  # write only
    assert code(pull(b, "%DLQ%G", 0, 0)) == "NO_PERMISSION"


def test_a_consumer_may_choose_the_level_or_the_dlq(start_broker: Start) -> None:
    b = start_broker(messageDelayLevel="1s 5s 10s")
    send(b, "T", b"a")
    send(b, "T", b"b")
    a, bb = pull_all(b, "T", 0, expect=2)
    assert code(send_back(b, a, delay_level=1)) == "SUCCESS"
    wait_until(lambda: queue_size(b, SCHEDULE, 0) == 1, timeout=2)
    assert code(send_back(b, bb, delay_level=-1)) == "SUCCESS"
    [dead] = dlq_messages(b, "G")
    assert (dead.body, dead.reconsume_times) == (b"b", 1)


@pytest.mark.parametrize(("group", "offset", "expected"), [
    ("", 0, "INVALID_PARAMETER"),
    ("bad group", 0, "INVALID_PARAMETER"),
    ("G", 12_345, "SYSTEM_ERROR"),
])
def test_bad_send_backs_are_refused(start_broker: Start, group: str, offset: int,
                                    expected: str) -> None:
    b = start_broker()
    send(b, "T", b"a")
    r = b.messaging.ConsumerSendMsgBack(M.ConsumerSendMsgBackRequest(
        consumer_group=group, commit_log_offset=offset), timeout=10)
    assert code(r) == expected and r.status.remark
    assert b.controller.topics.get(f"%RETRY%{group}") is None


def test_a_record_without_its_real_topic_is_skipped(start_broker: Start) -> None:
    b = start_broker(messageDelayLevel="1s")
    bad = Message(SCHEDULE, b"bad", {"DELAY": "1"}, queue_id=0)
    assert b.call(lambda: b.controller.store.put_message(bad)).ok
    assert code(send(b, "T", b"good", system_properties=delayed(1))) == "SUCCESS"
    [got] = pull_all(b, "T", 0, expect=1)
    assert got.body == b"good"
    assert b.controller.delay_offsets.offset_table == {1: 2}


def test_a_send_back_outside_the_groups_subscriptions_is_refused(start_broker: Start) -> None:
    """With access control off too: the message at the named offset must be of a topic the
    group's consumers here subscribe to, or of its retry topic (none known: any)."""
    b = start_broker()
    send(b, "T", b"subscribed")
    send(b, "Other", b"not subscribed")
    [mine] = pull_all(b, "T", 0, expect=1)
    [other] = pull_all(b, "Other", 0, expect=1)
    assert code(send_back(b, other, delay_level=-1)) == "SUCCESS"  # no consumer known
    assert code(b.messaging.Heartbeat(M.HeartbeatRequest(
        client_id="c1", consumer_group="G", subscriptions=[
            M.ConsumerSubscription(topic=t, sub_string="*") for t in ("T", "%RETRY%G")]),
        timeout=10)) == "SUCCESS"
    end = b.controller.store.max_phy_offset
    r = send_back(b, other, delay_level=-1)
    assert code(r) == "NO_PERMISSION"
    assert "topic Other" in r.status.remark and "subscribe to (%RETRY%G, T)" in r.status.remark
    assert b.controller.store.max_phy_offset == end  # nothing stored
    assert code(send_back(b, mine, delay_level=-1)) == "SUCCESS"
    send(b, "%RETRY%G", b"a retry")
    [retry] = pull_all(b, "%RETRY%G", 0, expect=1)
    assert code(send_back(b, retry, delay_level=-1)) == "SUCCESS"
    # Its own dead letters too (a tool resends them to the group): back to %RETRY%G.
    dead = dlq_messages(b, "G")[0]
    assert dead.body == b"not subscribed"
    r = b.messaging.ConsumerSendMsgBack(M.ConsumerSendMsgBackRequest(
        consumer_group="G", commit_log_offset=dead.commit_log_offset, delay_level=1,
        max_reconsume_times=dead.reconsume_times + 3), timeout=10)
    assert code(r) == "SUCCESS"
