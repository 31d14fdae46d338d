"""Running the user's listener on pulled messages (ConsumeMessageConcurrentlyService and
ConsumeMessageOrderlyService).

A plain function runs on the consumer's thread pool, an `async def` on the client loop.
Listeners return a ConsumeStatus; returning None counts as success, raising as
RECONSUME_LATER / SUSPEND_CURRENT_QUEUE_A_MOMENT.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from mqclient.constants import MAX_RECONSUME_TIMES, RECONSUME_DELAYS_S
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

    def _call_sync(self, chunks: list[list[MessageExt]]) -> list[ConsumeStatus]:
        out = []
        for chunk in chunks:
            try:
                out.append(self._status(self.listener(chunk)))
            except Exception:
                out.append(self._failed(chunk))
        return out

    async def run(self, chunks: list[list[MessageExt]]) -> list[ConsumeStatus]:
        """One status per chunk; a plain listener gets all chunks in one pool job."""
        if not self.is_async:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, self._call_sync, chunks)
        out = []
        for chunk in chunks:
            try:
                out.append(self._status(await self.listener(chunk)))
            except Exception:
                out.append(self._failed(chunk))
        return out


class ConcurrentConsumeService:
    """Messages of a queue may be consumed in parallel and out of order; the committed
    offset only passes messages that were consumed. A failed message is consumed again
    after a growing delay (RocketMQ sends it to %RETRY%; this broker has no retry topics
    yet, so the client keeps it and its queue's offset waits for it)."""

    def __init__(self, listener: Listener, executor: ThreadPoolExecutor, batch_max_size: int,
                 on_consumed: OffsetCallback) -> None:
        self.runner = _ListenerRunner(listener, executor, ConsumeStatus.RECONSUME_LATER)
        self.batch_max_size = batch_max_size
        self.on_consumed = on_consumed
        self.tasks: set[asyncio.Task[None]] = set()

    def submit(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        task = asyncio.get_running_loop().create_task(self._consume(pq, msgs))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _consume(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if pq.dropped:
            return
        chunks = _chunks(msgs, self.batch_max_size)
        statuses = await self.runner.run(chunks)
        if pq.dropped:
            return  # the queue went to another consumer meanwhile: it consumes them again
        done: list[MessageExt] = []
        for chunk, status in zip(chunks, statuses, strict=True):
            if status is ConsumeStatus.CONSUME_SUCCESS:
                done.extend(chunk)
            else:
                self._later(pq, chunk)
        if done:
            self.on_consumed(pq, pq.remove(done))

    def _later(self, pq: ProcessQueue, chunk: list[MessageExt]) -> None:
        for m in chunk:
            m.reconsume_times += 1
        times = chunk[0].reconsume_times
        delay = RECONSUME_DELAYS_S[min(times, len(RECONSUME_DELAYS_S)) - 1]
        if times > MAX_RECONSUME_TIMES:
            log.error("%d messages of %s failed %d times; still kept and retried every %d s "
                      "(no dead-letter queue on this broker yet)", len(chunk), pq.mq,
                      times, delay)
        loop = asyncio.get_running_loop()
        loop.call_later(delay, self.submit, pq, chunk)

    async def wait_idle(self, timeout_s: float) -> None:
        """Shutdown: waits for the calls in progress (retries scheduled later are not)."""
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout_s)


class OrderlyConsumeService:
    """One queue consumed by one task at a time, in queue order; a failure pauses the queue
    and the same messages come again."""

    def __init__(self, listener: Listener, executor: ThreadPoolExecutor, batch_max_size: int,
                 on_consumed: OffsetCallback, suspend_s: float,
                 may_consume: Callable[[ProcessQueue], bool]) -> None:
        self.runner = _ListenerRunner(listener, executor,
                                      ConsumeStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT)
        self.batch_max_size = batch_max_size
        self.on_consumed = on_consumed
        self.suspend_s = suspend_s
        self.may_consume = may_consume  # e.g. the queue's broker lock is held
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
                [status] = await self.runner.run([msgs])
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

    async def wait_idle(self, timeout_s: float) -> None:
        self.stopping = True
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=timeout_s)
