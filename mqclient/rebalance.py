"""Rebalancing (RebalanceImpl): which queues this consumer owns, recomputed every rebalance
period and at once when the group's membership or a route changes. Client loop only."""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable

import grpc

from mqclient.allocate import AllocateStrategy
from mqclient.constants import ADMIN_CALL_TIMEOUT_S, MASTER_ID
from mqclient.instance import ClientInstance
from mqclient.message import MessageQueue, MQClientError, code_name
from mqclient.offset_store import OffsetStore
from mqclient.process_queue import ProcessQueue
from mqclient.route import TopicRoute
from mqproto import common_pb2, messaging_pb2

log = logging.getLogger(__name__)
RELEASE_POLL_S = 0.02  # orderly: how often a queue given up checks its call ended


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"  # each queue to one consumer of the group
    BROADCASTING = "BROADCASTING"  # every consumer gets every message


class ConsumeFromWhere(enum.Enum):
    """Where a group with no committed offset for a queue starts."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class Rebalancer:
    def __init__(self, instance: ClientInstance, group: str, model: MessageModel,
                 strategy: AllocateStrategy, offset_store: OffsetStore,
                 consume_from_where: ConsumeFromWhere, consume_timestamp_ms: int, *,
                 orderly: bool, start_pull: Callable[[ProcessQueue], None],
                 stop_pull: Callable[[MessageQueue], None]) -> None:
        self.instance = instance
        self.group = group
        self.model = model
        self.strategy = strategy
        self.offset_store = offset_store
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.orderly = orderly
        self.start_pull = start_pull
        self.stop_pull = stop_pull
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        # Orderly: queues no longer wanted whose listener call is still running; they keep
        # their broker lock until it ends (then are committed and unlocked).
        self.releasing: dict[MessageQueue, ProcessQueue] = {}
        self.release_tasks: set[asyncio.Task[None]] = set()
        self.rebalance_count = 0

    @property
    def locks_queues(self) -> bool:
        return self.orderly and self.model is MessageModel.CLUSTERING

    async def do_rebalance(self) -> None:
        for topic in list(self.instance.subscriptions):
            try:
                await self._rebalance_topic(topic)
            except MQClientError as e:
                log.warning("rebalance of %s for group %s failed: %s", topic, self.group, e)
        self.rebalance_count += 1

    async def _rebalance_topic(self, topic: str) -> None:
        route = self.instance.routes.get(topic) or await self.instance.update_route(topic)
        if route is None:
            log.warning("no route of subscribed topic %s yet", topic)
            return
        mq_all = sorted(route.subscribe_queues)
        if self.model is MessageModel.BROADCASTING:
            wanted = set(mq_all)
        else:
            cid_all = await self.consumer_ids(route)
            if self.instance.client_id not in cid_all:
                log.info("%s not yet in the consumer list of %s; heartbeating", self.group,
                         self.instance.client_id)
                await self.instance.heartbeat_all()
                cid_all = await self.consumer_ids(route)
            if not cid_all:
                return
            wanted = set(self.strategy.allocate(self.group, self.instance.client_id, mq_all,
                                                cid_all))
        await self._update_process_queues(topic, wanted)

    async def consumer_ids(self, route: TopicRoute) -> list[str]:
        """The group's consumers as a broker of the topic knows them (every consumer
        heartbeats to every broker), sorted."""
        errors = []
        # Masters first; a slave knows the group too (consumers heartbeat to it), which
        # matters while a killed master is still in the route.
        groups = [route.brokers[name] for name in sorted(route.brokers)]
        addrs = [a for g in groups for i, a in sorted(g.addrs.items()) if i == MASTER_ID]
        addrs += [a for g in groups for i, a in sorted(g.addrs.items()) if i != MASTER_ID]
        for addr in addrs:
            try:
                r = await self.instance.channels.messaging(addr).GetConsumerListByGroup(
                    messaging_pb2.GetConsumerListByGroupRequest(consumer_group=self.group),
                    timeout=ADMIN_CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                errors.append(f"{addr}: {e.code().name}")  # type: ignore[attr-defined]
                continue
            if r.status.code in (common_pb2.SUCCESS, common_pb2.CONSUMER_NOT_ONLINE):
                return sorted(r.consumer_id_list)
            errors.append(f"{addr}: {code_name(r.status.code)}")
        raise MQClientError("UNAVAILABLE", f"no consumer list of group {self.group}: "
                            + "; ".join(errors))

    async def _update_process_queues(self, topic: str, wanted: set[MessageQueue]) -> None:
        mine = {mq for mq in self.process_queues if mq.topic == topic}
        # A queue still being released (its call running) is taken again later.
        removed, added = mine - wanted, sorted(wanted - mine - set(self.releasing))
        for mq in sorted(removed):
            await self.remove_queue(mq)
        if added and self.locks_queues:
            locked = await self.lock(added)
            added = [mq for mq in added if mq in locked]
        for mq in added:
            try:
                offset = await self.compute_pull_from_where(mq)
            except MQClientError as e:
                log.warning("queue %s not taken now: %s", mq, e)
                continue
            pq = ProcessQueue(mq, offset)
            # Orderly queues move under their broker lock (committed before unlocked).
            pq.catch_up = self.model is MessageModel.CLUSTERING and not self.orderly
            if self.locks_queues:
                pq.locked, pq.last_lock_time = True, time.monotonic()
            self.offset_store.update(mq, offset, False)
            self.process_queues[mq] = pq
            self.start_pull(pq)
        if removed or added:
            log.info("group %s client %s: %s now %s", self.group, self.instance.client_id,
                     topic, sorted(str(mq) for mq in self.process_queues if mq.topic == topic))

    async def remove_queue(self, mq: MessageQueue) -> None:
        """Stops pulling `mq`, commits its offset and forgets it (and unlocks it). Orderly:
        while a listener call on it is running, the queue keeps its broker lock (renewed)
        and is committed and unlocked only once the call ended, so that the next owner
        cannot lock it and consume the same keys in parallel (RocketMQ keeps a busy queue
        in its table and retries the removal)."""
        pq = self.process_queues.pop(mq, None)
        if pq is None:
            return
        pq.dropped = True
        self.stop_pull(mq)
        if self.locks_queues and pq.consuming:
            log.info("group %s: %s goes to another consumer once its listener call ends",
                     self.group, mq)
            self.releasing[mq] = pq
            task = asyncio.get_running_loop().create_task(self._release_when_idle(mq, pq))
            self.release_tasks.add(task)
            task.add_done_callback(self.release_tasks.discard)
            return
        await self._release(mq)

    async def _release(self, mq: MessageQueue) -> None:
        await self.offset_store.persist([mq])
        self.offset_store.remove(mq)
        if self.locks_queues:
            await self.unlock([mq])

    async def _release_when_idle(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        try:
            while pq.consuming:
                await asyncio.sleep(RELEASE_POLL_S)
            await self._release(mq)
        finally:
            self.releasing.pop(mq, None)

    async def reset_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        """The group's committed offsets of these queues were reset on the broker: each
        owned one is replaced by a fresh process queue pulling from its new offset. The old
        one is dropped: its buffered messages are not consumed and calls in progress commit
        nothing (orderly: the new one starts once the old call ended)."""
        async def reset(mq: MessageQueue, offset: int) -> None:
            old = self.process_queues.get(mq)
            if old is None:
                return
            old.dropped = True
            self.stop_pull(mq)
            while old.consuming:  # orderly: one call on a queue at a time
                await asyncio.sleep(RELEASE_POLL_S)
            if self.process_queues.get(mq) is not old:
                return  # given up meanwhile
            pq = ProcessQueue(mq, offset)
            pq.locked, pq.last_lock_time = old.locked, old.last_lock_time
            self.process_queues[mq] = pq
            self.offset_store.reset(mq, offset)
            self.start_pull(pq)

        await asyncio.gather(*(reset(mq, o) for mq, o in sorted(offsets.items())))
        # Commit the new offsets again: a commit of the old ones may have reached the broker
        # after its reset (a periodic one, or riding on a pull sent before the notice).
        await self.offset_store.persist(sorted(mq for mq in offsets if mq in self.process_queues))

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        offset = await self.offset_store.read_from_store(mq)
        if offset >= 0:
            return offset
        where = self.consume_from_where
        if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET:
            return 0  # the broker moves a pull below its minimum up to it
        addr = self._admin_addr(mq)
        if addr is None:
            raise MQClientError("NO_ROUTE", f"broker group {mq.broker_name} of {mq} is gone")
        stub = self.instance.channels.messaging(addr)
        if where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP:
            r = await stub.SearchOffsetByTimestamp(messaging_pb2.SearchOffsetByTimestampRequest(
                topic=mq.topic, queue_id=mq.queue_id, timestamp=self.consume_timestamp_ms),
                timeout=ADMIN_CALL_TIMEOUT_S)
        else:
            r = await stub.GetMaxOffset(messaging_pb2.GetMaxOffsetRequest(
                topic=mq.topic, queue_id=mq.queue_id), timeout=ADMIN_CALL_TIMEOUT_S)
        if r.status.code != common_pb2.SUCCESS:
            raise MQClientError(code_name(r.status.code), r.status.remark)
        return int(r.offset)

    def _admin_addr(self, mq: MessageQueue) -> str | None:
        """The master of `mq`'s group, else a slave (findBrokerAddressInAdmin)."""
        group = self.instance.broker_group(mq)
        return group.admin_addr() if group is not None else None

    # -- orderly: broker-side queue locks ------------------------------------------------------
    def _by_broker(self, mqs: list[MessageQueue]) -> dict[str, list[MessageQueue]]:
        out: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            addr = self._admin_addr(mq)
            if addr is not None:
                out.setdefault(addr, []).append(mq)
        return out

    @staticmethod
    def _pb(mq: MessageQueue) -> messaging_pb2.MessageQueue:
        return messaging_pb2.MessageQueue(topic=mq.topic, broker_name=mq.broker_name,
                                          queue_id=mq.queue_id)

    async def lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        locked: set[MessageQueue] = set()
        for addr, group_mqs in self._by_broker(mqs).items():
            try:
                r = await self.instance.channels.messaging(addr).LockBatchMQ(
                    messaging_pb2.LockBatchMQRequest(
                        consumer_group=self.group, client_id=self.instance.client_id,
                        mq_set=[self._pb(mq) for mq in group_mqs]),
                    timeout=ADMIN_CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                log.warning("lock of %d queues at %s failed: %s", len(group_mqs), addr,
                            e.code())  # type: ignore[attr-defined]
                continue
            by_key = {(mq.topic, mq.queue_id): mq for mq in group_mqs}
            locked.update(by_key[(m.topic, m.queue_id)] for m in r.lock_ok_mq_set
                          if (m.topic, m.queue_id) in by_key)
        return locked

    async def unlock(self, mqs: list[MessageQueue]) -> None:
        for addr, group_mqs in self._by_broker(mqs).items():
            try:
                await self.instance.channels.messaging(addr).UnlockBatchMQ(
                    messaging_pb2.UnlockBatchMQRequest(
                        consumer_group=self.group, client_id=self.instance.client_id,
                        mq_set=[self._pb(mq) for mq in group_mqs]),
                    timeout=ADMIN_CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                log.warning("unlock at %s failed: %s", addr, e.code())  # type: ignore[attr-defined]

    async def lock_all(self) -> list[ProcessQueue]:
        """Renews the locks of all owned queues (and of those being released); returns
        the owned queues now locked."""
        mqs = sorted(self.process_queues)
        renew = sorted({*mqs, *self.releasing})
        locked = await self.lock(renew) if renew else set()
        now = time.monotonic()
        out = []
        for mq in mqs:
            pq = self.process_queues.get(mq)
            if pq is None:
                continue
            pq.locked = mq in locked
            if pq.locked:
                pq.last_lock_time = now
                out.append(pq)
        return out
