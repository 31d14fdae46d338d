"""SQL92 subscriptions at a broker in this process: heartbeat checks, filtered pulls, long
polling that answers only for a matching message, enablePropertyFilter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import broker.pull
from broker.message_filter import FilterRegistry
from broker.status import RequestError
from mqproto import common_pb2, messaging_pb2
from tests.support.brokers import BrokerThread

M = messaging_pb2
C = common_pb2
Start = Callable[..., BrokerThread]
SQL = "SQL92"


def send_batch(b: BrokerThread, topic: str, props: list[dict[str, str]], tag: str = "x"
               ) -> None:
    r = b.messaging.SendBatch(M.SendBatchRequest(
        producer_group="PG", topic=topic, queue_id=0,
        messages=[M.Message(topic=topic, body=f"m{i}".encode(), tag=p.pop("TAGS", tag),
                            user_properties=p) for i, p in enumerate(props)]), timeout=10)
    assert r.status.code == C.SUCCESS, r.status
    end = r.results[-1].queue_offset + 1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # dispatched to the consume queue
        m = b.messaging.GetMaxOffset(M.GetMaxOffsetRequest(topic=topic, queue_id=0))
        if m.offset >= end:
            return
        time.sleep(0.01)
    raise AssertionError(f"{topic} never reached offset {end}")


def pull(b: BrokerThread, topic: str, offset: int, sql: str, suspend_ms: int = 0,
         group: str = "CG", expression_type: str = SQL) -> M.PullMessageResponse:
    return b.messaging.PullMessage(M.PullMessageRequest(
        consumer_group=group, topic=topic, queue_id=0, queue_offset=offset, max_msg_nums=32,
        subscription=sql, suspend_timeout_millis=suspend_ms, expression_type=expression_type),
        timeout=30)


def heartbeat(b: BrokerThread, sql: str, expression_type: str = SQL) -> M.HeartbeatResponse:
    return b.messaging.Heartbeat(M.HeartbeatRequest(
        client_id="c1", consumer_group="CG",
        subscriptions=[M.ConsumerSubscription(topic="T", sub_string=sql,
                                              expression_type=expression_type)]), timeout=10)


def bodies(r: M.PullMessageResponse) -> list[bytes]:
    return [m.body for m in r.messages]


def test_registry_compiles_once_and_refuses_with_reasons() -> None:
    registry = FilterRegistry(enabled=True, size=2)
    f = registry.message_filter("SQL92", "a > 1")
    assert registry.message_filter("sql92", "a > 1") is f  # compiled once, kept
    assert registry.message_filter("", "TagA").filters  # tags stay the default
    assert not registry.message_filter("TAG", "*").filters
    with pytest.raises(RequestError) as e:
        registry.check("SQL92", "a >> 1")
    assert e.value.code == C.SUBSCRIPTION_PARSE_FAILED and "column 4" in e.value.remark
    registry.message_filter("SQL92", "b > 1")
    assert len(registry) == 2  # bounded: the oldest went
    with pytest.raises(RequestError) as e:
        registry.check("XPATH", "a")
    assert e.value.code == C.SUBSCRIPTION_PARSE_FAILED
    with pytest.raises(RequestError) as e:
        FilterRegistry(enabled=False).check("SQL92", "a > 1")
    assert e.value.code == C.REQUEST_CODE_NOT_SUPPORTED
    assert "enablePropertyFilter" in e.value.remark
    FilterRegistry(enabled=False).check("TAG", "a || b")  # tags need no switch


def test_heartbeat_refuses_a_bad_expression_saying_where(start_broker: Start) -> None:
    b = start_broker(enablePropertyFilter=True)
    bad = heartbeat(b, "a > 5 AND TAGS IN ('x' 'y')")
    assert bad.status.code == C.SUBSCRIPTION_PARSE_FAILED
    assert "at column 24" in bad.status.remark and "T" in bad.status.remark
    assert b.call(lambda: b.controller.clients.consumer_ids("CG")) == []  # not registered
    good = heartbeat(b, "a > 5 AND TAGS IN ('x', 'y')")
    assert good.status.code == C.SUCCESS
    assert b.call(lambda: b.controller.clients.consumer_ids("CG")) == ["c1"]


def test_without_enable_property_filter_sql_is_refused(start_broker: Start) -> None:
    b = start_broker()
    r = heartbeat(b, "a > 5")
    assert r.status.code == C.REQUEST_CODE_NOT_SUPPORTED
    assert "SQL92" in r.status.remark and "enablePropertyFilter" in r.status.remark
    assert heartbeat(b, "TagA", expression_type="TAG").status.code == C.SUCCESS
    send_batch(b, "T", [{"a": "7"}])
    p = pull(b, "T", 0, "a > 5")
    assert p.status.code == C.REQUEST_CODE_NOT_SUPPORTED


def test_filtered_pull_returns_matches_and_skips_the_rest(start_broker: Start) -> None:
    b = start_broker(enablePropertyFilter=True)
    send_batch(b, "T", [{"a": str(i), "TAGS": "x" if i % 2 else "y"} for i in range(20)])
    r = pull(b, "T", 0, "a >= 10 AND TAGS = 'x'")
    assert r.status.code == C.SUCCESS
    assert bodies(r) == [f"m{i}".encode() for i in (11, 13, 15, 17, 19)]
    assert r.next_begin_offset == 20
    assert [m.system_properties.queue_offset for m in r.messages] == [11, 13, 15, 17, 19]
    none = pull(b, "T", 0, "a > 100")
    assert none.status.code == C.NO_MATCHED_MSG and none.next_begin_offset == 20
    # Numbers as strings, NULLs: `b` is on no message.
    assert len(pull(b, "T", 0, "b IS NULL AND a < '5'").messages) == 0  # 'x' is no number
    assert bodies(pull(b, "T", 0, "b IS NULL AND a < 2")) == [b"m0", b"m1"]
    assert pull(b, "T", 0, "b = 'z' OR NOT (b = 'z')").status.code == C.NO_MATCHED_MSG
    bad = pull(b, "T", 0, "a >")
    assert bad.status.code == C.SUBSCRIPTION_PARSE_FAILED and "column 4" in bad.status.remark


def test_a_long_run_of_misses_moves_the_offset_on(start_broker: Start) -> None:
    b = start_broker(enablePropertyFilter=True)
    for start in range(0, 1000, 250):
        send_batch(b, "T", [{"a": str(i)} for i in range(start, start + 250)])
    r = pull(b, "T", 0, "a = 950")
    assert r.status.code == C.NO_MATCHED_MSG  # scanned 800 entries, none matched
    assert r.next_begin_offset == 800
    r = pull(b, "T", r.next_begin_offset, "a = 950")
    assert bodies(r) == [b"m200"]  # the 201st of the fourth batch
    assert r.next_begin_offset == 1000


def test_long_polling_answers_only_for_a_matching_message(
        start_broker: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its answer with the offset past the misses later than the match comes.
    monkeypatch.setattr(broker.pull, "FILTER_SKIP_ANSWER_S", 5.0)
    b = start_broker(enablePropertyFilter=True)
    send_batch(b, "T", [{"a": "1"}])

    def later() -> None:
        time.sleep(0.3)
        send_batch(b, "T", [{"a": "2"}, {"a": "3"}])  # no match: the pull keeps waiting
        time.sleep(0.5)
        send_batch(b, "T", [{"a": "4"}, {"a": "9"}])

    sender = threading.Thread(target=later)
    begin = time.monotonic()
    sender.start()
    r = pull(b, "T", 1, "a > 5", suspend_ms=10_000)
    waited = time.monotonic() - begin
    sender.join()
    assert r.status.code == C.SUCCESS
    assert [m.user_properties["a"] for m in r.messages] == ["9"]
    assert r.next_begin_offset == 5
    assert 0.7 < waited < 5


def test_long_polling_with_only_misses_ends_with_the_offset_past_them(
        start_broker: Start) -> None:
    b = start_broker(enablePropertyFilter=True)
    send_batch(b, "T", [{"a": "1"}, {"a": "2"}])
    sender = threading.Timer(0.2, lambda: send_batch(b, "T", [{"a": "3"}]))
    begin = time.monotonic()
    sender.start()
    r = pull(b, "T", 0, "a > 5", suspend_ms=1000)  # skips 0, 1 and waits at 2
    sender.join()
    assert time.monotonic() - begin >= 0.9  # the whole suspend time
    assert r.status.code == C.NO_MATCHED_MSG
    assert r.next_begin_offset == 3  # past the message that arrived and did not match
    # Tags long polling is unchanged: an answer at once when nothing is new.
    t = pull(b, "T", 3, "x", expression_type="TAG")
    assert t.status.code == C.NO_NEW_MSG and t.next_begin_offset == 3


def test_two_groups_with_different_filters_on_one_topic(start_broker: Start) -> None:
    b = start_broker(enablePropertyFilter=True)
    send_batch(b, "T", [{"region": r, "amount": str(a)} for r, a in
                        [("eu", 5), ("us", 50), ("eu", 500), ("asia", 7), ("us", 8)]])
    eu = pull(b, "T", 0, "region = 'eu'", group="G-eu")
    big = pull(b, "T", 0, "amount BETWEEN 8 AND 100", group="G-big")
    assert bodies(eu) == [b"m0", b"m2"]
    assert bodies(big) == [b"m1", b"m4"]
    assert eu.next_begin_offset == big.next_begin_offset == 5


def test_tag_long_polling_also_waits_past_other_tags(
        start_broker: Start, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker.pull, "FILTER_SKIP_ANSWER_S", 5.0)
    b = start_broker()
    send_batch(b, "T", [{"TAGS": "y"}])

    def later() -> None:
        time.sleep(0.2)
        send_batch(b, "T", [{"TAGS": "y"}, {"TAGS": "y"}])
        time.sleep(0.3)
        send_batch(b, "T", [{"TAGS": "x"}])

    sender = threading.Thread(target=later)
    sender.start()
    r = pull(b, "T", 0, "x", suspend_ms=10_000, expression_type="TAG")
    sender.join()
    assert r.status.code == C.SUCCESS
    assert [m.system_properties.queue_offset for m in r.messages] == [3]
    assert r.next_begin_offset == 4


def test_a_pull_that_only_skipped_answers_with_its_offset_within_a_second(
        start_broker: Start) -> None:
    """Its consumer commits the moved offset: a group whose filter takes nothing of a
    queue has no lag (not a pull held its whole suspend time, the lag standing)."""
    b = start_broker()
    send_batch(b, "T", [{"TAGS": "y"} for _ in range(10)])
    begin = time.monotonic()
    r = pull(b, "T", 0, "x", suspend_ms=10_000, expression_type="TAG")
    waited = time.monotonic() - begin
    assert (r.status.code, r.next_begin_offset) == (C.NO_MATCHED_MSG, 10)
    assert 0.9 < waited < 5  # FILTER_SKIP_ANSWER_S, not the 10 s suspend time


def test_pulls_under_a_stream_of_misses_neither_spin_nor_stand_still(
        start_broker: Start) -> None:
    """Messages the filter skips keep arriving: each long poll answers about once a
    second with the offset past them, not once per arrival, not after its suspend time."""
    b = start_broker()
    send_batch(b, "T", [{"TAGS": "y"}])
    stop = threading.Event()
    sent = [1]

    def stream() -> None:
        while not stop.is_set():
            send_batch(b, "T", [{"TAGS": "y"}])
            sent[0] += 1
            time.sleep(0.02)

    sender = threading.Thread(target=stream)
    sender.start()
    answers: list[tuple[float, int]] = []
    offset = 0
    try:
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            begin = time.monotonic()
            r = pull(b, "T", offset, "x", suspend_ms=10_000, expression_type="TAG")
            assert r.status.code == C.NO_MATCHED_MSG, r.status
            assert r.next_begin_offset > offset
            offset = r.next_begin_offset
            answers.append((time.monotonic() - begin, offset))
    finally:
        stop.set()
        sender.join()
    assert 3 <= len(answers) <= 6, answers
    assert all(waited < 2 for waited, _ in answers), answers
    assert offset > sent[0] - 100  # at most about a second of misses behind
