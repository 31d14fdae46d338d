"""Pulling one assigned queue (PullMessageService / PullAPIWrapper): long polls against the
queue's broker group, from the broker it suggests, falling back to a slave while the master
is unreachable or gone from the route. Client loop only."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

import grpc

from common.constants import MASTER_ID
from mqclient.codec import decode_records
from mqclient.constants import (
    BROKER_SUSPEND_MAX_TIME_MS,
    CONSUMER_TIMEOUT_WHEN_SUSPEND_S,
    PULL_ADDRESS_DOWN_S,
    PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
    PULL_TIME_DELAY_WHEN_EXCEPTION_S,
    PULL_TIME_DELAY_WHEN_FLOW_CONTROL_S,
)
from mqclient.instance import ClientInstance
from mqclient.loop import ACCESS_REFUSED, cancel_and_wait
from mqclient.message import MessageExt, MessageQueue, MQClientError, code_name
from mqclient.offset_store import OffsetStore
from mqclient.process_queue import ProcessQueue
from mqproto import common_pb2, messaging_pb2

log = logging.getLogger(__name__)
_DOWN_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
STOP_TIMEOUT_S = 3.0


class PullService:
    def __init__(self, instance: ClientInstance, group: str, offset_store: OffsetStore, *,
                 batch_size: int, threshold: int, commit_on_pull: bool,
                 threshold_size_mib: int = PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
                 topic_threshold: int = -1, topic_threshold_size_mib: int = -1,
                 may_pull: Callable[[ProcessQueue], bool],
                 on_messages: Callable[[ProcessQueue, list[MessageExt]], None]) -> None:
        self.instance = instance
        self.group = group
        self.offset_store = offset_store
        self.batch_size = batch_size
        self.threshold = threshold
        self.threshold_bytes = threshold_size_mib * 1024 * 1024
        # Per topic (-1: none), shared by the topic's queues this consumer owns
        # (RocketMQ's pullThresholdForTopic / pullThresholdSizeForTopic).
        self.topic_threshold = topic_threshold
        self.topic_threshold_bytes = (topic_threshold_size_mib * 1024 * 1024
                                      if topic_threshold_size_mib > 0 else -1)
        self._queues_of_topic: Counter[str] = Counter()
        self.commit_on_pull = commit_on_pull  # clustering: piggy-back the offset
        self.may_pull = may_pull
        self.on_messages = on_messages
        self.suggested_broker: dict[MessageQueue, int] = {}
        self._down_until: dict[str, float] = {}
        self.tasks: dict[MessageQueue, asyncio.Task[None]] = {}

    def start(self, pq: ProcessQueue) -> None:
        self.tasks[pq.mq] = asyncio.get_running_loop().create_task(self._pull_loop(pq))
        self._queues_of_topic[pq.mq.topic] += 1

    def stop(self, mq: MessageQueue) -> None:
        task = self.tasks.pop(mq, None)
        if task is not None:
            task.cancel()
            self._queues_of_topic[mq.topic] -= 1

    def flow_controlled(self, pq: ProcessQueue) -> bool:
        """Too much of the queue is buffered: by count, by body bytes (RocketMQ's
        pullThresholdForQueue and pullThresholdSizeForQueue), or by its share of its
        topic's thresholds when set."""
        count, size = self.threshold, self.threshold_bytes
        if self.topic_threshold > 0 or self.topic_threshold_bytes > 0:
            queues = max(1, self._queues_of_topic[pq.mq.topic])
            if self.topic_threshold > 0:
                count = min(count, max(1, self.topic_threshold // queues))
            if self.topic_threshold_bytes > 0:
                size = min(size, max(1, self.topic_threshold_bytes // queues))
        return len(pq) >= count or pq.msg_size >= size

    async def stop_all(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        tasks = list(self.tasks.values())
        self.tasks.clear()
        await cancel_and_wait(tasks, timeout_s, f"pulls of group {self.group}")

    def _addresses(self, mq: MessageQueue) -> list[tuple[str, bool]]:
        """(address, is master) to pull from, best first; addresses that failed recently
        go last, the most recent failure last of all."""
        group = self.instance.broker_group(mq)
        if group is None:
            return []
        now = self.instance.clock()
        addrs = group.pull_addrs(self.suggested_broker.get(mq, MASTER_ID))
        # All down: the one that failed longest ago first (it may be back; pulling only
        # the one that failed last would never see another come back).
        addrs.sort(key=lambda a: max(self._down_until.get(a, 0.0), now))
        return [(a, a == group.master_addr) for a in addrs]

    async def _pull_loop(self, pq: ProcessQueue) -> None:
        mq = pq.mq
        subscription = self.instance.subscriptions.get(mq.topic, "*")
        expression_type = self.instance.expression_types.get(mq.topic, "")
        while not pq.dropped:
            if self.flow_controlled(pq) or not self.may_pull(pq):
                await asyncio.sleep(PULL_TIME_DELAY_WHEN_FLOW_CONTROL_S)
                continue
            addresses = self._addresses(mq)
            if not addresses:
                log.warning("no broker of %s in the route; pulling again later", mq)
                await asyncio.sleep(PULL_TIME_DELAY_WHEN_EXCEPTION_S)
                continue
            addr, is_master = addresses[0]
            request = messaging_pb2.PullMessageRequest(
                consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id,
                queue_offset=pq.next_offset, max_msg_nums=self.batch_size,
                subscription=subscription, suspend_timeout_millis=BROKER_SUSPEND_MAX_TIME_MS,
                raw_records=True, expression_type=expression_type,
                client_id=self.instance.client_id)
            commit = self.offset_store.read_memory(mq)
            # Not the offset the queue started from: the previous owner may have committed
            # a later one since (see _catch_up).
            if self.commit_on_pull and is_master and commit > 0 and not pq.catch_up:
                request.commit_offset = commit
            try:
                response = await self.instance.channels.messaging(addr).PullMessage(
                    request, timeout=CONSUMER_TIMEOUT_WHEN_SUSPEND_S)
            except grpc.RpcError as e:
                code = e.code()  # type: ignore[attr-defined]
                if code in _DOWN_CODES:
                    self._down_until[addr] = self.instance.clock() + PULL_ADDRESS_DOWN_S
                if code in ACCESS_REFUSED:
                    log.warning("pull of %s from %s refused: %s: %s", mq, addr, code.name,
                                e.details())  # type: ignore[attr-defined]  (access control)
                else:
                    log.info("pull of %s from %s failed: %s", mq, addr, code.name)
                now = self.instance.clock()
                # Straight on only to another address not known down (all down: the
                # loop would spin on them).
                if code not in _DOWN_CODES or all(self._down_until.get(a, 0.0) > now
                                                  for a, _ in addresses):
                    await asyncio.sleep(PULL_TIME_DELAY_WHEN_EXCEPTION_S)
                continue
            if pq.dropped:
                return
            if pq.catch_up and response.status.code == common_pb2.SUCCESS:
                pq.catch_up = False
                await self._catch_up(pq)
                if pq.dropped:
                    return
            self._handle(pq, addr, response)
            if response.status.code not in (common_pb2.SUCCESS, common_pb2.NO_NEW_MSG,
                                             common_pb2.NO_MATCHED_MSG,
                                             common_pb2.OFFSET_ILLEGAL):
                await asyncio.sleep(PULL_TIME_DELAY_WHEN_EXCEPTION_S)

    async def _catch_up(self, pq: ProcessQueue) -> None:
        """A queue taken over from another consumer, before its first messages are
        consumed: reads the group's committed offset again. The previous owner commits
        when it learns of the rebalance, often after this consumer read the offset to
        start from; what it consumed up to its commit is skipped here instead of being
        consumed twice."""
        try:
            committed = await self.offset_store.read_from_store(pq.mq)
        except MQClientError as e:
            log.debug("offset of %s not read again: %s", pq.mq, e)
            return
        if committed > pq.next_offset:
            log.info("%s: the previous owner committed %d after this consumer started "
                     "from %d; going on from there", pq.mq, committed, pq.next_offset)
            pq.skip_below = committed
            pq.max_offset = max(pq.max_offset, committed - 1)
            self.offset_store.update(pq.mq, committed, True)

    def _handle(self, pq: ProcessQueue, addr: str,
                response: messaging_pb2.PullMessageResponse) -> None:
        mq = pq.mq
        self.suggested_broker[mq] = response.suggest_which_broker_id
        code = response.status.code
        if code == common_pb2.SUCCESS:
            msgs = decode_records(response.raw_records, mq.broker_name)
            pq.next_offset = response.next_begin_offset
            if pq.skip_below > 0:  # consumed by the previous owner (_catch_up)
                msgs = [m for m in msgs if m.queue_offset >= pq.skip_below]
                pq.next_offset = max(pq.next_offset, pq.skip_below)
                pq.skip_below = 0
            if msgs:
                pq.put(msgs)
                self.on_messages(pq, msgs)
            # A filter skipped what lies between the last message and the next offset:
            # once these are consumed, the commit goes past the skipped ones too.
            pq.max_offset = max(pq.max_offset, pq.next_offset - 1)
        elif code in (common_pb2.NO_NEW_MSG, common_pb2.NO_MATCHED_MSG):
            if code == common_pb2.NO_MATCHED_MSG:
                # Everything up to here was filtered out: nothing left to consume below it
                # but what is in flight.
                pq.max_offset = max(pq.max_offset, response.next_begin_offset - 1)
                if not pq.messages:
                    self.offset_store.update(mq, response.next_begin_offset, True)
            pq.next_offset = response.next_begin_offset
        elif code == common_pb2.OFFSET_ILLEGAL:
            log.warning("offset %d of %s is illegal (queue holds [%d, %d]); moving to %d",
                        pq.next_offset, mq, response.min_offset, response.max_offset,
                        response.next_begin_offset)
            pq.next_offset = response.next_begin_offset
            if not pq.messages:
                pq.max_offset = response.next_begin_offset - 1
                self.offset_store.update(mq, response.next_begin_offset, False)
        else:
            log.warning("pull of %s from %s refused: %s %s", mq, addr, code_name(code),
                        response.status.remark)
