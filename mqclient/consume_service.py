"""Running the user's listener on pulled messages (ConsumeMessageConcurrentlyService and
ConsumeMessageOrderlyService).

A plain function runs on the consumer's thread pool, an `async def` on the client loop.
Listeners return a ConsumeStatus; returning None counts as success, raising as
RECONSUME_LATER / SUSPEND_CURRENT_QUEUE_A_MOMENT. Messages from the group's retry topic
reach the listener under their original topic (the RETRY_TOPIC property). A message whose
compressed body cannot be decompressed (`body_error`) never reaches the listener: it is
logged and goes to the group's dead-letter queue (broadcasting: dropped).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mqclient.constants import (
    PROPERTY_RETRY_TOPIC,
    RECONSUME_DELAYS_S,
    RETRY_GROUP_TOPIC_PREFIX,
    SEND_BACK_FAILED_RETRY_S,
)
from mqclient.message import MessageExt
from mqclient.process_queue import ProcessQueue

log = logging.getLogger(__name__)


class ConsumeStatus(enum.Enum):
    """ConsumeConcurrentlyStatus and ConsumeOrderlyStatus in one."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"  # concurrently: try these messages again later
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"  # orderly: pause


Listener = Callable[[list[MessageExt]], Any]
# Called with the queue's new committable offset after messages were consumed.
OffsetCallback = Callable[[ProcessQueue, int], None]
# Sends a failed message back to its broker (`delay_level`: 0 = the broker's next retry
# level, -1 = the dead-letter queue); True when the broker stored it.
SendBack = Callable[[MessageExt, int], Awaitable[bool]]


def _restore_retry_topics(msgs: list[MessageExt]) -> None:
    """RocketMQ's resetRetryAndNamespace: a retried message keeps its original topic."""
    for m in msgs:
        if m.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            original = m.properties.get(PROPERTY_RETRY_TOPIC)
            if original:
                m.topic = original


async def _dead_letter_undecodable(send_back: SendBack | None, msgs: list[MessageExt]
                                   ) -> list[bool]:
    """Messages whose body could not be decompressed: each logged, then sent to the
    dead-letter queue (no retry would read it); per message True when it is there (or,
    without `send_back`, dropped)."""
    for m in msgs:
        log.error("message %s (offsetMsgId %s, %s offset %d) not consumed: %s; %s", m.msg_id,
                  m.offset_msg_id, m.message_queue, m.queue_offset, m.body_error,
                  "dropped" if send_back is None else "sent to the dead-letter queue")
    if send_back is None:
        return [True] * len(msgs)
    return list(await asyncio.gather(*(send_back(m, -1) for m in msgs)))


def _chunks(msgs: list[MessageExt], size: int) -> list[list[MessageExt]]:
    return [msgs[i:i + size] for i in range(0, len(msgs), size)]


class _ListenerRunner:
    def __init__(self, listener: Listener, executor: ThreadPoolExecutor, failure: ConsumeStatus
                 ) -> None:
        self.listener = listener
        self.executor = executor
        self.failure = failure
        self.is_async = inspect.iscoroutinefunction(listener)

    def _status(self, value: Any) -> ConsumeStatus:
        if value is None:
            return ConsumeStatus.CONSUME_SUCCESS
        if isinstance(value, ConsumeStatus):
            return value
        log.error("listener returned %r, not a ConsumeStatus: taken as %s", value,
                  self.failure.value)
        return self.failure

    def _failed(self, chunk: list[MessageExt]) -> ConsumeStatus:
        """In an `except` block: logs the listener's exception."""
        log.exception("listener failed on %d messages of %s", len(chunk),
                      chunk[0].message_queue)
        return self.failure

    def _call_sync(self, chunks: list[list[MessageExt]],
                   may_run: Callable[[list[MessageExt]], bool]) -> list[ConsumeStatus | None]:
        out: list[ConsumeStatus | None] = []
        for chunk in chunks:
            if not may_run(chunk):
                out.append(None)
                continue
            try:
                out.append(self._status(self.listener(chunk)))
            except Exception:
                out.append(self._failed(chunk))
        return out

    async def run(self, chunks: list[list[MessageExt]],
                  may_run: Callable[[list[MessageExt]], bool]) -> list[ConsumeStatus | None]:
        """One status per chunk; a plain listener gets all chunks in one pool job.
        `may_run` is asked right before each call (on the pool thread: it only reads
        flags): a chunk it refuses is not given to the listener and gets None (RocketMQ's
        ConsumeRequest checks its queue's dropped flag as it starts to run)."""
        if not self.is_async:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, self._call_sync, chunks, may_run)
        out: list[ConsumeStatus | None] = []
        for chunk in chunks:
            if not may_run(chunk):
                out.append(None)
                continue
            try:
                out.append(self._status(await self.listener(chunk)))
            except Exception:
                out.append(self._failed(chunk))
        return out


