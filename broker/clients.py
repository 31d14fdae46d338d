"""Producers and consumers known to the broker through heartbeats (RocketMQ's
ProducerManager / ConsumerManager, reduced): who is in which group, for rebalancing; who
watches a group's membership; and the queue locks of orderly consumers
(RebalanceLockManager)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from broker.constants import CHANNEL_EXPIRED_TIMEOUT_MS
from broker.topic_config import Clock

# RebalanceLockManager.REBALANCE_LOCK_MAX_LIVE_TIME: an orderly consumer's queue lock lapses
# when not renewed this long.
REBALANCE_LOCK_MAX_LIVE_TIME_MS = 60_000

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ResetNotice:
    """An admin reset a group's offsets on a topic while its consumers were online."""

    topic: str
    broker_name: str
    offsets: dict[int, int]  # queue id -> new offset


@dataclasses.dataclass(frozen=True)
class GroupEvent:
    """What a membership watch stream sends: the group's consumers, and a reset if any."""

    consumer_ids: list[str]
    reset: ResetNotice | None = None


@dataclasses.dataclass
class ClientInfo:
    client_id: str
    last_update_timestamp: int
    # topic -> expression (tags, or SQL92 when the subscription says so)
    subscriptions: dict[str, str] = dataclasses.field(default_factory=dict)


class ClientManager:
    """Used from the event loop only. A client silent for 120 s leaves its groups."""

    def __init__(self, clock_ms: Clock, expired_ms: int = CHANNEL_EXPIRED_TIMEOUT_MS) -> None:
        self.clock_ms = clock_ms
        self.expired_ms = expired_ms
        self.consumer_groups: dict[str, dict[str, ClientInfo]] = {}
        self.producer_groups: dict[str, dict[str, ClientInfo]] = {}
        # group -> client id -> the queues of that client's membership watch streams
        self.watchers: dict[str, dict[str, list[asyncio.Queue[GroupEvent]]]] = {}
        # Called with (group, client id) when a consumer leaves its group or is dropped
        # (its queue locks are released at once).
        self.consumer_left: list[Callable[[str, str], None]] = []

    def heartbeat(self, client_id: str, producer_group: str, consumer_group: str,
                  subscriptions: dict[str, str]) -> None:
        now = self.clock_ms()
        if producer_group:
            self.producer_groups.setdefault(producer_group, {})[client_id] = ClientInfo(
                client_id, now)
        if consumer_group:
            group = self.consumer_groups.setdefault(consumer_group, {})
            joined = client_id not in group
            if joined:
                log.info("new consumer connected, group: %s client: %s", consumer_group,
                         client_id)
            group[client_id] = ClientInfo(client_id, now, dict(subscriptions))
            if joined:
                self._group_changed(consumer_group)

    def unregister(self, client_id: str, producer_group: str, consumer_group: str) -> None:
        """A client that left (UnregisterClient, or its watch stream ended)."""
        if producer_group:
            self.producer_groups.get(producer_group, {}).pop(client_id, None)
            if not self.producer_groups.get(producer_group, True):
                del self.producer_groups[producer_group]
        if consumer_group:
            for left in self.consumer_left:
                left(consumer_group, client_id)
        group = self.consumer_groups.get(consumer_group) if consumer_group else None
        if group is not None and group.pop(client_id, None) is not None:
            log.info("consumer %s left group %s", client_id, consumer_group)
            if not group:
                del self.consumer_groups[consumer_group]
            self._group_changed(consumer_group)

    # -- membership watchers (NOTIFY_CONSUMER_IDS_CHANGED) -----------------------------------
    def watch(self, group: str, client_id: str) -> asyncio.Queue[GroupEvent]:
        """A queue receiving the group's consumer ids after each change."""
        queue: asyncio.Queue[GroupEvent] = asyncio.Queue()
        self.watchers.setdefault(group, {}).setdefault(client_id, []).append(queue)
        return queue

    def unwatch(self, group: str, client_id: str, queue: asyncio.Queue[GroupEvent]) -> None:
        """The watch stream ended: when it was the client's last one, the client is gone
        (RocketMQ drops a consumer whose channel closed)."""
        by_client = self.watchers.get(group, {})
        queues = by_client.get(client_id, [])
        if queue in queues:
            queues.remove(queue)
        if queues:
            return
        by_client.pop(client_id, None)
        if not by_client:
            self.watchers.pop(group, None)
        self.unregister(client_id, "", group)

    def _group_changed(self, group: str, reset: ResetNotice | None = None) -> None:
        event = GroupEvent(sorted(self.consumer_groups.get(group, {})), reset)
        for queues in self.watchers.get(group, {}).values():
            for queue in queues:
                queue.put_nowait(event)

    def notify_reset(self, group: str, topic: str, broker_name: str,
                     offsets: dict[int, int]) -> None:
        """Tells the group's watching consumers that its offsets on `topic` were reset."""
        self._group_changed(group, ResetNotice(topic, broker_name, dict(offsets)))

    def _scan(self, table: dict[str, dict[str, ClientInfo]], group: str) -> dict[str, ClientInfo]:
        clients = table.get(group, {})
        now = self.clock_ms()
        expired = [c for c, i in clients.items()
                   if now - i.last_update_timestamp > self.expired_ms]
        for client_id in expired:
            log.info("client %s of group %s expired (no heartbeat for %d ms)", client_id, group,
                     now - clients[client_id].last_update_timestamp)
            del clients[client_id]
            if table is self.consumer_groups:
                for left in self.consumer_left:
                    left(group, client_id)
        if not clients:
            table.pop(group, None)
        if expired and table is self.consumer_groups:
            self._group_changed(group)
        return clients

    def consumer_ids(self, group: str) -> list[str]:
        return sorted(self._scan(self.consumer_groups, group))

    def producer_ids(self, group: str) -> list[str]:
        return sorted(self._scan(self.producer_groups, group))

    def subscribed_topics(self, group: str) -> set[str]:
        """The topics the live consumers of a group subscribe to."""
        return {t for c in self._scan(self.consumer_groups, group).values()
                for t in c.subscriptions}


