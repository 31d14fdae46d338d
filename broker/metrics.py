"""The broker's Prometheus metrics (`/metrics` on metricsPort), named as
apache/rocketmq-exporter names them where it has the metric, so its Grafana dashboards
work; the rest is ours, in the same style (docs/metrics.md lists them).

A scrape is two steps (remoting.metrics_http): `take_snapshot` copies the broker's tables on
the event loop (counters, per-(group, topic) plans as GetConsumeStats copies them, the HA
slaves; nothing per queue), and `broker_families` reads the store for every queue and
builds the metric families in the metrics worker thread, as GetConsumeStats does.

Labels. Broker-wide metrics carry the exporter's (cluster, brokerIP, broker); per topic
(cluster, broker, topic); per group (cluster, broker, topic, group); per queue also
`queueid`. `rocketmq_brokeruntime_*` keep the exporter's names with the broker-wide labels
(its labels des, boottime and broker_version are left out: a label that changes at every
restart splits the series). A slave's fall-behind is reported by its master, labelled
with the slave's address as brokerIP (as the exporter's rocketmq_broker_commitlog_diff).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker import consume_stats
from broker.constants import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from remoting.metrics_http import (
    GIL_YIELD_LINES,
    MetricsEndpoint,
    Render,
    histogram_family,
)
from store.histogram import HistogramSnapshot

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from store.message_store import DefaultMessageStore

BROKER_LABELS = ("cluster", "brokerIP", "broker")
TOPIC_LABELS = ("cluster", "broker", "topic")
GROUP_LABELS = ("cluster", "broker", "topic", "group")
QUEUE_LABELS = ("cluster", "broker", "topic", "group", "queueid")
GROUP_DIFF_LABELS = ("group", "topic", "countOfOnlineConsumers", "msgModel", "cluster",
                     "broker")
# MessageModel.CLUSTERING.ordinal(): offsets kept by the broker are clustering consumers'
# (broadcasting consumers keep theirs locally and never commit here).
MSG_MODEL_CLUSTERING = "1"


@dataclasses.dataclass(frozen=True, slots=True)
class SlaveLag:
    broker_addr: str  # the slave broker's address (its link's when it did not say)
    fall_behind_bytes: int
    fall_behind_seconds: float
    in_sync: bool


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerSnapshot:
    """What a scrape needs from the loop's tables: copies, nothing per queue."""

    cluster: str
    broker_name: str
    broker_addr: str
    now_ms: int
    put_total: int
    get_total: int
    put_tps: float
    get_tps: float
    topic_put: dict[str, int]
    topic_put_tps: dict[str, float]
    group_topic_get: dict[tuple[str, str], int]
    group_topic_get_tps: dict[tuple[str, str], float]
    topic_queue_nums: dict[str, int]  # every topic config: its queues (max of read, write)
    groups: list[consume_stats.GroupPlan]
    slaves: list[SlaveLag]
    send_latency: HistogramSnapshot
    flush_latency: HistogramSnapshot
    store_path: str

    @property
    def broker_labels(self) -> dict[str, str]:
        return {"cluster": self.cluster, "brokerIP": self.broker_addr,
                "broker": self.broker_name}


def take_snapshot(broker: BrokerContext) -> BrokerSnapshot:
    """On the event loop: O(topics + groups × their topics + slaves), never O(queues)."""
    stats, store = broker.stats, broker.store
    slaves = []
    if broker.ha_service is not None:
        for s in broker.ha_service.slave_statuses():
            if s.broker_id < 0 and not s.connected:
                continue  # a closed link of a slave that never said who it is
            slaves.append(SlaveLag(s.broker_addr or s.address, s.fall_behind_bytes,
                                   s.fall_behind_seconds, s.in_sync))
    return BrokerSnapshot(
        cluster=broker.config.broker_cluster_name, broker_name=broker.config.broker_name,
        broker_addr=broker.addresses.broker_addr, now_ms=broker.clock_ms(),
        put_total=stats.put_total, get_total=stats.get_total, put_tps=stats.put_tps(),
        get_tps=stats.get_total_tps(), topic_put=dict(stats.topic_put),
        topic_put_tps=stats.topic_put_tps(), group_topic_get=dict(stats.group_topic_get),
        group_topic_get_tps=stats.group_topic_get_tps(),
        topic_queue_nums={name: max(t.read_queue_nums, t.write_queue_nums)
                          for name, t in broker.topics.table.items()},
        groups=consume_stats.plan(broker, "", ""), slaves=slaves,
        send_latency=stats.send_latency.snapshot(),
        flush_latency=store.flush_latency.snapshot(),
        store_path=str(store.root))


