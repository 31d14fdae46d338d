"""Deterministic time for tests, in the manner of trio's MockClock: clocks that move only when
told, and an asyncio sleep that returns when the clock passes its deadline."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading

START_MS = 1_700_000_000_000


class FakeClock:
    """A clock in milliseconds that moves only when told (safe to read from other threads:
    the store's services read it too)."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.now_ms

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now_ms += round(seconds * 1000)

    def monotonic(self) -> float:
        """The same clock in seconds, for what takes a `time.monotonic` (the client)."""
        with self._lock:
            return self.now_ms / 1000


class FakeTime(FakeClock):
    """FakeClock plus an asyncio ``sleep`` that returns when ``advance`` passes its deadline."""

    def __init__(self, now_ms: int = START_MS) -> None:
        super().__init__(now_ms)
        self.sleeps: list[float] = []
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    async def sleep(self, seconds: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        deadline = self.now_ms + round(seconds * 1000)
        heapq.heappush(self._waiters, (deadline, next(self._seq), future))
        self.sleeps.append(seconds)
        await future

    async def settle(self) -> None:
        """Let woken tasks run until they wait again."""
        for _ in range(10):
            await asyncio.sleep(0)

    async def advance_async(self, seconds: float) -> None:
        """Move time forward, waking each sleeper at its own deadline, in order."""
        target = self.now_ms + round(seconds * 1000)
        await self.settle()
        while self._waiters and self._waiters[0][0] <= target:
            deadline, _, future = heapq.heappop(self._waiters)
            self.now_ms = max(self.now_ms, deadline)
            if not future.done():
                future.set_result(None)
            await self.settle()
        self.now_ms = target
