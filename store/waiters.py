"""Callers waiting until an offset is reached: flushed to disk, or acked by a slave.

One mechanism for SYNC_FLUSH group commit and SYNC_MASTER replication. A waiter is either a
thread (blocking wait), an asyncio future or a callback run on its loop; those of one event loop
are completed with a single call_soon_threadsafe per advance, so a group of many waiting sends
costs one wake-up.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import logging
import math
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)


class _Settable(Protocol):
    """What an asyncio wait completes: a future, or a _LoopCallback."""

    def done(self) -> bool: ...

    def set_result(self, result: bool, /) -> None: ...


class _LoopCallback:
    """A wait's outcome handed to a function on its loop's thread, once, without a future:
    saves creating the future and one loop iteration (its done callbacks would run in the
    next one) on every SYNC_FLUSH round."""

    __slots__ = ("fn", "called")

    def __init__(self, fn: Callable[[bool], None]) -> None:
        self.fn = fn
        self.called = False

    def done(self) -> bool:
        return self.called

    def set_result(self, result: bool) -> None:
        if not self.called:
            self.called = True
            try:
                self.fn(result)
            except Exception:  # the other waits completed with it must still be completed
                log.exception("offset wait callback failed")


class _Waiting:
    __slots__ = ("offset", "deadline", "loop", "target", "result")

    def __init__(self, offset: int, deadline: float, loop: asyncio.AbstractEventLoop | None,
                 target: _Settable | threading.Event) -> None:
        self.offset = offset
        self.deadline = deadline
        self.loop = loop
        self.target = target
        self.result = False


class OffsetWaiters:
    """Pending waits ordered by offset; `advance` releases every wait at or below an offset."""

    def __init__(self, clock: Callable[[], float],
                 on_wait: Callable[[], None] | None = None) -> None:
        self._clock = clock  # seconds, monotonic
        self.on_wait = on_wait  # told of each new wait, e.g. to wake the service advancing it
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, _Waiting]] = []
        self._seq = itertools.count()
        self.reached = 0
        # No wait in the heap expires before this (it may be earlier than the true minimum:
        # released waits are not taken out of it), so advance scans for expired waits only
        # when one can be there, not on every call.
        self._next_deadline = math.inf
        self._watchdogs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watchdog] = (
            weakref.WeakKeyDictionary())

    def __len__(self) -> int:
        return len(self._heap)

    def _add(self, w: _Waiting) -> bool:
        with self._lock:
            if w.offset <= self.reached:
                return False
            first = not self._heap
            heapq.heappush(self._heap, (w.offset, next(self._seq), w))
            if w.deadline < self._next_deadline:
                self._next_deadline = w.deadline
        # Only an empty -> non-empty change can find the advancing service asleep.
        if first and self.on_wait is not None:
            self.on_wait()
        return True

    def wait(self, offset: int, timeout_s: float) -> bool:
        """Blocks the calling thread; True when reached, False on timeout."""
        event = threading.Event()
        w = _Waiting(offset, self._clock() + timeout_s, None, event)
        if not self._add(w):
            return True
        event.wait(timeout_s + 1.0)
        return w.result

    def wait_async(self, offset: int, timeout_s: float) -> asyncio.Future[bool]:
        """A future of the running loop: True when reached, False on timeout."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._wait_on_loop(offset, timeout_s, fut)
        return fut

    def wait_callback(self, offset: int, timeout_s: float, fn: Callable[[bool], None]) -> None:
        """As wait_async, but calls fn(True when reached, False on timeout) on the running
        loop's thread (at once when reached already) instead of completing a future."""
        self._wait_on_loop(offset, timeout_s, _LoopCallback(fn))

    def _wait_on_loop(self, offset: int, timeout_s: float, target: _Settable) -> None:
        loop = asyncio.get_running_loop()
        w = _Waiting(offset, self._clock() + timeout_s, loop, target)
        if not self._add(w):
            target.set_result(True)
            return
        dog = self._watchdogs.get(loop)  # times out even if nothing ever advances again
        if dog is None:
            dog = self._watchdogs[loop] = _Watchdog()
        dog.watch(loop, target, loop.time() + timeout_s)

    def advance(self, reached: int) -> int:
        """Releases waits with offset <= reached (True) and expired ones (False)."""
        done: list[_Waiting] = []
        with self._lock:
            if reached > self.reached:
                self.reached = reached
            heap = self._heap
            while heap and heap[0][0] <= reached:
                w = heapq.heappop(heap)[2]
                w.result = True
                done.append(w)
            if heap and self._clock() >= self._next_deadline:
                now = self._clock()
                keep = []
                next_deadline = math.inf
                for item in heap:
                    deadline = item[2].deadline
                    if deadline <= now:
                        done.append(item[2])
                    else:
                        keep.append(item)
                        next_deadline = min(next_deadline, deadline)
                heapq.heapify(keep)
                self._heap = keep
                self._next_deadline = next_deadline
        if done:
            _complete(done)
        return len(done)

    def fail_all(self) -> None:
        with self._lock:
            done = [item[2] for item in self._heap]
            self._heap = []
        _complete(done)


class _Watchdog:
    """Times out the futures of one loop with a single timer armed for the earliest
    deadline, instead of a timer per wait: asyncio keeps timers in a heap ordered by a
    Python-level comparison, which cost more than the rest of a wait at thousands a second.
    Touched only from its loop's thread; holds no reference to the loop but its timer."""

    __slots__ = ("waits", "timer", "__weakref__")

    def __init__(self) -> None:
        self.waits: collections.deque[tuple[float, _Settable]] = collections.deque()
        self.timer: asyncio.TimerHandle | None = None

    def watch(self, loop: asyncio.AbstractEventLoop, fut: _Settable, deadline: float) -> None:
        waits = self.waits
        while waits and waits[0][1].done():  # waits end mostly in the order they began
            waits.popleft()
        waits.append((deadline, fut))
        timer = self.timer
        if timer is None or deadline < timer.when():
            if timer is not None:
                timer.cancel()
            self.timer = loop.call_at(deadline, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self.timer = None
        now = loop.time()
        keep: collections.deque[tuple[float, _Settable]] = collections.deque()
        for deadline, fut in self.waits:
            if fut.done():
                continue
            if deadline <= now:
                fut.set_result(False)
            else:
                keep.append((deadline, fut))
        self.waits = keep
        if keep:
            self.timer = loop.call_at(min(d for d, _ in keep), self._fire, loop)


def _complete(done: list[_Waiting]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[_Waiting]] = {}
    for w in done:
        if w.loop is None:
            w.target.set()  # type: ignore[union-attr]
        else:
            by_loop.setdefault(w.loop, []).append(w)
    for loop, ws in by_loop.items():
        try:
            loop.call_soon_threadsafe(_set_results, ws)
        except RuntimeError:  # loop closed: nobody is waiting any more
            pass


def _set_results(ws: list[_Waiting]) -> None:
    for w in ws:
        fut = w.target
        if not fut.done():  # type: ignore[union-attr]
            fut.set_result(w.result)  # type: ignore[union-attr]