class ConcurrentConsumeService:
    """Messages of a queue may be consumed in parallel and out of order; the committed
    offset only passes messages that were consumed.

    A failed message (clustering, `send_back` given) goes back to its broker, which stores
    it in the group's %RETRY% topic to come again after a growing delay, and past
    `max_reconsume_times` in the group's %DLQ% topic; it counts as consumed once the broker
    has it (kept here and sent back again while the broker cannot take it). Without
    `send_back` (broadcasting) the client itself retries it after a growing delay, and drops
    it with an error past `max_reconsume_times`."""

    def __init__(self, listener: Listener, executor: ThreadPoolExecutor, batch_max_size: int,
                 on_consumed: OffsetCallback, *, send_back: SendBack | None,
                 max_reconsume_times: int) -> None:
        self.runner = _ListenerRunner(listener, executor, ConsumeStatus.RECONSUME_LATER)
        self.batch_max_size = batch_max_size
        self.on_consumed = on_consumed
        self.send_back = send_back
        self.max_reconsume_times = max_reconsume_times
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False  # shutdown: finish the calls in progress, start no other
        self._started_lock = threading.Lock()

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if self.stopping:
            return
        task = asyncio.get_running_loop().create_task(self._consume(pq, msgs))
        self.tasks.add(task)
        pq.inflight += 1

        def done(task: asyncio.Task[None]) -> None:
            self.tasks.discard(task)
            pq.inflight -= 1

        task.add_done_callback(done)

    async def _consume(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if pq.dropped and not pq.draining:
            return
        if any(m.body_error for m in msgs):
            msgs = await self._undecodable(pq, msgs)
            if not msgs:
                return
        _restore_retry_topics(msgs)
        chunks = _chunks(msgs, self.batch_max_size)
        statuses = await self.runner.run(chunks, lambda chunk: self._may_run(pq, chunk))
        if pq.dropped and not pq.draining:
            # The queue went to another consumer meanwhile (without the handover of
            # Rebalancer.remove_queue, or after it): it consumes them again.
            return
        done: list[MessageExt] = []
        failed: list[MessageExt] = []
        for chunk, status in zip(chunks, statuses, strict=True):
            if status is not None:  # None: not started (shutdown): stays uncommitted
                (done if status is ConsumeStatus.CONSUME_SUCCESS else failed).extend(chunk)
        if failed:
            done.extend(await self._failed(pq, failed))
        if done:
            self.on_consumed(pq, pq.remove(done))

    async def _undecodable(self, pq: ProcessQueue, msgs: list[MessageExt]
                           ) -> list[MessageExt]:
        """The messages of `msgs` with a readable body; the others go to the dead-letter
        queue (consumed once there; tried again later when the broker could not take
        them)."""
        bad = [m for m in msgs if m.body_error]
        sent = await _dead_letter_undecodable(self.send_back, bad)
        done = [m for m, ok in zip(bad, sent, strict=True) if ok]
        kept = [m for m, ok in zip(bad, sent, strict=True) if not ok]
        if done:
            self.on_consumed(pq, pq.remove(done))
        if kept:
            asyncio.get_running_loop().call_later(SEND_BACK_FAILED_RETRY_S, self.submit, pq,
                                                  kept)
        return [m for m in msgs if not m.body_error]

    def _may_run(self, pq: ProcessQueue, chunk: list[MessageExt]) -> bool:
        """Right before a listener call (pool thread). Never on a dropped queue, except
        while it drains for its handover. While stopping or draining, only calls that fill
        the gaps below a message already started: calls run in parallel, and the commit
        stops at the first message not consumed, so whatever was consumed past a gap would
        be delivered again by the next owner."""
        if pq.dropped and not pq.draining:
            return False
        with self._started_lock:
            first, last = chunk[0].queue_offset, chunk[-1].queue_offset
            if (self.stopping or pq.dropped) and first > pq.started_max_offset:
                return False
            pq.started_max_offset = max(pq.started_max_offset, last)
            return True

    async def _failed(self, pq: ProcessQueue, msgs: list[MessageExt]) -> list[MessageExt]:
        """Handles failed messages; returns those that now count as consumed."""
        if self.send_back is None:
            return self._retry_locally(pq, msgs)
        sent = await asyncio.gather(*(self.send_back(m, 0) for m in msgs))
        kept = [m for m, ok in zip(msgs, sent, strict=True) if not ok]
        if kept:
            log.warning("%d failed messages of %s could not be sent back; consumed again "
                        "in %s s", len(kept), pq.mq, SEND_BACK_FAILED_RETRY_S)
            for m in kept:
                m.reconsume_times += 1
            asyncio.get_running_loop().call_later(SEND_BACK_FAILED_RETRY_S, self.submit, pq,
                                                  kept)
        return [m for m, ok in zip(msgs, sent, strict=True) if ok]

    def _retry_locally(self, pq: ProcessQueue, msgs: list[MessageExt]) -> list[MessageExt]:
        dropped = [m for m in msgs if m.reconsume_times >= self.max_reconsume_times]
        if dropped:
            log.error("dropping %d messages of %s that failed %d times: %s", len(dropped),
                      pq.mq, self.max_reconsume_times + 1, [m.msg_id for m in dropped])
        again = [m for m in msgs if m.reconsume_times < self.max_reconsume_times]
        for m in again:
            m.reconsume_times += 1
        if again:
            times = again[0].reconsume_times
            delay = RECONSUME_DELAYS_S[min(times, len(RECONSUME_DELAYS_S)) - 1]
            asyncio.get_running_loop().call_later(delay, self.submit, pq, again)
        return dropped

    async def wait_idle(self, timeout_s: float) -> None:
        """Shutdown: starts no other listener call except those filling gaps below one
        already started (what was queued stays uncommitted, for the next owner) and waits
        for the calls in progress; retries scheduled later are not made."""
        self.stopping = True
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout_s)