def _gauge(name: str, doc: str, labels: tuple[str, ...]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def broker_families(s: BrokerSnapshot, store: DefaultMessageStore) -> Iterator[Metric]:
    """Every family of one scrape (any thread: reads the store per queue)."""
    yield from _broker_wide(s, store)
    yield from _put_distribution(s)
    yield from _topics(s, store)
    yield from _groups(s, store)
    yield from _slaves(s)


def _broker_wide(s: BrokerSnapshot, store: DefaultMessageStore) -> Iterator[Metric]:
    labels = list(s.broker_labels.values())

    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = _gauge(name, doc, BROKER_LABELS)
        g.add_metric(labels, value)
        return g

    def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=list(BROKER_LABELS))
        c.add_metric(labels, value)
        return c

    yield gauge("rocketmq_broker_tps", "Messages stored per second (last minute)", s.put_tps)
    yield gauge("rocketmq_broker_qps", "Messages returned by pulls per second (last minute)",
                s.get_tps)
    yield counter("rocketmq_broker_put_messages", "Messages stored since the broker started",
                  s.put_total)
    yield counter("rocketmq_broker_get_messages",
                  "Messages returned by pulls since the broker started", s.get_total)
    max_offset = store.max_phy_offset
    yield gauge("rocketmq_brokeruntime_commitlog_maxoffset",
                "Commitlog max physical offset (end of readable data)", max_offset)
    yield gauge("rocketmq_brokeruntime_commitlog_minoffset",
                "Commitlog min physical offset (start of the oldest file)", store.min_phy_offset)
    yield gauge("rocketmq_brokeruntime_dispatch_behind_bytes",
                "Commitlog bytes not yet dispatched to consume queues and the index",
                store.dispatch_behind_bytes)
    yield gauge("rocketmq_brokeruntime_remain_howmanydata_toflush",
                "Commitlog bytes written but not yet flushed to disk (bytes)",
                max(0, max_offset - store.commitlog.flushed_offset))
    try:
        st = os.statvfs(s.store_path)
    except OSError:
        pass
    else:
        yield gauge("rocketmq_brokeruntime_commitlogdir_capacity_total",
                    "Size of the store's file system (bytes)", st.f_blocks * st.f_frsize)
        yield gauge("rocketmq_brokeruntime_commitlogdir_capacity_free",
                    "Free space of the store's file system (bytes)", st.f_bavail * st.f_frsize)
    yield histogram_family("rocketmq_send_latency_seconds",
                           "Seconds from a send request's arrival to its answer",
                           s.broker_labels, s.send_latency.cumulative(), s.send_latency.sum)
    yield histogram_family("rocketmq_storage_flush_latency_seconds",
                           "Seconds of each commitlog flush to disk that wrote data",
                           s.broker_labels, s.flush_latency.cumulative(), s.flush_latency.sum)