QueueId = tuple[str, int]  # (topic, queueId) on this broker


class QueueLocks:
    """Queue locks of clustering consumers (orderly ones, and concurrent ones for their
    handovers): each queue of a group locked by at most one client; a lock not renewed for
    `expiry_ms` lapses (RebalanceLockManager, 60 s); a client that leaves its group or is
    dropped (its watch stream broke) loses all its locks at once. Event loop only."""

    def __init__(self, clock_ms: Clock,
                 expiry_ms: int = REBALANCE_LOCK_MAX_LIVE_TIME_MS) -> None:
        self.clock_ms = clock_ms
        self.expiry_ms = expiry_ms
        self._locks: dict[str, dict[QueueId, tuple[str, int]]] = {}  # -> (client, renewed)
        # (group, client) -> the queues it holds, so that a departure costs its own locks
        self._held: dict[tuple[str, str], set[QueueId]] = {}

    def try_lock_batch(self, group: str, client_id: str, queues: list[QueueId]
                       ) -> list[QueueId]:
        """Locks or renews what is free or already this client's; returns those."""
        now = self.clock_ms()
        locks = self._locks.setdefault(group, {})
        locked: list[QueueId] = []
        for queue in queues:
            holder = locks.get(queue)
            if holder is None or holder[0] == client_id or now - holder[1] > self.expiry_ms:
                if holder is not None and holder[0] != client_id:
                    log.info("queue lock %s of group %s lapsed (held by %s), now %s", queue,
                             group, holder[0], client_id)
                    self._held.get((group, holder[0]), set()).discard(queue)
                locks[queue] = (client_id, now)
                self._held.setdefault((group, client_id), set()).add(queue)
                locked.append(queue)
        return locked

    def holder_other_than(self, group: str, client_id: str, queue: QueueId) -> str | None:
        """The client holding a live lock of `queue` if it is not `client_id`."""
        holder = self._locks.get(group, {}).get(queue)
        if (holder is None or holder[0] == client_id
                or self.clock_ms() - holder[1] > self.expiry_ms):
            return None
        return holder[0]

    def unlock_batch(self, group: str, client_id: str, queues: list[QueueId]) -> None:
        locks = self._locks.get(group, {})
        held = self._held.get((group, client_id), set())
        for queue in queues:
            holder = locks.get(queue)
            if holder is not None and holder[0] == client_id:
                del locks[queue]
                held.discard(queue)
        if not held:
            self._held.pop((group, client_id), None)

    def release_client(self, group: str, client_id: str) -> None:
        """Every lock `client_id` holds in `group` (it left or was dropped)."""
        held = self._held.pop((group, client_id), None)
        if not held:
            return
        locks = self._locks.get(group, {})
        for queue in held:
            holder = locks.get(queue)
            if holder is not None and holder[0] == client_id:
                del locks[queue]
        log.info("client %s left group %s: its %d queue locks released", client_id, group,
                 len(held))
