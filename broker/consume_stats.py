"""Consume stats (GetConsumeStats; SPEC §4 and §8): per (group, topic, queue) the broker
offset, the committed offset (-1 when never committed), the queue's min offset, the store
times of the first unconsumed and last consumed messages, the lag in bytes and the time of
the group's last commit.

Two steps, so that a broker with many queues does not stall its event loop: `plan` copies
what it needs from the loop's tables (cheap, on the loop); `offset_wrappers` reads the store
for every queue, in a worker thread.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from broker.consumer_offsets import offset_key, split_offset_key
from mqproto import admin_pb2

if TYPE_CHECKING:
    from broker.controller import BrokerController
    from store.message_store import DefaultMessageStore


@dataclasses.dataclass(frozen=True, slots=True)
class QueuePlan:
    topic: str
    queue_id: int
    committed: int  # -1: never committed
    last_commit_ms: int  # 0: unknown


@dataclasses.dataclass(slots=True)
class GroupPlan:
    group: str
    consume_tps: float
    online_consumers: int
    queues: list[QueuePlan]


def plan(broker: BrokerController, group: str, topic: str) -> list[GroupPlan]:
    """The groups (`group`, or every group with offsets or online consumers) and the queues
    to report: each topic the group committed on or its online consumers subscribe (nothing
    committed yet: all of it is lag), or only `topic`. Runs on the loop."""
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
        queues = []
        for t in topics:
            committed = offsets.offset_table.get(offset_key(t, g), {})
            config = broker.topics.get(t)
            queue_ids = set(committed) | set(range(config.read_queue_nums if config else 0))
            queues.extend(QueuePlan(t, q, committed.get(q, -1), offsets.last_commit_time(g, t, q))
                          for q in sorted(queue_ids))
        plans.append(GroupPlan(g, broker.stats.consume_tps(g), len(clients.consumer_ids(g)),
                               queues))
    return plans


def offset_wrappers(store: DefaultMessageStore, broker_name: str, plans: list[GroupPlan]
                    ) -> list[admin_pb2.ConsumeStats]:
    """The stats of every planned queue, read from the store (any thread)."""
    return [admin_pb2.ConsumeStats(
        consumer_group=p.group, consume_tps=p.consume_tps, online_consumers=p.online_consumers,
        offset_table=[_offset_wrapper(store, broker_name, q) for q in p.queues])
        for p in plans]


def _offset_wrapper(store: DefaultMessageStore, broker_name: str, q: QueuePlan
                    ) -> admin_pb2.OffsetWrapper:
    topic, queue_id = q.topic, q.queue_id
    broker_offset = store.get_max_offset_in_queue(topic, queue_id)
    min_offset = store.get_min_offset_in_queue(topic, queue_id)
    first = max(q.committed, min_offset)  # the first message the group has not consumed
    first_unconsumed = (store.get_message_store_timestamp(topic, queue_id, first)
                        if first < broker_offset else 0)
    last_consumed = (store.get_message_store_timestamp(topic, queue_id, q.committed - 1)
                     if q.committed > min_offset else 0)
    lag_bytes, exact = store.get_queue_bytes(topic, queue_id, first, broker_offset)
    return admin_pb2.OffsetWrapper(
        topic=topic, broker_name=broker_name, queue_id=queue_id, broker_offset=broker_offset,
        consumer_offset=q.committed, last_timestamp=max(0, last_consumed),
        first_unconsumed_timestamp=max(0, first_unconsumed), queue_min_offset=min_offset,
        last_commit_timestamp=q.last_commit_ms, lag_bytes=lag_bytes, lag_bytes_exact=exact)
