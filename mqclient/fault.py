"""Latency fault tolerance (RocketMQ's MQFaultStrategy / LatencyFaultToleranceImpl): a broker
that failed or answered slowly is avoided for a back-off period when choosing queues."""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Sequence

from mqclient.constants import FAILURE_ISOLATION_MS, LATENCY_MAX_MS, NOT_AVAILABLE_DURATION_MS
from mqclient.message import MessageQueue

ClockMs = Callable[[], float]
# Topics whose round-robin turn a producer keeps (a few ints each); past that, forgotten.
MAX_TOPIC_TURNS = 65_536


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

    @property
    def backing_off(self) -> bool:
        """Some broker failed or was slow and has not answered well since."""
        return bool(self._not_available_until)

    def clear(self, broker_name: str) -> None:
        """The broker is back (a restarted master listed again): no longer avoided."""
        with self._lock:
            self._not_available_until.pop(broker_name, None)

    def is_available(self, broker_name: str) -> bool:
        until = self._not_available_until.get(broker_name)
        return until is None or self.clock_ms() >= until

    def soonest_available(self, broker_names: Sequence[str]) -> str | None:
        """pickOneAtLeast: of brokers all in back-off, the one whose back-off ends first."""
        with self._lock:
            known = [(self._not_available_until.get(b, 0.0), b) for b in broker_names]
        return min(known)[1] if known else None


class QueueSelector:
    """Round-robin over a route's writable queues of brokers not in back-off and, on a
    retry, not the broker that just failed (selectOneMessageQueue with RocketMQ 5's queue
    filters). The turn is taken among those queues: skipping the queues of a broker in
    back-off to the next available one would send all their turns to one queue (one
    topic's, after a master kill: 5,516 messages in broker-b's queue 0 against 1,506 in
    each of its others). One turn per topic, starting at a random queue (RocketMQ's
    sendWhichQueue), so that topics sent in alternation, and short-lived producers, use
    every queue."""

    def __init__(self, fault: LatencyFaultTolerance) -> None:
        self.fault = fault
        self._turns: dict[str, itertools.count[int]] = {}

    def _turn(self, topic: str) -> int:
        turns = self._turns.get(topic)
        if turns is None:
            if len(self._turns) >= MAX_TOPIC_TURNS:
                self._turns.clear()  # topics no longer sent to: a random start again
            turns = self._turns.setdefault(topic, itertools.count(random.randrange(1 << 16)))
        return next(turns)  # thread-safe: sync sends select from callers' threads

    def select(self, queues: Sequence[MessageQueue], last_broker: str | None = None
               ) -> MessageQueue:
        turn = self._turn(queues[0].topic)
        if last_broker is None and not self.fault.backing_off:
            return queues[turn % len(queues)]
        brokers = {q.broker_name for q in queues}
        usable = {b for b in brokers if b != last_broker and self.fault.is_available(b)}
        available = [q for q in queues if q.broker_name in usable]
        if available:
            return available[turn % len(available)]
        # Every broker is in back-off (or the only one just failed): prefer another broker
        # than the last, the one whose back-off ends first.
        others = [q for q in queues if q.broker_name != last_broker] or list(queues)
        best = self.fault.soonest_available(sorted({q.broker_name for q in others}))
        candidates = [q for q in others if q.broker_name == best] or others
        return candidates[turn % len(candidates)]
