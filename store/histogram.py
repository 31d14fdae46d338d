"""LatencyHistogram: durations counted in fixed buckets, for the Prometheus endpoints
(broker/metrics.py): a commitlog flush here, a send in the broker.

Plain counters, no lock: one thread writes (the flush service, or the event loop); a reader
in another thread takes `snapshot()`, whose bucket counts are one list copy (a single C call
under the GIL, so never half-updated). Its sum may lag its count by the observation being
recorded at that moment, which a scrape cannot tell from a slightly later scrape.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

# Seconds: sub-millisecond (a page-cache write, an fdatasync on a fast disk) to 10 s. The
# bounds include those of RocketMQ's PutMessageDistributeTime (1 ms, 10, 50, 100, 200,
# 500 ms, 1, 2, 3, 4, 5, 10 s), so its ranges are sums of these buckets.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5,
    1.0, 2.0, 2.5, 3.0, 4.0, 5.0, 10.0)


@dataclasses.dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    bounds: tuple[float, ...]  # upper bounds (le), increasing; +Inf is implied
    counts: tuple[int, ...]  # per bucket, not cumulative; the last one is above every bound
    sum: float

    @property
    def count(self) -> int:
        return sum(self.counts)

    def count_le(self, bound: float) -> int:
        """Observations <= `bound`, which must be one of the bounds (or inf)."""
        if bound == float("inf"):
            return self.count
        return sum(self.counts[:self.bounds.index(bound) + 1])

    def cumulative(self) -> list[tuple[float, int]]:
        """(le, observations <= le) for each bound, then (inf, count)."""
        out, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out


class LatencyHistogram:
    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS_S) -> None:
        ordered = tuple(bounds)
        if not ordered or any(b <= a for a, b in zip(ordered, ordered[1:], strict=False)):
            raise ValueError("histogram bounds must be a non-empty increasing sequence")
        self.bounds = ordered
        self._counts = [0] * (len(ordered) + 1)
        self._sum = 0.0

    def observe(self, seconds: float, count: int = 1) -> None:
        """`count` durations of `seconds` each; a negative one (a clock step) counts as 0."""
        seconds = max(0.0, seconds)
        self._counts[bisect.bisect_left(self.bounds, seconds)] += count
        self._sum += seconds * count

    def snapshot(self) -> HistogramSnapshot:
        counts = self._counts.copy()
        return HistogramSnapshot(self.bounds, tuple(counts), self._sum)