# RocketMQ's PutMessageDistributeTime ranges (exporter: rocketmq_brokeruntime_pmdt_*), as
# (name suffix, lower bound exclusive, upper bound inclusive) in seconds; "0ms" is below 1 ms.
PMDT_RANGES: tuple[tuple[str, float, float], ...] = (
    ("0ms", 0.0, 0.001), ("0to10ms", 0.001, 0.01), ("10to50ms", 0.01, 0.05),
    ("50to100ms", 0.05, 0.1), ("100to200ms", 0.1, 0.2), ("200to500ms", 0.2, 0.5),
    ("500to1s", 0.5, 1.0), ("1to2s", 1.0, 2.0), ("2to3s", 2.0, 3.0), ("3to4s", 3.0, 4.0),
    ("4to5s", 4.0, 5.0), ("5to10s", 5.0, 10.0), ("10stomore", 10.0, float("inf")))


def _put_distribution(s: BrokerSnapshot) -> Iterator[Metric]:
    """The exporter's put latency distribution: send requests per latency range since start
    (RocketMQ counts store puts; ours are the send latency histogram's ranges)."""
    h = s.send_latency
    labels = list(s.broker_labels.values())
    for suffix, low, high in PMDT_RANGES:
        g = _gauge(f"rocketmq_brokeruntime_pmdt_{suffix}",
                   f"Send requests answered in ({low:g} s, {high:g} s] since start",
                   BROKER_LABELS)
        g.add_metric(labels, h.count_le(high) - (h.count_le(low) if low else 0))
        yield g


def _topics(s: BrokerSnapshot, store: DefaultMessageStore) -> Iterator[Metric]:
    base = [s.cluster, s.broker_name]
    tps = _gauge("rocketmq_producer_tps", "Messages stored per second per topic (last minute)",
                 TOPIC_LABELS)
    total = CounterMetricFamily("rocketmq_topic_put_messages",
                                "Messages stored per topic since the broker started",
                                labels=list(TOPIC_LABELS))
    for topic, n in sorted(s.topic_put.items()):
        tps.add_metric([*base, topic], s.topic_put_tps.get(topic, 0.0))
        total.add_metric([*base, topic], n)
    offset = _gauge("rocketmq_producer_offset",
                    "Sum of the max offsets of the topic's queues (messages ever stored)",
                    TOPIC_LABELS)
    for topic, queues in sorted(s.topic_queue_nums.items()):
        offset.add_metric([*base, topic], sum(store.get_max_offset_in_queue(topic, q)
                                              for q in range(queues)))
    yield from (tps, total, offset)


def _diff_family(topic: str) -> str:
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "rocketmq_group_retrydiff"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "rocketmq_group_dlqdiff"
    return "rocketmq_group_diff"


def _groups(s: BrokerSnapshot, store: DefaultMessageStore) -> Iterator[Metric]:
    base = [s.cluster, s.broker_name]
    diffs = {name: _gauge(name, doc, GROUP_DIFF_LABELS) for name, doc in (
        ("rocketmq_group_diff", "Messages a consumer group has not consumed, per topic"),
        ("rocketmq_group_retrydiff", "Messages of a group's retry topic not yet consumed"),
        ("rocketmq_group_dlqdiff", "Messages in a group's dead-letter topic"))}
    consumer_tps = _gauge("rocketmq_consumer_tps",
                          "Messages pulled per second per group and topic (last minute)",
                          GROUP_LABELS)
    consumer_offset = _gauge("rocketmq_consumer_offset",
                             "Sum of the group's committed offsets over the topic's queues",
                             GROUP_LABELS)
    latency = _gauge("rocketmq_group_get_latency_by_storetime",
                     "Milliseconds since the store time of the oldest message the group has "
                     "not consumed (0 when it is caught up), the worst queue", GROUP_LABELS)
    queue_offset = _gauge("rocketmq_group_queue_offset",
                          "The group's committed offset of a queue (-1: never committed)",
                          QUEUE_LABELS)
    queue_diff = _gauge("rocketmq_group_queue_diff",
                        "Messages of a queue the group has not consumed", QUEUE_LABELS)
    got = CounterMetricFamily("rocketmq_consumer_get_messages",
                              "Messages pulled per group and topic since the broker started",
                              labels=list(GROUP_LABELS))
    for (group, topic), n in sorted(s.group_topic_get.items()):
        got.add_metric([*base, topic, group], n)
        consumer_tps.add_metric([*base, topic, group], s.group_topic_get_tps.get(
            (group, topic), 0.0))
    since_pause = 0
    for g in s.groups:
        for t in g.topics:
            lag = queue_lags(store, t, s.now_ms)
            since_pause += len(lag)
            if since_pause >= GIL_YIELD_LINES:  # let the event loop have the GIL
                since_pause = 0
                time.sleep(0)
            labels = [*base, t.topic, g.group]
            diffs[_diff_family(t.topic)].add_metric(
                [g.group, t.topic, str(g.online_consumers), MSG_MODEL_CLUSTERING,
                 s.cluster, s.broker_name], sum(q.diff for q in lag))
            consumer_offset.add_metric(labels, sum(max(0, q.committed) for q in lag))
            latency.add_metric(labels, max((q.latency_ms for q in lag), default=0))
            for q in lag:
                queue_offset.add_metric([*labels, str(q.queue_id)], q.committed)
                queue_diff.add_metric([*labels, str(q.queue_id)], q.diff)
    yield from diffs.values()
    yield from (consumer_tps, got, consumer_offset, latency, queue_offset, queue_diff)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueLag:
    queue_id: int
    committed: int  # -1: never committed
    diff: int  # messages from the first unconsumed one to the queue's max offset
    latency_ms: int  # now - store time of the first unconsumed message; 0 when none


