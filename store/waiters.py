"""Callers waiting until an offset is reached: flushed to disk, or acked by a slave.

One mechanism for SYNC_FLUSH group commit and SYNC_MASTER replication. A waiter is either a
thread (blocking wait) or an asyncio future; futures of one event loop are completed with a
single call_soon_threadsafe per advance, so a group of many waiting sends costs one wake-up.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Callable


class _Waiting:
    __slots__ = ("offset", "deadline", "loop", "target", "result")

    def __init__(self, offset: int, deadline: float, loop: asyncio.AbstractEventLoop | None,
                 target: asyncio.Future[bool] | threading.Event) -> None:
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

    def __len__(self) -> int:
        return len(self._heap)

    def _add(self, w: _Waiting) -> bool:
        with self._lock:
            if w.offset <= self.reached:
                return False
            first = not self._heap
            heapq.heappush(self._heap, (w.offset, next(self._seq), w))
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
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        if not self._add(_Waiting(offset, self._clock() + timeout_s, loop, fut)):
            fut.set_result(True)
        else:  # times out even if nothing ever advances again
            loop.call_later(timeout_s, _time_out, fut)
        return fut

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
            if heap:
                now = self._clock()
                if any(item[2].deadline <= now for item in heap):
                    keep = []
                    for item in heap:
                        if item[2].deadline <= now:
                            done.append(item[2])
                        else:
                            keep.append(item)
                    heapq.heapify(keep)
                    self._heap = keep
        if done:
            _complete(done)
        return len(done)

    def fail_all(self) -> None:
        with self._lock:
            done = [item[2] for item in self._heap]
            self._heap = []
        _complete(done)


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


def _time_out(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


def _set_results(ws: list[_Waiting]) -> None:
    for w in ws:
        fut = w.target
        if not fut.done():  # type: ignore[union-attr]
            fut.set_result(w.result)  # type: ignore[union-attr]
