"""Rebalancing (RebalanceImpl): which queues this consumer owns, recomputed every rebalance
period and at once when the group's membership or a route changes. Client loop only."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable

import grpc

from common.constants import MASTER_ID
from mqclient.allocate import AllocateStrategy
from mqclient.constants import ADMIN_CALL_TIMEOUT_S
from mqclient.instance import ClientInstance
from mqclient.message import MessageQueue, MQClientError, code_name
from mqclient.offset_store import OffsetStore
from mqclient.process_queue import ProcessQueue
from mqclient.route import TopicRoute
from mqproto import common_pb2, messaging_pb2

log = logging.getLogger(__name__)
RELEASE_POLL_S = 0.02  # how often a queue given up checks its calls ended
# Concurrent listeners: how long a queue given up waits for its calls in progress before
# it is committed and unlocked anyway (orderly ones wait for their call without a bound).
RELEASE_WAIT_S = 10.0
# A queue this consumer should own whose lock another consumer still holds (it is
# finishing its calls and committing): tried again this soon, doubling up to the maximum,
# instead of at the next periodic rebalance.
LOCK_RETRY_S = 0.5
LOCK_RETRY_MAX_S = 1.0
# Concurrent listeners: a queue whose broker cannot be reached to lock it is consumed
# without the lock after this long (orderly ones wait for the lock).
LOCK_UNREACHABLE_WAIT_S = 3.0


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
        # Queues no longer wanted whose listener calls are still running; they keep their
        # broker lock until the calls end (then are committed and unlocked).
        self.releasing: dict[MessageQueue, ProcessQueue] = {}
        self.release_tasks: set[asyncio.Task[None]] = set()
        self.rebalance_count = 0
        # Wanted queues not taken because their lock is held elsewhere (or being released
        # here): the next rebalance comes after `lock_retry_s` (None: none waits).
        self.lock_retry_s: float | None = None
        self._lock_waiting = False
        # Wanted queues whose broker did not answer the lock request: since when.
        self._unreachable_since: dict[MessageQueue, float] = {}

    @property
    def locks_queues(self) -> bool:
        """Clustering consumers lock their queues on the broker: orderly ones to consume
        them, concurrent ones for their handovers (the next owner reads the committed
        offset only once the previous one committed and unlocked)."""
        return self.model is MessageModel.CLUSTERING

    async def do_rebalance(self) -> None:
        self._lock_waiting = False
        for topic in list(self.instance.subscriptions):
            try:
                await self._rebalance_topic(topic)
            except MQClientError as e:
                log.warning("rebalance of %s for group %s failed: %s", topic, self.group, e)
        if not self._lock_waiting:
            self.lock_retry_s = None
        elif self.lock_retry_s is None:
            self.lock_retry_s = LOCK_RETRY_S
        else:
            self.lock_retry_s = min(self.lock_retry_s * 2, LOCK_RETRY_MAX_S)
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
        # A queue still being released (its calls running) is taken again once released.
        removed, added = mine - wanted, sorted(wanted - mine - set(self.releasing))
        if (wanted - mine) & set(self.releasing):
            self._lock_waiting = True
        for mq in sorted(removed):
            await self.remove_queue(mq)
        unlocked: set[MessageQueue] = set()
        if added and self.locks_queues:
            added, unlocked = await self._lock_new(topic, added, wanted)
        for mq in added:
            try:
                offset = await self.compute_pull_from_where(mq)
            except MQClientError as e:
                log.warning("queue %s not taken now: %s", mq, e)
                self._lock_waiting = True  # tried again soon
                continue
            pq = ProcessQueue(mq, offset)
            # Taken without its lock: the previous owner may commit after the offset was
            # read; read it again before consuming (see PullService._catch_up).
            pq.catch_up = mq in unlocked
            if self.locks_queues and mq not in unlocked:
                pq.locked, pq.last_lock_time = True, self.instance.clock()
            self.offset_store.update(mq, offset, False)
            self.process_queues[mq] = pq
            self.start_pull(pq)
        if removed or added:
            log.info("group %s client %s: %s now %s", self.group, self.instance.client_id,
                     topic, sorted(str(mq) for mq in self.process_queues if mq.topic == topic))

    async def _lock_new(self, topic: str, added: list[MessageQueue], wanted: set[MessageQueue]
                        ) -> tuple[list[MessageQueue], set[MessageQueue]]:
        """Locks the queues to take; returns those to take, and among them those taken
        without their lock. A queue locked by another consumer waits (the next rebalance
        comes soon, see lock_retry_s); a concurrent consumer takes a queue whose broker
        does not answer after LOCK_UNREACHABLE_WAIT_S, without the lock."""
        locked, unreachable = await self._lock_batch(added)
        now = self.instance.clock()
        take, unlocked = [], set()
        for mq in added:
            if mq in locked:
                take.append(mq)
                self._unreachable_since.pop(mq, None)
                continue
            self._lock_waiting = True
            if mq not in unreachable:
                self._unreachable_since.pop(mq, None)
                continue
            since = self._unreachable_since.setdefault(mq, now)
            if not self.orderly and now - since >= LOCK_UNREACHABLE_WAIT_S:
                log.warning("group %s: the broker of %s could not be reached to lock it for "
                            "%.1f s; consuming it without the lock", self.group, mq,
                            now - since)
                take.append(mq)
                unlocked.add(mq)
                self._unreachable_since.pop(mq, None)
        for mq in [m for m in self._unreachable_since if m.topic == topic and m not in wanted]:
            del self._unreachable_since[mq]
        return take, unlocked

    async def remove_queue(self, mq: MessageQueue) -> None:
        """Stops pulling `mq`, commits its offset, unlocks it and forgets it. While
        listener calls on it run, the queue keeps its broker lock (renewed) and is
        committed and unlocked only once they ended (concurrent listeners: at most
        RELEASE_WAIT_S), so that the next owner, which reads the committed offset once it
        holds the lock, starts after them (orderly: cannot consume the same keys in
        parallel; RocketMQ keeps a busy queue in its table and retries the removal).
        Concurrent listeners: no call starts on it any more except those filling gaps
        below a call already started (the commit stops at the first message not
        consumed), and the results of the calls in progress count."""
        pq = self.process_queues.pop(mq, None)
        if pq is None:
            return
        pq.draining = self.locks_queues and not self.orderly
        pq.dropped = True
        self.stop_pull(mq)
        if self.locks_queues and pq.busy:
            log.debug("group %s: %s goes to another consumer once its listener calls end",
                      self.group, mq)
            self.releasing[mq] = pq
            task = asyncio.get_running_loop().create_task(self._release_when_idle(mq, pq))
            self.release_tasks.add(task)
            task.add_done_callback(self.release_tasks.discard)
            return
        pq.draining = False
        await self._release(mq)

    async def _release(self, mq: MessageQueue) -> None:
        await self.offset_store.persist([mq])
        self.offset_store.remove(mq)
        if self.locks_queues:
            await self.unlock([mq])

    async def _release_when_idle(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        try:
            deadline = None if self.orderly else self.instance.clock() + RELEASE_WAIT_S
            while pq.busy:
                if deadline is not None and self.instance.clock() > deadline:
                    log.warning("group %s: calls on %s still running after %.1f s; the queue "
                                "goes to its next owner, which consumes them again",
                                self.group, mq, RELEASE_WAIT_S)
                    break
                await asyncio.sleep(RELEASE_POLL_S)
            pq.draining = False  # results of calls ending now count no more
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
        return (await self._lock_batch(mqs))[0]

    async def _lock_batch(self, mqs: list[MessageQueue]
                          ) -> tuple[set[MessageQueue], set[MessageQueue]]:
        """(locked, not locked because their broker did not answer or is gone)."""
        locked: set[MessageQueue] = set()
        by_broker = self._by_broker(mqs)
        unreachable = set(mqs) - {mq for group_mqs in by_broker.values() for mq in group_mqs}

        async def lock_at(addr: str, group_mqs: list[MessageQueue]) -> None:
            try:
                r = await self.instance.channels.messaging(addr).LockBatchMQ(
                    messaging_pb2.LockBatchMQRequest(
                        consumer_group=self.group, client_id=self.instance.client_id,
                        mq_set=[self._pb(mq) for mq in group_mqs]),
                    timeout=ADMIN_CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                log.warning("lock of %d queues at %s failed: %s", len(group_mqs), addr,
                            e.code())  # type: ignore[attr-defined]
                unreachable.update(group_mqs)
                return
            if r.status.code != common_pb2.SUCCESS:
                log.warning("lock of %d queues at %s refused: %s %s", len(group_mqs), addr,
                            code_name(r.status.code), r.status.remark)
                unreachable.update(group_mqs)
                return
            by_key = {(mq.topic, mq.queue_id): mq for mq in group_mqs}
            locked.update(by_key[(m.topic, m.queue_id)] for m in r.lock_ok_mq_set
                          if (m.topic, m.queue_id) in by_key)

        await asyncio.gather(*(lock_at(addr, group_mqs)
                               for addr, group_mqs in by_broker.items()))
        return locked, unreachable

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
        the owned queues now locked and ready to consume."""
        mqs = sorted(self.process_queues)
        renew = sorted({*mqs, *self.releasing})
        locked = await self.lock(renew) if renew else set()
        now = self.instance.clock()
        out, regained = [], []
        for mq in mqs:
            pq = self.process_queues.get(mq)
            if pq is None:
                continue
            if mq not in locked:
                pq.locked = False
            elif pq.locked:
                pq.last_lock_time = now
                out.append(pq)
            else:  # consumed only once _taken_back said so
                regained.append(pq)
        for pq in regained:
            if await self._taken_back(pq) and not pq.dropped:
                pq.locked, pq.last_lock_time = True, now
                out.append(pq)
        return out

    async def _taken_back(self, pq: ProcessQueue) -> bool:
        """`pq`'s lock was lost and is held again: another consumer may have owned the queue
        meanwhile (views of the group differ for a moment, e.g. around a master's restart,
        whose locks are gone) and committed past what this one holds. Then the queue starts
        again from that commit, as a queue newly taken would (its buffered messages are
        not consumed twice, and no older offset is committed over the newer one); returns
        whether `pq` may be consumed as it is."""
        mq = pq.mq
        try:
            committed = await self.offset_store.read_from_store(mq)
        except MQClientError as e:
            log.debug("offset of %s not read again: %s", mq, e)
            return True
        if committed <= self.offset_store.read_memory(mq):
            return True
        log.info("group %s: %s was consumed elsewhere while its lock was lost (committed "
                 "%d); going on from there", self.group, mq, committed)
        pq.dropped = True  # nothing more of it is consumed; the reset replaces it
        pq.locked, pq.last_lock_time = True, self.instance.clock()  # the new one has it
        # Held at once: a commit of this consumer (its final one too) never goes below it.
        self.offset_store.update(mq, committed, True)
        task = asyncio.get_running_loop().create_task(self.reset_offsets({mq: committed}))
        self.release_tasks.add(task)
        task.add_done_callback(self.release_tasks.discard)
        return False
