"""Delayed sends and consumption retries end to end (SPEC §6, §7): real name server and
broker processes, a producer and push consumers. The brokers' delay levels are all 1 s
(messageDelayLevel) so that retries come back quickly."""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict

import pytest

from mqclient import ConsumeStatus, Message, MessageExt, Producer, PushConsumer
from mqclient.admin import MQAdmin
from tests.mqclient.conftest import Cluster
from tests.mqclient.test_consumer import FIRST, create_topic, start_consumer
from tests.support.waiting import wait_until

FAST_LEVELS = " ".join(["1s"] * 18)
TIMEOUT_S = 30.0


class Attempts:
    """Records each delivery of a message by its body: (topic, reconsume times, msg id,
    monotonic time)."""

    def __init__(self, fail: dict[bytes, int]) -> None:
        self.fail = fail  # body -> deliveries to fail (a large number: always)
        self.lock = threading.Lock()
        self.seen: dict[bytes, list[tuple[str, int, str, float]]] = defaultdict(list)

    def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        [m] = msgs
        with self.lock:
            self.seen[m.body].append((m.topic, m.reconsume_times, m.msg_id, time.monotonic()))
            if len(self.seen[m.body]) <= self.fail.get(m.body, 0):
                return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    def count(self, body: bytes) -> int:
        with self.lock:
            return len(self.seen[body])


def test_failed_messages_come_back_from_the_retry_topic_then_go_to_the_dlq(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a", messageDelayLevel=FAST_LEVELS)
    producer = create_topic(cluster, "TopicR", 2)
    attempts = Attempts({b"flaky": 2, b"poison": 1_000})
    start_consumer(consumers, cluster, attempts, "TopicR", consume_from_where=FIRST,
                   max_reconsume_times=2, poll_name_server_interval_s=2)
    try:
        sent = {body: producer.send(Message("TopicR", body, keys=[body.decode()]))
                for body in (b"flaky", b"poison", *(b"ok-%d" % i for i in range(20)))}
    finally:
        producer.shutdown()
    # Failures do not hold the queues up: the rest is consumed at once.
    wait_until(lambda: all(attempts.count(b"ok-%d" % i) for i in range(20)), timeout=10,
               message="the good messages consumed")
    wait_until(lambda: attempts.count(b"flaky") == 3 and attempts.count(b"poison") == 3,
               timeout=TIMEOUT_S, message=f"three deliveries each: {dict(attempts.seen)}")
    time.sleep(2.5)  # a fourth delivery of either would come by now
    with attempts.lock:
        for body in (b"flaky", b"poison"):
            seen = attempts.seen[body]
            assert [(t, n, i) for t, n, i, _ in seen] == [
                ("TopicR", n, sent[body].msg_id) for n in range(3)], seen
            assert all(b[3] - a[3] >= 0.9 for a, b in itertools.pairwise(seen)), seen
        assert all(len(attempts.seen[b"ok-%d" % i]) == 1 for i in range(20))

    with MQAdmin(cluster.namesrv_addr) as admin:
        [dlq] = admin.topic_status("%DLQ%CG")
        assert (dlq.min_offset, dlq.max_offset) == (0, 1)
        [dead] = admin.query_msg_by_key("%DLQ%CG", "poison")
        assert dead.body == b"poison" and dead.reconsume_times == 3
        progress = admin.consumer_progress("CG")
        topics = {q.topic for q in progress.queues}
        assert topics == {"TopicR", "%RETRY%CG"}
        wait_until(lambda: admin.consumer_progress("CG").diff_total == 0, timeout=10,
                   message="every queue of the group committed to its end")


def test_an_orderly_queue_moves_on_once_a_message_went_to_the_dlq(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a", messageDelayLevel=FAST_LEVELS)
    producer = create_topic(cluster, "TopicO", 1)
    order: list[bytes] = []
    poison_tries: list[int] = []

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            if m.body == b"poison":
                poison_tries.append(m.reconsume_times)
                return ConsumeStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            order.append(m.body)
        return ConsumeStatus.CONSUME_SUCCESS

    start_consumer(consumers, cluster, listener, "TopicO", orderly=True,
                   consume_from_where=FIRST, max_reconsume_times=1)
    try:
        for body in (b"a", b"poison", b"b", b"c"):
            producer.send(Message("TopicO", body, keys=[body.decode()]))
    finally:
        producer.shutdown()
    wait_until(lambda: order[-1:] == [b"c"], timeout=TIMEOUT_S, message=f"got {order}")
    assert order == [b"create", b"a", b"b", b"c"]
    assert poison_tries == [0, 1]
    with MQAdmin(cluster.namesrv_addr) as admin:
        wait_until(lambda: admin.topic_status("%DLQ%CG")[0].max_offset == 1, timeout=5,
                   message="the poison message in the DLQ")


def test_delayed_sends_arrive_after_their_delay(cluster: Cluster,
                                               consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a", messageDelayLevel="1s 2s")
    producer = Producer("PG", cluster.namesrv_addr).start()
    arrived: dict[bytes, float] = {}
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            for m in msgs:
                arrived[m.body] = time.monotonic()
        return ConsumeStatus.CONSUME_SUCCESS

    try:
        producer.send(Message("TopicD", b"create"))
        start_consumer(consumers, cluster, listener, "TopicD", consume_from_where=FIRST)
        wait_until(lambda: b"create" in arrived, timeout=TIMEOUT_S, message="consumer ready")
        sent_at = time.monotonic()
        now = producer.send(Message("TopicD", b"now"))
        sync = producer.send(Message("TopicD", b"sync-2s", delay_level=2))
        futures = [producer.send_async(Message("TopicD", b"async-%d" % i, delay_level=1))
                   for i in range(10)]
        batch = producer.send_batch([Message("TopicD", b"batch-%d" % i, delay_level=1)
                                     for i in range(3)])
        async_results = [f.result(10) for f in futures]
    finally:
        producer.shutdown()
    assert sync.message_queue.topic == "TopicD" and now.message_queue.topic == "TopicD"
    assert len({r.message_queue for r in batch}) == 1
    assert all(r.msg_id for r in async_results)
    wait_until(lambda: len(arrived) == 16, timeout=TIMEOUT_S, message=f"got {sorted(arrived)}")
    with lock:
        assert arrived[b"now"] - sent_at < 0.9
        assert arrived[b"sync-2s"] - sent_at >= 1.9
        for body in [b"async-%d" % i for i in range(10)] + [b"batch-%d" % i for i in range(3)]:
            assert arrived[body] - sent_at >= 0.9, body


def test_a_batch_needs_one_delay_level(cluster: Cluster) -> None:
    from mqclient import MQClientError
    cluster.start_broker("broker-a")
    with Producer("PG", cluster.namesrv_addr) as producer, pytest.raises(
            MQClientError, match="one delay level"):
        producer.send_batch([Message("T", b"a", delay_level=1), Message("T", b"b")])
