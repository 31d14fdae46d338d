"""Broker statistics (RocketMQ's BrokerStatsManager, reduced): message counters sampled
every second, rates over the last minute, and the send latency histogram."""

from __future__ import annotations

import collections
import dataclasses

from broker.constants import TPS_WINDOW_S
from broker.topic_config import Clock
from store.histogram import LatencyHistogram


@dataclasses.dataclass(frozen=True)
class _Sample:
    time_ms: int
    put_total: int
    get_total: int
    group_get: dict[str, int]
    topic_put: dict[str, int]
    group_topic_get: dict[tuple[str, str], int]


class BrokerStats:
    """Counters are bumped on the event loop; `sample` runs once a second."""

    def __init__(self, clock_ms: Clock, window_s: int = TPS_WINDOW_S) -> None:
        self.clock_ms = clock_ms
        self.window_ms = window_s * 1000
        self.put_total = 0  # messages stored
        self.get_total = 0  # messages returned by pulls
        self.topic_put: collections.Counter[str] = collections.Counter()
        self.group_get: collections.Counter[str] = collections.Counter()
        self.group_topic_get: collections.Counter[tuple[str, str]] = collections.Counter()
        # Seconds from a send request's arrival to its answer (gRPC and the send channel).
        self.send_latency = LatencyHistogram()
        self._samples: collections.deque[_Sample] = collections.deque()
        self.sample()

    def record_put(self, topic: str, count: int) -> None:
        self.put_total += count
        self.topic_put[topic] += count

    def record_get(self, group: str, topic: str, count: int) -> None:
        self.get_total += count
        self.group_get[group] += count
        self.group_topic_get[group, topic] += count

    def sample(self) -> None:
        now = self.clock_ms()
        self._samples.append(_Sample(now, self.put_total, self.get_total,
                                     dict(self.group_get), dict(self.topic_put),
                                     dict(self.group_topic_get)))
        while len(self._samples) > 1 and now - self._samples[1].time_ms >= self.window_ms:
            self._samples.popleft()

    def _oldest(self) -> tuple[_Sample, float]:
        oldest = self._samples[0]
        return oldest, max(0, self.clock_ms() - oldest.time_ms) / 1000

    def put_tps(self) -> float:
        oldest, seconds = self._oldest()
        return (self.put_total - oldest.put_total) / seconds if seconds else 0.0

    def get_total_tps(self) -> float:
        oldest, seconds = self._oldest()
        return (self.get_total - oldest.get_total) / seconds if seconds else 0.0

    def consume_tps(self, group: str) -> float:
        oldest, seconds = self._oldest()
        done = self.group_get.get(group, 0) - oldest.group_get.get(group, 0)
        return done / seconds if seconds else 0.0

    def topic_put_tps(self) -> dict[str, float]:
        """Messages stored per second over the window, of every topic ever put to."""
        oldest, seconds = self._oldest()
        before = oldest.topic_put
        return {t: (n - before.get(t, 0)) / seconds if seconds else 0.0
                for t, n in self.topic_put.items()}

    def group_topic_get_tps(self) -> dict[tuple[str, str], float]:
        """Messages pulled per second over the window, per (group, topic)."""
        oldest, seconds = self._oldest()
        before = oldest.group_topic_get
        return {k: (n - before.get(k, 0)) / seconds if seconds else 0.0
                for k, n in self.group_topic_get.items()}
