"""A filtered consumer group's lag drains (real name server and broker processes): the
consumer commits the offsets the broker's filter moved it past, whether it consumed
nothing (tags, SQL92) or some messages followed by skipped ones; mqadmin's
consumerProgress, the broker's /metrics and the lag collector all see it."""

from __future__ import annotations

import threading
import time

from mqclient import (
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageSelector,
    Producer,
    PushConsumer,
)
from mqclient.admin import MQAdmin
from spark_analytics.collect import Collector
from tests.mqclient.conftest import Cluster
from tests.support.prom import scrape
from tests.support.waiting import wait_until

TOPIC = "FilteredT"
GROUP = "FilteredG"
# The broker answers a pull that only skipped within 1 s, the consumer commits the moved
# offset on its next pull: well within this. Before, the pull was held its whole suspend
# time (15 s) and the lag stayed.
DRAIN_TIMEOUT_S = 8.0


def send(cluster: Cluster, messages: list[Message]) -> None:
    producer = Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=1).start()
    try:
        for m in messages:
            producer.send(m)
    finally:
        producer.shutdown()


def start_consumer(cluster: Cluster, consumers: list[PushConsumer],
                   expression: str | MessageSelector, got: list[MessageExt]) -> PushConsumer:
    lock = threading.Lock()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        with lock:
            got.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    c = PushConsumer(GROUP, cluster.namesrv_addr,
                     consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    c.subscribe(TOPIC, expression)
    c.register_listener_concurrently(listener)
    consumers.append(c)
    return c.start()


def committed(admin: MQAdmin) -> tuple[int, int]:
    """(consumer offset, diff) of the topic's one queue for the group."""
    [q] = [q for q in admin.consumer_progress(GROUP).queues if q.topic == TOPIC]
    return q.consumer_offset, q.diff


def wait_drained(cluster: Cluster, end: int) -> None:
    seen: list[tuple[int, int]] = []
    with MQAdmin(cluster.namesrv_addr) as admin:
        try:
            wait_until(lambda: seen.append(committed(admin)) or seen[-1] == (end, 0),
                       timeout=DRAIN_TIMEOUT_S, interval=0.1)
        except AssertionError:
            raise AssertionError(f"the group did not commit {end} with no lag within "
                                 f"{DRAIN_TIMEOUT_S} s: (consumer offset, diff) went "
                                 f"{sorted(set(seen))}") from None


def assert_lag_figures_agree(cluster: Cluster, end: int) -> None:
    """The broker's /metrics and the lag collector's snapshot see the same: no lag."""
    broker = cluster.brokers[("broker-a", 0)]
    with MQAdmin(cluster.namesrv_addr) as admin:
        metrics_addr = admin.broker_runtime(broker.address).table["metricsAddr"]
    s = scrape(metrics_addr)
    assert s.value("rocketmq_group_diff", group=GROUP, topic=TOPIC) == 0
    assert s.value("rocketmq_group_queue_offset", group=GROUP, topic=TOPIC,
                   queueid="0") == end
    with Collector(cluster.namesrv_addr, timeout=5.0) as collector:
        table = collector.snapshot().table().to_pylist()
    [row] = [r for r in table if r["kind"] == "queue" and r["group"] == GROUP
             and r["topic"] == TOPIC]
    assert (row["broker_offset"], row["consumer_offset"]) == (end, end)


def test_tag_filtered_group_that_takes_nothing_drains(cluster: Cluster,
                                                      consumers: list[PushConsumer]) -> None:
    cluster.start_broker(metricsPort=-1)
    send(cluster, [Message(TOPIC, f"b{i}".encode(), tags="TagB") for i in range(10)])
    got: list[MessageExt] = []
    start_consumer(cluster, consumers, "TagA", got)
    wait_drained(cluster, 10)
    assert got == []
    assert_lag_figures_agree(cluster, 10)


def test_sql92_filtered_group_that_takes_nothing_drains(cluster: Cluster,
                                                        consumers: list[PushConsumer]) -> None:
    cluster.start_broker(enablePropertyFilter=True)
    send(cluster, [Message(TOPIC, f"s{i}".encode(), properties={"n": str(i)})
                   for i in range(10)])
    got: list[MessageExt] = []
    start_consumer(cluster, consumers, MessageSelector.by_sql("n > 100"), got)
    wait_drained(cluster, 10)
    assert got == []


def test_the_commit_goes_past_what_was_skipped_after_the_last_message(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    """One message taken, nine skipped behind it in the same pull: the commit after
    consuming it is 10, not 1."""
    cluster.start_broker()
    send(cluster, [Message(TOPIC, b"a0", tags="TagA")]
         + [Message(TOPIC, f"b{i}".encode(), tags="TagB") for i in range(9)])
    got: list[MessageExt] = []
    start_consumer(cluster, consumers, "TagA", got)
    wait_drained(cluster, 10)
    assert [m.body for m in got] == [b"a0"]


def test_a_stream_of_skipped_messages_keeps_the_lag_low(cluster: Cluster,
                                                        consumers: list[PushConsumer]) -> None:
    """Other tags keep arriving: the committed offset follows within seconds."""
    cluster.start_broker()
    producer = Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=1).start()
    try:
        producer.send(Message(TOPIC, b"first", tags="TagB"))
        got: list[MessageExt] = []
        start_consumer(cluster, consumers, "TagA", got)
        wait_drained(cluster, 1)
        sent = 1
        with MQAdmin(cluster.namesrv_addr) as admin:
            behind: list[int] = []
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                producer.send(Message(TOPIC, b"b", tags="TagB"))
                sent += 1
                time.sleep(0.05)
                if sent % 20 == 0:
                    behind.append(committed(admin)[1])
        assert max(behind) < 60, behind  # about 1 s of messages, never the whole stream
        wait_drained(cluster, sent)
        assert got == []
    finally:
        producer.shutdown()
