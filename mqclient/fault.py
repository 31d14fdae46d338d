"""Latency fault tolerance (RocketMQ's MQFaultStrategy / LatencyFaultToleranceImpl): a broker
that failed or answered slowly is avoided for a back-off period when choosing queues."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence

from mqclient.constants import FAILURE_ISOLATION_MS, LATENCY_MAX_MS, NOT_AVAILABLE_DURATION_MS
from mqclient.message import MessageQueue

ClockMs = Callable[[], float]


def monotonic_ms() -> float:
    return time.monotonic() * 1000


class LatencyFaultTolerance:
    """Thread-safe: sync sends report from callers' threads, async ones from the loop."""

    def __init__(self, clock_ms: ClockMs = monotonic_ms) -> None:
        self.clock_ms = clock_ms
        self._not_available_until: dict[str, float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def not_available_duration_ms(latency_ms: float) -> int:
        for bound, duration in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_DURATION_MS),
                                   strict=True):
            if latency_ms >= bound:
                return duration
        return 0

    def update(self, broker_name: str, latency_ms: float, failed: bool) -> None:
        duration = (FAILURE_ISOLATION_MS if failed
                    else self.not_available_duration_ms(latency_ms))
        with self._lock:
            if duration <= 0:
                self._not_available_until.pop(broker_name, None)
            else:
                self._not_available_until[broker_name] = self.clock_ms() + duration

    def is_available(self, broker_name: str) -> bool:
        until = self._not_available_until.get(broker_name)
        return until is None or self.clock_ms() >= until

    def soonest_available(self, broker_names: Sequence[str]) -> str | None:
        """pickOneAtLeast: of brokers all in back-off, the one whose back-off ends first."""
        with self._lock:
            known = [(self._not_available_until.get(b, 0.0), b) for b in broker_names]
        return min(known)[1] if known else None


class QueueSelector:
    """Round-robin over a route's writable queues, skipping brokers in back-off and, on a
    retry, the broker that just failed (selectOneMessageQueue)."""

    def __init__(self, fault: LatencyFaultTolerance) -> None:
        self.fault = fault
        self._counter = itertools.count()

    def select(self, queues: Sequence[MessageQueue], last_broker: str | None = None
               ) -> MessageQueue:
        n = len(queues)
        start = next(self._counter)
        for i in range(n):
            mq = queues[(start + i) % n]
            if mq.broker_name != last_broker and self.fault.is_available(mq.broker_name):
                return mq
        # Every broker is in back-off (or the only one just failed): prefer another broker
        # than the last, the one whose back-off ends first.
        others = [q for q in queues if q.broker_name != last_broker] or list(queues)
        best = self.fault.soonest_available(sorted({q.broker_name for q in others}))
        candidates = [q for q in others if q.broker_name == best] or others
        return candidates[start % len(candidates)]
