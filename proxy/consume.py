"""Receive, ack, change invisible duration and dead-letter forwarding (RocketMQ 5's pop
consumption) on the broker's consume queues, with the state of pop.py."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from broker.constants import DEADLINE_MARGIN_S, PROPERTY_SHARDING_KEY
from broker.status import RequestError
from common.codec import MessageExt, decode_record
from common.constants import PERM_READ
from filter import EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG
from mqproto import common_pb2, messaging_pb2
from mqproto.v2 import definition_pb2 as D
from proxy.convert import ReceiptHandle, V2Error, message_to_v2
from proxy.peers import PEER_POLL_INTERVAL_S
from proxy.pop import InFlight, PopLogUnwritable, PopStateStore, QueueKey
from store.reading import MessageFilter

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from broker.send import SendProcessor

log = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 32
MAX_BATCH_SIZE = 1024
# A receive without an invisible duration (the PushConsumer's, auto-renew) gets RocketMQ's
# default invisible time; the proxy does not renew it: a listener must finish within it.
DEFAULT_INVISIBLE_MS = 60_000
MIN_INVISIBLE_MS = 1_000  # shorter ones are raised to this
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # RocketMQ's maxInvisibleTime: 12 h
MAX_LONG_POLLING_MS = 30_000
SWEEP_INTERVAL_S = 1.0
MIN_POLL_INTERVAL_S = 0.01  # dead-lettering of messages out of attempts


Elsewhere = Callable[[int], Awaitable[list[D.Message]]]


@dataclasses.dataclass
class Delivery:
    message: D.Message
    key: QueueKey


class PopService:
    def __init__(self, broker: BrokerContext, sender: SendProcessor, state: PopStateStore,
                 max_attempts: int) -> None:
        self.broker = broker
        self.sender = sender  # dead letters go the way of a consumer's send-back
        self.state = state
        self.max_attempts = max_attempts
        self.broker_name = broker.config.broker_name
        self._sweeper: asyncio.Task[None] | None = None
        self.dead_lettered = 0
        self._released = asyncio.Event()  # set (and replaced) when messages leave flight
        self._blocked: set[QueueKey] = set()  # queues waiting for a FIFO group's ack

    def _release(self) -> None:
        self._released.set()
        self._released = asyncio.Event()

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="popDeadLetters")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    # -- receive ---------------------------------------------------------------------------
    def _read_queues(self, topic: str) -> list[int]:
        broker = self.broker
        if not broker.config.broker_permission & PERM_READ:
            raise V2Error(D.FORBIDDEN, f"broker {self.broker_name} refuses reads now")
        config = broker.topics.get(topic)
        if config is None:
            raise V2Error(D.TOPIC_NOT_FOUND, f"topic {topic} does not exist on broker "
                                             f"{self.broker_name}")
        if not config.readable:
            raise V2Error(D.FORBIDDEN, f"topic {topic} is not readable")
        return list(range(config.read_queue_nums))

    def _start_offset(self, group: str, topic: str, queue_id: int) -> int:
        """Where a group first consuming a queue starts: its committed offset, else the
        queue's first message (RocketMQ's consume-from-first for a queue never trimmed)."""
        committed = self.broker.offsets.query_offset(group, topic, queue_id)
        if committed >= 0:
            return committed
        return self.broker.store.get_min_offset_in_queue(topic, queue_id)

    def _queue_state(self, group: str, topic: str, queue_id: int) -> QueueKey:
        key = (group, topic, queue_id)
        state = self.state.state(group, topic, queue_id,
                                 lambda: self._start_offset(group, topic, queue_id))
        # An admin reset of the group's offset (mqadmin resetOffsetByTime) moves it.
        committed = self.broker.offsets.query_offset(group, topic, queue_id)
        if committed >= 0 and committed != state.commit:
            log.info("group %s offset of %s-%d moved by an admin to %d (pop state was at %d)",
                     group, topic, queue_id, committed, state.commit)
            self.state.reset(key, committed)
        return key

    async def receive(self, group: str, topic: str, first_queue: int, expression: str,
                      batch: int, invisible_ms: int, wait_s: float, *, sql: bool = False,
                      elsewhere: Elsewhere | None = None) -> list[D.Message]:
        """Up to `batch` messages: expired in-flight ones again, then new ones; waits up to
        `wait_s` for one (long polling). While there is none here, `elsewhere(batch)`
        (the topic's other brokers) is asked at once and then every
        PEER_POLL_INTERVAL_S."""
        if not group:
            raise V2Error(D.ILLEGAL_CONSUMER_GROUP, "the consumer group is empty")
        batch = min(batch if batch > 0 else DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE)
        invisible_ms = max(MIN_INVISIBLE_MS, invisible_ms or DEFAULT_INVISIBLE_MS)
        if invisible_ms > MAX_INVISIBLE_MS:
            raise V2Error(D.ILLEGAL_INVISIBLE_TIME,
                          f"invisible duration {invisible_ms} ms is over 12 h")
        # Tags, or SQL92 on properties (enablePropertyFilter): the broker's pull filters.
        try:
            tag_filter = self.broker.filters.message_filter(
                EXPRESSION_TYPE_SQL92 if sql else EXPRESSION_TYPE_TAG, expression)
        except RequestError as e:
            code = (D.ILLEGAL_FILTER_EXPRESSION if e.code == common_pb2.SUBSCRIPTION_PARSE_FAILED
                    else D.NOT_IMPLEMENTED)
            raise V2Error(code, e.remark) from None
        queues = self._read_queues(topic)
        if not queues:
            return []
        # Queue -1 (an assignment: every queue of this broker) starts at a random one.
        start = first_queue if first_queue >= 0 else random.randrange(len(queues))
        start %= len(queues)
        queues = queues[start:] + queues[:start]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait_s)
        ask_elsewhere = loop.time()
        while True:
            with self.state.batch():  # one log write per receive, not one per message
                found = self._collect(group, topic, queues, tag_filter, batch, invisible_ms)
            if found:
                return found
            if elsewhere is not None and loop.time() >= ask_elsewhere:
                found = await elsewhere(batch)
                if found:
                    return found
                ask_elsewhere = loop.time() + PEER_POLL_INTERVAL_S
            remaining = deadline - loop.time()
            if remaining <= 0 or self.broker.pull_hold.closed:
                return []
            started = loop.time()
            await self._wait_any(group, topic, queues, min(remaining, PEER_POLL_INTERVAL_S))
            if loop.time() - started < MIN_POLL_INTERVAL_S:  # woken for nothing it can take
                await asyncio.sleep(MIN_POLL_INTERVAL_S)

    async def _wait_any(self, group: str, topic: str, queues: list[int],
                        timeout_s: float) -> None:
        """Until a message arrives on one of `queues` (or an in-flight one is due)."""
        hold = self.broker.pull_hold
        now = self.broker.clock_ms()
        for queue_id in queues:
            state = self.state.existing(group, topic, queue_id)
            if state is None:
                continue
            # Out of attempts: the sweeper moves them (and wakes this wait).
            due = min((f.deadline_ms for f in state.inflight.values()
                       if f.attempt < self.max_attempts), default=None)
            if due is not None:
                timeout_s = min(timeout_s, max(0.01, (due - now) / 1000))
        # Nothing could be taken: wait for a message past each queue's end, or for an ack
        # (it may free a FIFO message group).
        store = self.broker.store
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._released.wait())]
        for queue_id in queues:
            key = (group, topic, queue_id)
            state = self.state.existing(*key)
            if key in self._blocked or state is None:
                offset = store.get_max_offset_in_queue(topic, queue_id)
            else:
                offset = state.next
            waits.append(asyncio.ensure_future(hold.wait(topic, queue_id, offset, timeout_s)))
        try:
            await asyncio.wait(waits, timeout=timeout_s + 0.1,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    def _collect(self, group: str, topic: str, queues: list[int], tag_filter: MessageFilter,
                 batch: int, invisible_ms: int) -> list[D.Message]:
        out: list[D.Message] = []
        now = self.broker.clock_ms()
        for queue_id in queues:
            self._blocked.discard((group, topic, queue_id))
        store = self.broker.store
        for queue_id in queues:
            if len(out) >= batch:
                break
            key = self._queue_state(group, topic, queue_id)
            state = self.state.queues[key]
            # Due again: in flight past their deadline, attempts left (a receive looks at
            # every message in flight, sorts only those).
            max_attempts = self.max_attempts
            due = sorted(o for o, f in state.inflight.items()
                         if f.deadline_ms <= now and f.attempt < max_attempts)
            for offset in due:
                if len(out) >= batch:
                    break
                flight = state.inflight[offset]
                ext = store.look_message_by_offset(flight.commit_log_offset)
                if ext is None or ext.topic != topic or ext.queue_offset != offset:
                    log.warning("message %s-%d@%d of group %s is gone from the store; "
                                "dropped", topic, queue_id, offset, group)
                    self.state.acked(key, offset, offset + 1)
                    continue
                out.append(self._deliver(key, ext, flight.attempt + 1, now, invisible_ms))
            if len(out) >= batch:
                break
            # New messages.
            min_offset = store.get_min_offset_in_queue(topic, queue_id)
            if state.commit < min_offset:  # expired from the store: gone, delivered or not
                self.state.skipped(key, min_offset)
            start = state.next
            result = store.get_message(group, topic, queue_id, start, batch - len(out),
                                       tag_filter)
            # FIFO: one message of a message group in flight at a time.
            busy = {f.message_group for f in state.inflight.values() if f.message_group}
            delivered_offsets: list[int] = []
            end = max(result.next_begin_offset, start)
            for record, offset in zip(result.messages, result.queue_offsets, strict=False):
                ext = decode_record(record, 0, check_crc=False)
                message_group = ext.properties.get(PROPERTY_SHARDING_KEY, "")
                if message_group and message_group in busy:
                    end = offset  # the queue waits here for the group's ack
                    self._blocked.add(key)
                    break
                out.append(self._deliver(key, ext, 1, now, invisible_ms))
                delivered_offsets.append(offset)
                if message_group:
                    busy.add(message_group)
            # Offsets read past and not delivered (filtered out) count as consumed.
            skip_from = start
            for offset in delivered_offsets:
                self.state.acked(key, skip_from, offset)
                skip_from = offset + 1
            self.state.acked(key, skip_from, end)
            if result.messages:
                self.broker.stats.record_get(group, topic, len(result.messages))
        return out

    def _deliver(self, key: QueueKey, ext: MessageExt, attempt: int, now: int,
                 invisible_ms: int) -> D.Message:
        deadline = now + invisible_ms
        self.state.delivered(key, ext.queue_offset, InFlight(
            attempt, deadline, ext.commit_log_offset,
            ext.properties.get(PROPERTY_SHARDING_KEY, "")))
        handle = ReceiptHandle(self.broker_name, key[2], ext.queue_offset, attempt, deadline)
        return message_to_v2(ext, receipt_handle=handle.encode(), attempt=attempt,
                             invisible_ms=invisible_ms)

    # -- ack / change ----------------------------------------------------------------------
    def _in_flight(self, group: str, topic: str, text: str
                   ) -> tuple[QueueKey, ReceiptHandle, InFlight | None]:
        """The delivery a receipt handle names; its InFlight None when it is acked already."""
        handle = ReceiptHandle.decode(text)
        if handle.broker_name != self.broker_name:
            raise V2Error(D.INVALID_RECEIPT_HANDLE,
                          f"the receipt handle is from broker {handle.broker_name}, this is "
                          f"{self.broker_name}")
        key = (group, topic, handle.queue_id)
        state = self.state.existing(group, topic, handle.queue_id)
        if state is None:
            raise V2Error(D.INVALID_RECEIPT_HANDLE,
                          f"group {group} never received from {topic}-{handle.queue_id} here")
        if handle.offset < state.commit or handle.offset in state.acked:
            return key, handle, None
        flight = state.inflight.get(handle.offset)
        if flight is None:
            raise V2Error(D.INVALID_RECEIPT_HANDLE,
                          f"message {topic}-{handle.queue_id}@{handle.offset} was never "
                          f"received by group {group}")
        if flight.attempt != handle.attempt:
            raise V2Error(D.INVALID_RECEIPT_HANDLE,
                          f"the receipt handle is of delivery {handle.attempt}; the message "
                          f"was delivered again since (delivery {flight.attempt}): use that "
                          "handle")
        return key, handle, flight

    def ack(self, group: str, topic: str, text: str) -> None:
        key, handle, flight = self._in_flight(group, topic, text)
        if flight is not None:
            self.state.acked(key, handle.offset, handle.offset + 1)
            if flight.message_group:
                self._release()

    def change_invisible(self, group: str, topic: str, text: str, invisible_ms: int) -> str:
        if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
            raise V2Error(D.ILLEGAL_INVISIBLE_TIME,
                          f"invisible duration {invisible_ms} ms is not within 0 .. 12 h")
        key, handle, flight = self._in_flight(group, topic, text)
        if flight is None:
            raise V2Error(D.INVALID_RECEIPT_HANDLE, "the message was acked already")
        deadline = self.broker.clock_ms() + invisible_ms
        self.state.changed(key, handle.offset, deadline)
        return dataclasses.replace(handle, deadline_ms=deadline).encode()

    async def forward_to_dlq(self, group: str, topic: str, text: str) -> None:
        key, handle, flight = self._in_flight(group, topic, text)
        if flight is None:
            return
        await self._dead_letter(key, handle.offset, flight)

    # -- dead letters ----------------------------------------------------------------------
    async def _dead_letter(self, key: QueueKey, offset: int, flight: InFlight) -> None:
        group, topic, queue_id = key
        request = messaging_pb2.ConsumerSendMsgBackRequest(
            consumer_group=group, commit_log_offset=flight.commit_log_offset,
            origin_topic=topic, delay_level=-1, max_reconsume_times=0)
        try:
            # The message is one the proxy delivered to (group, topic) itself: no look at
            # the group's subscriptions (they may have changed since).
            status = await self.sender.send_back(request, subscribed_only=False)
        except RequestError as e:
            status = e.status()
        if status.code != common_pb2.SUCCESS:
            raise V2Error(D.INTERNAL_SERVER_ERROR,
                          f"moving {topic}-{queue_id}@{offset} to %DLQ%{group} failed: "
                          f"{status.remark}")
        state = self.state.existing(group, topic, queue_id)
        current = state.inflight.get(offset) if state is not None else None
        if current is not None and current.attempt == flight.attempt:
            self.state.acked(key, offset, offset + 1)
            self._release()
        self.dead_lettered += 1
        log.info("message %s-%d@%d delivered %d times to group %s: moved to %%DLQ%%%s",
                 topic, queue_id, offset, flight.attempt, group, group)

    async def sweep(self) -> int:
        """Moves the messages past their deadline after their last attempt to the DLQ."""
        now = self.broker.clock_ms()
        moved = 0
        max_attempts = self.max_attempts
        for key, state in self.state.items():
            out_of_attempts = sorted(
                (o, f) for o, f in state.inflight.items()
                if f.deadline_ms <= now and f.attempt >= max_attempts)
            for offset, flight in out_of_attempts:
                try:
                    await self._dead_letter(key, offset, flight)
                    moved += 1
                except V2Error as e:
                    log.warning("%s", e.message)
        return moved

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            if self.broker.config.is_slave:
                continue
            try:
                await self.sweep()
            except PopLogUnwritable:  # logged where it failed, once while the disk is full
                pass
            except Exception:
                log.exception("dead-letter sweep failed")


def polling_wait_s(requested_ms: int, time_remaining: float | None) -> float:
    """How long a receive may wait: what it asked (at most 30 s), answering before the
    caller's deadline."""
    wait = min(requested_ms, MAX_LONG_POLLING_MS) / 1000
    if time_remaining is not None:
        wait = min(wait, time_remaining - 2 * DEADLINE_MARGIN_S)
    return max(0.0, wait)


__all__ = ["PopService", "polling_wait_s"]
