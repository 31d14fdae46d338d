"""Consume stats (GetConsumeStats; SPEC §4 and §8): per (group, topic, queue) the broker
offset, the committed offset (-1 when never committed), the queue's min offset, the store
times of the first unconsumed and last consumed messages, the lag in bytes and the time of
the group's last commit.

Two steps, so that a broker with many queues does not stall its event loop: `plan` copies
what it needs from the loop's tables, per (group, topic) and never per queue (on the loop);
`offset_wrappers` expands the topics to their queues and reads the store for each, in a
worker thread.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from broker.consumer_offsets import offset_key, split_offset_key
from mqproto import admin_pb2, common_pb2

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from store.message_store import DefaultMessageStore


@dataclasses.dataclass(frozen=True, slots=True)
class QueuePlan:
    topic: str
    queue_id: int
    committed: int  # -1: never committed
    last_commit_ms: int  # 0: unknown


@dataclasses.dataclass(frozen=True, slots=True)
class TopicPlan:
    """What the loop's tables say of one (group, topic): copies, expanded to queues later."""

    topic: str
    read_queue_nums: int  # 0: the topic is gone (its committed queues are still reported)
    committed: dict[int, int]
    commit_times: dict[int, int]

    def queues(self) -> list[QueuePlan]:
        """Every queue: those committed on and 0 .. read_queue_nums - 1 (any thread)."""
        committed, times = self.committed, self.commit_times
        queue_ids = set(committed)
        queue_ids.update(range(self.read_queue_nums))
        return [QueuePlan(self.topic, q, committed.get(q, -1), times.get(q, 0))
                for q in sorted(queue_ids)]


@dataclasses.dataclass(slots=True)
class GroupPlan:
    group: str
    consume_tps: float
    online_consumers: int
    topics: list[TopicPlan]


def plan(broker: BrokerContext, group: str, topic: str) -> list[GroupPlan]:
    """The groups (`group`, or every group with offsets or online consumers) and the topics
    to report: each topic the group committed on or its online consumers subscribe (nothing
    committed yet: all of it is lag), or only `topic`. Runs on the loop: copies per (group,
    topic), no work per queue (a topic may have maxTopicQueueNums queues, and more when
    its config predates the limit)."""
    offsets, clients = broker.offsets, broker.clients
    topics_by_group: dict[str, set[str]] = {}
    for key in offsets.offset_table:
        t, g = split_offset_key(key)
        topics_by_group.setdefault(g, set()).add(t)
    groups = [group] if group else sorted(topics_by_group.keys() | clients.consumer_groups.keys())
    plans = []
    for g in groups:
        topics = [topic] if topic else sorted(
            topics_by_group.get(g, set()) | clients.subscribed_topics(g))
        topic_plans = []
        for t in topics:
            config = broker.topics.get(t)
            topic_plans.append(TopicPlan(
                t, config.read_queue_nums if config else 0,
                dict(offsets.offset_table.get(offset_key(t, g), {})),
                offsets.queue_commit_times(g, t)))
        plans.append(GroupPlan(g, broker.stats.consume_tps(g), len(clients.consumer_ids(g)),
                               topic_plans))
    return plans


def consume_stats_response(store: DefaultMessageStore, broker_name: str,
                           plans: list[GroupPlan], snapshot_ms: int
                           ) -> admin_pb2.GetConsumeStatsResponse:
    """GetConsumeStats' answer: the stats of every planned queue, read from the store (any
    thread). Built one queue at a time: building a message from a list of a million is
    one C call that holds the GIL, and so the event loop, for seconds."""
    response = admin_pb2.GetConsumeStatsResponse(snapshot_timestamp=snapshot_ms)
    response.status.code = common_pb2.SUCCESS
    for p in plans:
        stats = response.consume_stats.add(consumer_group=p.group, consume_tps=p.consume_tps,
                                           online_consumers=p.online_consumers)
        add = stats.offset_table.add
        for t in p.topics:
            for q in t.queues():
                add(**offset_wrapper(store, broker_name, q))
    return response


def serialized_response(store: DefaultMessageStore, broker_name: str, plans: list[GroupPlan],
                        snapshot_ms: int) -> bytes:
    """consume_stats_response, serialized (any thread)."""
    return consume_stats_response(store, broker_name, plans, snapshot_ms).SerializeToString()


def offset_wrapper(store: DefaultMessageStore, broker_name: str, q: QueuePlan
                    ) -> dict[str, Any]:
    """The fields of one queue's OffsetWrapper."""
    topic, queue_id = q.topic, q.queue_id
    broker_offset = store.get_max_offset_in_queue(topic, queue_id)
    min_offset = store.get_min_offset_in_queue(topic, queue_id)
    first = max(q.committed, min_offset)  # the first message the group has not consumed
    first_unconsumed = (store.get_message_store_timestamp(topic, queue_id, first)
                        if first < broker_offset else 0)
    last_consumed = (store.get_message_store_timestamp(topic, queue_id, q.committed - 1)
                     if q.committed > min_offset else 0)
    lag_bytes, exact = store.get_queue_bytes(topic, queue_id, first, broker_offset)
    return {"topic": topic, "broker_name": broker_name, "queue_id": queue_id,
            "broker_offset": broker_offset, "consumer_offset": q.committed,
            "last_timestamp": max(0, last_consumed),
            "first_unconsumed_timestamp": max(0, first_unconsumed),
            "queue_min_offset": min_offset, "last_commit_timestamp": q.last_commit_ms,
            "lag_bytes": lag_bytes, "lag_bytes_exact": exact}
