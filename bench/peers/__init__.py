"""Side-by-side benchmark: `python -m bench.peers [--quick] [--out DIR]`.

Measures this project's local cluster (mqcluster: a name server and brokers on loopback)
and what a team would run instead — NATS JetStream (file store), Redis Streams, RabbitMQ
(stream / quorum queue, publisher confirms) — in the same run on the same machine, at
matched durability classes:

  (a) acknowledged when the message is in memory / the OS page cache;
  (b) acknowledged after fsync;
  (c) acknowledged after a replica has it (n/a where a peer cannot replicate here).

Workloads, 1 KiB messages: one at a time acknowledged (msgs/s, p50/p99 ms); many in flight
(async / pipelined / windowed); consume everything back; the many-in-flight load spread over
256 topics instead of 1. Servers are started on 127.0.0.1 in a temporary directory and
stopped by PID; a peer that is not installed is reported as skipped. Nothing is installed
by the bench itself (docs/benchmarks.md has the apt and pip lines).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bench.e2e import BODY, TOPIC, percentile

__all__ = ["BODY", "CLASSES", "TOPIC", "Peer", "Sizes", "Target", "one_by_one", "summary",
           "topic_names"]

CLASSES = {
    "a": "acknowledged in memory / OS cache",
    "b": "acknowledged after fsync",
    "c": "acknowledged after a replica has it",
}


@dataclass(frozen=True)
class Sizes:
    """How many messages each workload sends."""

    warm_up: int
    one_at_a_time: int
    in_flight: int
    window: int
    topics: int
    rounds: int  # the 1-topic and many-topic loads alternate this many times; best counts
    in_flight_seconds: float  # a many-in-flight load stops early after this long


FULL = Sizes(warm_up=200, one_at_a_time=2000, in_flight=50_000, window=256, topics=256,
             rounds=2, in_flight_seconds=15.0)
QUICK = Sizes(warm_up=20, one_at_a_time=100, in_flight=1000, window=64, topics=8, rounds=1,
              in_flight_seconds=10.0)


def topic_names(count: int) -> list[str]:
    """The topics of the many-topics workload (the main one, TOPIC, is not among them)."""
    return [f"{TOPIC}{i:03d}" for i in range(count)]


def summary(n: int, elapsed: float, latencies: list[float]) -> tuple[float, float, float]:
    """(msgs/s, p50 ms, p99 ms) of n sends over `elapsed` seconds; sorts `latencies`."""
    latencies.sort()
    return (n / elapsed, percentile(latencies, 0.50) * 1000,
            percentile(latencies, 0.99) * 1000)


async def one_by_one(send: Callable[[], Awaitable[object]], n: int) -> list[float]:
    """Awaits send() n times, each before the next: the seconds each took."""
    latencies = []
    for _ in range(n):
        t = time.perf_counter()
        await send()
        latencies.append(time.perf_counter() - t)
    return latencies


class Target(Protocol):
    """One peer running in one durability class, connected and ready."""

    def prepare(self, topics: Sequence[str]) -> None:
        """Creates what `topics` need (streams, queues, topics) outside the timings."""

    def one_at_a_time(self, n: int) -> tuple[float, float, float]:
        """n sends to TOPIC, each acknowledged before the next: (msgs/s, p50 ms, p99 ms)."""

    def in_flight(self, topics: Sequence[str], n: int, window: int, seconds: float
                  ) -> tuple[int, float]:
        """Up to n sends spread round-robin over `topics`, many unacknowledged at once,
        fewer when `seconds` have passed: (messages sent, msgs/s)."""

    def consume(self, total: int) -> float:
        """Reads the `total` messages of TOPIC back (acknowledging them): msgs/s."""


@dataclass
class Peer:
    """A system under test: what it lacks on this machine (None: nothing), its setting per
    durability class (or why a class does not apply), and how to start it in a class."""

    name: str
    missing: str | None
    settings: dict[str, str]
    open: Callable[[str, Path], AbstractContextManager[Target]]
    not_applicable: dict[str, str] = field(default_factory=dict)
    version: str = ""
