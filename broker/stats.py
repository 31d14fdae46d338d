"""Broker statistics (RocketMQ's BrokerStatsManager, reduced): message counters sampled
every second, rates over the last minute."""

from __future__ import annotations

import collections
import dataclasses

from broker.constants import TPS_WINDOW_S
from broker.topic_config import Clock


@dataclasses.dataclass(frozen=True)
class _Sample:
    time_ms: int
    put_total: int
    get_total: int
    group_get: dict[str, int]


class BrokerStats:
    """Counters are bumped on the event loop; `sample` runs once a second."""

    def __init__(self, clock_ms: Clock, window_s: int = TPS_WINDOW_S) -> None:
        self.clock_ms = clock_ms
        self.window_ms = window_s * 1000
        self.put_total = 0  # messages stored
        self.get_total = 0  # messages returned by pulls
        self.topic_put: collections.Counter[str] = collections.Counter()
        self.group_get: collections.Counter[str] = collections.Counter()
        self._samples: collections.deque[_Sample] = collections.deque()
        self.sample()

    def record_put(self, topic: str, count: int) -> None:
        self.put_total += count
        self.topic_put[topic] += count

    def record_get(self, group: str, topic: str, count: int) -> None:
        self.get_total += count
        self.group_get[group] += count

    def sample(self) -> None:
        now = self.clock_ms()
        self._samples.append(_Sample(now, self.put_total, self.get_total,
                                     dict(self.group_get)))
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
