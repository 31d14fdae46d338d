"""Gathers individual async sends into batches (Kafka's RecordAccumulator, RocketMQ 5's
auto-batching): a request costs the broker far more than the messages in it, so messages
of a topic wait up to a short linger, or until a batch is full, and go out in one request.

Messages batch with messages of their topic and delay level (a batch is stored in one
queue). `append` is called from any thread; batches are sent on the client loop, at most
`max_inflight` per topic and level at a time. At most `max_pending` messages wait in all; past that,
`append` blocks its (non-loop) caller until batches complete.

With a `multi_sender`, one linger timer serves all open batches, and the batches ready
when it fires (or that filled up in the same loop turn) leave together: the producer sends
those of one broker in one request whatever their topics (a SEND_BATCHES frame), so sends
spread over many topics, each batch small, do not cost a request each. At most
`max_inflight_rounds` such sends are in flight (Kafka's max.in.flight.requests): while they
are, open batches go on filling past their linger, so under load a batch of a topic holds
what came for it meanwhile, not the few messages of one linger (the broker's and the
client's work is mostly per batch: spread over 1,000 topics, one-message batches cost ~3x).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mqclient.loop import ClientLoop
from mqclient.message import MQClientError, SendFuture, SendResult

log = logging.getLogger(__name__)
MAX_PENDING_MESSAGES = 10_000  # DefaultMQProducer's backPressureForAsyncSendNum
MAX_INFLIGHT_ROUNDS = 2  # with a multi-sender: sends of ready batches in flight at once
_DOUBLE = struct.Struct("d")


# (topic, delay level): what messages must share to go in one batch.
BatchKey = tuple[str, int]


class Batch:
    """Messages of one topic and delay level. Each message's deadline counts from its own
    append (a batch stays open longer while sends are in flight, so counting from the
    batch's opening failed late-comers early); the batch is sent until the latest of them,
    and a message whose deadline passed before its batch left fails without being sent."""

    __slots__ = ("key", "topic", "ids", "elements", "futures", "deadlines", "size",
                 "deadline", "earliest", "timeout_s", "flags")

    def __init__(self, key: BatchKey) -> None:
        self.key = key
        self.topic = key[0]
        self.ids: list[str] = []  # UNIQ_KEYs
        self.elements: list[bytes] = []  # MessageBatch elements (remoting/framing.py)
        self.futures: list[SendFuture | None] = []  # None: one-way
        # Each message's deadline (the accumulator's clock), packed doubles: a bytearray is
        # no object the garbage collector walks (see SendFuture)
        self.deadlines = bytearray()
        self.size = 0
        self.deadline = 0.0  # the latest message deadline: the batch's sends end by then
        self.earliest = float("inf")
        self.timeout_s = 0.0  # the longest timeout of its messages (said in errors)
        # Each message's sysflag bits (compressed bodies), made when the first is not 0.
        self.flags: list[int] | None = None

    def add(self, message_id: str, element: bytes, future: SendFuture | None,
            timeout_s: float, deadline: float, sys_flag: int = 0) -> None:
        if sys_flag or self.flags is not None:
            if self.flags is None:
                self.flags = [0] * len(self.ids)
            self.flags.append(sys_flag)
        self.ids.append(message_id)
        self.elements.append(element)
        self.futures.append(future)
        self.deadlines += _DOUBLE.pack(deadline)
        self.size += len(element)
        self.deadline = max(self.deadline, deadline)
        self.earliest = min(self.earliest, deadline)
        self.timeout_s = max(self.timeout_s, timeout_s)

    def expire(self, now: float) -> int:
        """Fails (TIMEOUT, not sent) the messages whose deadline passed; how many."""
        deadlines = memoryview(self.deadlines).cast("d")
        keep = [i for i, d in enumerate(deadlines) if d > now]
        expired = len(self.ids) - len(keep)
        error = MQClientError("TIMEOUT", "async send not sent within its timeout: the sends "
                              "in flight before it did not end in time")
        for i, future in enumerate(self.futures):
            if future is not None and deadlines[i] <= now:
                _complete(future.set_exception, error)
        self.ids = [self.ids[i] for i in keep]
        self.elements = [self.elements[i] for i in keep]
        if self.flags is not None:
            self.flags = [self.flags[i] for i in keep]
        self.futures = [self.futures[i] for i in keep]
        self.earliest = min((deadlines[i] for i in keep), default=float("inf"))
        self.deadlines = bytearray(b"".join(_DOUBLE.pack(deadlines[i]) for i in keep))
        deadlines.release()
        self.size = sum(map(len, self.elements))
        return expired


# (topic, UNIQ_KEYs, encoded messages, deadline, timeout, sysflag bits per message or
# empty) -> one result per message; raises MQClientError when the batch could not be
# stored after its retries.
BatchSender = Callable[[str, list[str], bytes, float, float, list[int]],
                       Awaitable[list[SendResult]]]
# Several batches -> per batch its results, or the exception that failed it.
MultiSender = Callable[[list[Batch]], Awaitable[list[list[SendResult] | BaseException]]]


class BatchAccumulator:
    def __init__(self, loop: ClientLoop, sender: BatchSender, *, linger_s: float,
                 max_count: int, max_bytes: int, max_inflight: int,
                 max_pending: int = MAX_PENDING_MESSAGES,
                 multi_sender: MultiSender | None = None,
                 max_inflight_rounds: int = MAX_INFLIGHT_ROUNDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.loop = loop
        self.clock = clock  # monotonic seconds of the messages' deadlines
        self.sender = sender
        self.multi_sender = multi_sender
        self._drain_scheduled = False
        self._linger_armed = False  # with a multi-sender: the one linger timer is set
        # With a multi-sender: sends in flight, and whether the linger expired while
        # max_inflight_rounds of them were (the open batches leave when one ends).
        self.max_inflight_rounds = max(1, max_inflight_rounds)
        self._rounds = 0
        self._linger_due = False
        self.linger_s = linger_s
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.max_inflight = max_inflight
        self.max_pending = max_pending
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._open: dict[BatchKey, Batch] = {}  # filling
        self._ready: dict[BatchKey, collections.deque[Batch]] = {}  # full or lingered, unsent
        self._inflight: dict[BatchKey, int] = {}
        self._pending = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    # -- any thread ----------------------------------------------------------------------------
    def append(self, topic: str, message_id: str, element: bytes,
               future: SendFuture | None, timeout_s: float, delay_level: int = 0,
               sys_flag: int = 0) -> None:
        """`sys_flag`: the message's sysflag bits (a compressed body's)."""
        key = (topic, delay_level)
        deadline = self.clock() + timeout_s  # before any state changes (bad input)
        on_loop = self.loop.in_loop_thread()
        with self._lock:
            if self.closed:
                raise MQClientError("SHUTDOWN", "the producer is shut down")
            if (self._pending >= self.max_pending and not on_loop
                    and not self._room.wait_for(lambda: self._pending < self.max_pending
                                                or self.closed, timeout_s)):
                raise MQClientError("TIMEOUT", f"{self._pending} async sends waiting: "
                                        f"no room within {timeout_s} s")
            self._pending += 1
            batch = self._open.get(key)
            first = batch is None
            if batch is None:
                batch = self._open[key] = Batch(key)
                if self.multi_sender is not None:  # one linger timer for all open batches
                    first = not self._linger_armed
                    self._linger_armed = True
            batch.add(message_id, element, future, timeout_s, deadline, sys_flag)
            full = len(batch.ids) >= self.max_count or batch.size >= self.max_bytes
            if full:
                del self._open[key]
                self._ready.setdefault(key, collections.deque()).append(batch)
        if full:
            self._call_on_loop(self._pump, key)
        if first and (not full or self.multi_sender is not None):
            # With a multi-sender `first` took the one linger timer: armed even when this
            # message filled its batch at once, else later batches waited for no timer.
            self._call_on_loop(self._arm_linger, batch)

    def _call_on_loop(self, fn: Callable[..., None], arg: object) -> None:
        if self.loop.in_loop_thread():
            fn(arg)
        else:
            self.loop.loop.call_soon_threadsafe(fn, arg)

    # -- loop ----------------------------------------------------------------------------------
    def _arm_linger(self, batch: Batch) -> None:
        if self.multi_sender is not None:
            self.loop.loop.call_later(self.linger_s, self._linger_all_expired)
        else:
            self.loop.loop.call_later(self.linger_s, self._linger_expired, batch)

    def _linger_all_expired(self) -> None:
        """Every batch open now leaves (with a multi-sender: the ones of many topics go
        together, whenever within the linger each was opened), or, while the most sends
        allowed are in flight, when the first of them ends."""
        if self._rounds >= self.max_inflight_rounds:
            self._linger_due = True
            return
        self._linger_due = False
        with self._lock:
            self._linger_armed = False
            opened, self._open = self._open, {}
            for key, batch in opened.items():
                self._ready.setdefault(key, collections.deque()).append(batch)
        self._drain()

    def _linger_expired(self, batch: Batch) -> None:
        with self._lock:
            if self._open.get(batch.key) is not batch:
                return  # already full and queued
            del self._open[batch.key]
            self._ready.setdefault(batch.key, collections.deque()).append(batch)
        self._pump(batch.key)

    def _pump(self, key: BatchKey) -> None:
        if self.multi_sender is None:
            self._start(self._take_ready([key]))
        elif not self._drain_scheduled:  # the batches ready in this loop turn leave together
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        if self._rounds >= self.max_inflight_rounds:
            return  # the ready batches leave when a send in flight ends (_round_ended)
        with self._lock:
            keys = list(self._ready)
        self._start(self._take_ready(keys))

    def _take_ready(self, keys: list[BatchKey]) -> list[Batch]:
        batches: list[Batch] = []
        with self._lock:
            for key in keys:
                ready = self._ready.get(key)
                while ready and self._inflight.get(key, 0) < self.max_inflight:
                    batches.append(ready.popleft())
                    self._inflight[key] = self._inflight.get(key, 0) + 1
                if not ready:
                    self._ready.pop(key, None)
        return batches

    def _start(self, batches: list[Batch]) -> None:
        now = self.clock()
        loop = asyncio.get_running_loop()
        if any(batch.earliest <= now for batch in batches):
            kept = []
            for batch in batches:
                if batch.earliest > now or self._expire(batch, now):
                    kept.append(batch)
                else:  # its place in flight is free: what waited for it
                    loop.call_soon(self._pump, batch.key)
            batches = kept
        if not batches:
            return
        if len(batches) == 1 or self.multi_sender is None:
            tasks = [loop.create_task(self._send(batch)) for batch in batches]
        else:
            tasks = [loop.create_task(self._send_many(batches))]
        if self.multi_sender is not None:
            self._rounds += len(tasks)
        for task in tasks:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _expire(self, batch: Batch, now: float) -> bool:
        """Fails the messages of `batch` whose deadline passed while it waited to leave;
        False when none is left (then it is no longer in flight)."""
        expired = batch.expire(now)
        with self._lock:
            self._pending -= expired
            if not batch.ids:
                self._inflight[batch.key] -= 1
            self._room.notify_all()
        return bool(batch.ids)

    async def _send_many(self, batches: list[Batch]) -> None:
        assert self.multi_sender is not None
        try:
            outcomes = await self.multi_sender(batches)
        except Exception as e:  # a bug: fail them all rather than leave them waiting
            log.exception("async batch send of %d batches failed", len(batches))
            outcomes = [e] * len(batches)
        try:
            for batch, outcome in zip(batches, outcomes, strict=True):
                _settle(batch, outcome)
        finally:
            with self._lock:
                for batch in batches:
                    self._inflight[batch.key] -= 1
                    self._pending -= len(batch.ids)
                self._room.notify_all()
            self._round_ended()

    async def _send(self, batch: Batch) -> None:
        try:
            results = await self.sender(batch.topic, batch.ids, b"".join(batch.elements),
                                        batch.deadline, batch.timeout_s, batch.flags or [])
        except Exception as e:
            if not isinstance(e, MQClientError):
                log.exception("async batch send to %s failed", batch.topic)
            for future in batch.futures:
                if future is not None:
                    _complete(future.set_exception, e)
        else:
            for future, result in zip(batch.futures, results, strict=True):
                if future is not None:
                    _complete(future.set_result, result)
        finally:
            with self._lock:
                self._inflight[batch.key] -= 1
                self._pending -= len(batch.ids)
                self._room.notify_all()
            if self.multi_sender is None:
                self._pump(batch.key)
            else:
                self._round_ended()

    def _round_ended(self) -> None:
        """A send of a multi-sender ended: what waited for it leaves (all that is ready,
        and the open batches too when their linger expired meanwhile)."""
        self._rounds -= 1
        if self._linger_due:
            self._linger_all_expired()
        elif not self._drain_scheduled:
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    async def flush(self) -> None:
        """Sends everything waiting and waits for every batch in flight (loop)."""
        with self._lock:
            for key in list(self._open):
                self._ready.setdefault(key, collections.deque()).append(self._open.pop(key))
            self._linger_armed = False  # the armed timer (if any) finds nothing open
            self._linger_due = False
        if self.multi_sender is None:
            for key in list(self._ready):
                self._pump(key)
        else:
            self._drain()
        while self._tasks or self._drain_scheduled:
            if self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
            else:  # a drain of batches that waited for room in flight is due
                await asyncio.sleep(0)

    async def close(self) -> None:
        await self.flush()
        with self._lock:
            self.closed = True
            self._room.notify_all()


def _settle(batch: Batch, outcome: list[SendResult] | BaseException) -> None:
    """Completes the futures of `batch` with its results or its error."""
    if isinstance(outcome, BaseException):
        for future in batch.futures:
            if future is not None:
                _complete(future.set_exception, outcome)
        return
    for future, result in zip(batch.futures, outcome, strict=True):
        if future is not None:
            _complete(future.set_result, result)


def _complete(complete: Callable[[Any], None], value: Any) -> None:
    try:
        complete(value)
    except concurrent.futures.InvalidStateError:  # the caller cancelled it
        pass