class OrderlyConsumeService:
    """One queue consumed by one task at a time, in queue order; a failure pauses the queue
    and the same messages come again. With `max_reconsume_times` >= 0 (RocketMQ's default
    for orderly consumers is no limit), messages that failed that many times go to the
    group's dead-letter queue, and the queue moves on."""

    def __init__(self, listener: Listener, executor: ThreadPoolExecutor, batch_max_size: int,
                 on_consumed: OffsetCallback, suspend_s: float,
                 may_consume: Callable[[ProcessQueue], bool], *,
                 send_back: SendBack | None, max_reconsume_times: int) -> None:
        self.runner = _ListenerRunner(listener, executor,
                                      ConsumeStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT)
        self.batch_max_size = batch_max_size
        self.on_consumed = on_consumed
        self.suspend_s = suspend_s
        self.may_consume = may_consume  # e.g. the queue's broker lock is held
        self.send_back = send_back
        self.max_reconsume_times = max_reconsume_times
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False  # shutdown: finish the current call, start no other

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt] | None = None) -> None:
        if pq.consuming or pq.dropped:
            return
        pq.consuming = True
        task = asyncio.get_running_loop().create_task(self._consume_queue(pq))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _consume_queue(self, pq: ProcessQueue) -> None:
        try:
            while not pq.dropped and not self.stopping and self.may_consume(pq):
                msgs = pq.first(self.batch_max_size)
                if not msgs:
                    return
                bad = [m for m in msgs if m.body_error]
                if bad:  # out of order: no retry reads them, the queue goes on
                    sent = await _dead_letter_undecodable(self.send_back, bad)
                    if all(sent):
                        self.on_consumed(pq, pq.remove(bad))
                    elif not self.stopping:
                        await asyncio.sleep(self.suspend_s)
                    continue
                _restore_retry_topics(msgs)
                [status] = await self.runner.run(
                    [msgs], lambda _: not pq.dropped and not self.stopping)
                if status is None:
                    return  # dropped or stopping before the call started
                if status is not ConsumeStatus.CONSUME_SUCCESS and not pq.dropped and (
                        await self._to_dead_letters(msgs)):
                    status = ConsumeStatus.CONSUME_SUCCESS
                if status is ConsumeStatus.CONSUME_SUCCESS:
                    # Even when the queue was just dropped: its offset is committed only
                    # after this call (Rebalancer.remove_queue waits), so the next owner
                    # starts after these messages.
                    self.on_consumed(pq, pq.remove(msgs))
                    if pq.dropped:
                        return
                else:
                    if pq.dropped:
                        return
                    for m in msgs:
                        m.reconsume_times += 1
                    if not self.stopping:
                        await asyncio.sleep(self.suspend_s)
        finally:
            pq.consuming = False

    async def _to_dead_letters(self, msgs: list[MessageExt]) -> bool:
        """True when every message failed max reconsume times and is now in the %DLQ%."""
        limit = self.max_reconsume_times
        if self.send_back is None or limit < 0 or any(m.reconsume_times < limit for m in msgs):
            return False
        sent = await asyncio.gather(*(self.send_back(m, -1) for m in msgs))
        if all(sent):
            log.error("%d messages of %s failed %d times: sent to the dead-letter queue",
                      len(msgs), msgs[0].message_queue, limit + 1)
        return all(sent)

    async def wait_idle(self, timeout_s: float) -> None:
        self.stopping = True
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout_s)