def queue_lags(store: DefaultMessageStore, t: consume_stats.TopicPlan,
               now_ms: int) -> list[QueueLag]:
    """Per queue of one (group, topic): what is left to consume (any thread). Nothing
    committed yet: everything from the queue's min offset is left, as GetConsumeStats."""
    out = []
    for q in t.queues():
        max_offset = store.get_max_offset_in_queue(q.topic, q.queue_id)
        first = max(q.committed, store.get_min_offset_in_queue(q.topic, q.queue_id))
        diff = max(0, max_offset - first)
        latency = 0
        if diff:
            stored = store.get_message_store_timestamp(q.topic, q.queue_id, first)
            latency = max(0, now_ms - stored) if stored > 0 else 0
        out.append(QueueLag(q.queue_id, q.committed, diff, latency))
    return out


def _slaves(s: BrokerSnapshot) -> Iterator[Metric]:
    diff = _gauge("rocketmq_broker_commitlog_diff",
                  "Commitlog bytes a slave lacks (master max offset - slave ack), by the slave's "
                  "address", BROKER_LABELS)
    seconds = _gauge("rocketmq_broker_slave_fallbehind_seconds",
                     "Seconds since the store time of the first record a slave lacks "
                     "(0 when it lacks none)", BROKER_LABELS)
    in_sync = _gauge("rocketmq_broker_slave_in_sync",
                     "1 when the slave counts for SYNC_MASTER (connected, verified, recent ack, "
                     "within haSlaveFallbehindMax)", BROKER_LABELS)
    for slave in s.slaves:
        labels = [s.cluster, slave.broker_addr, s.broker_name]
        diff.add_metric(labels, slave.fall_behind_bytes)
        seconds.add_metric(labels, slave.fall_behind_seconds)
        in_sync.add_metric(labels, 1 if slave.in_sync else 0)
    yield from (diff, seconds, in_sync)


class BrokerMetrics(MetricsEndpoint):
    """The broker's `/metrics` server (the controller starts it when metricsPort != 0)."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        super().__init__("broker")

    def _snapshot(self) -> Render:
        return functools.partial(self._render, take_snapshot(self.broker))

    def _render(self, snapshot: BrokerSnapshot) -> bytes:
        return self._renderer.render(broker_families(snapshot, self.broker.store))


__all__ = ["BrokerMetrics", "BrokerSnapshot", "QueueLag", "broker_families", "queue_lags",
           "take_snapshot"]
