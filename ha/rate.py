"""Bytes per second over a sliding window (the transfer rate both HA ends report)."""

from __future__ import annotations

import collections
from collections.abc import Callable

from ha.constants import HA_TRANSFER_RATE_WINDOW


class TransferRate:
    """Counts bytes; `rate()` is bytes/s over the last `window` seconds (or since the
    meter started, when it is younger than the window). `clock` is monotonic seconds."""

    def __init__(self, clock: Callable[[], float],
                 window: float = HA_TRANSFER_RATE_WINDOW) -> None:
        self.clock = clock
        self.window = window
        self.total = 0
        self._started = clock()
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, n: int) -> None:
        self.total += n
        self._samples.append((self.clock(), self.total))
        self._prune()

    def _prune(self) -> float:
        window_start = self.clock() - self.window
        while len(self._samples) > 1 and self._samples[1][0] <= window_start:
            self._samples.popleft()
        return window_start

    def rate(self) -> float:
        window_start = self._prune()
        if not self._samples:
            return 0.0
        first_t, first_total = self._samples[0]
        if first_t <= window_start:
            return (self.total - first_total) / self.window
        return self.total / max(self.clock() - self._started, 1e-3)
