"""Queue allocation strategies of clustering consumers (AllocateMessageQueueStrategy).

Every consumer of a group computes the same allocation from the same sorted queue and
consumer lists, so each queue goes to exactly one consumer without them talking.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mqclient.message import MessageQueue


class AllocateStrategy(Protocol):
    name: str

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]: ...


def _index(current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> int:
    """The current consumer's place in the list; -1 when it gets nothing."""
    if not current_cid or not mq_all or current_cid not in cid_all:
        return -1
    return list(cid_all).index(current_cid)


class AllocateAveragely:
    """Consecutive blocks: 16 queues / 3 consumers -> 6, 5, 5 (the first ones get the
    remainder)."""

    name = "AVG"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        index = _index(current_cid, mq_all, cid_all)
        if index < 0:
            return []
        n, m = len(mq_all), len(cid_all)
        mod = n % m
        if n <= m:
            size = 1
        else:
            size = n // m + 1 if mod > 0 and index < mod else n // m
        start = index * size if mod > 0 and index < mod else index * size + mod
        count = min(size, n - start)
        return [mq_all[(start + i) % n] for i in range(max(0, count))]


class AllocateAveragelyByCircle:
    """Round the circle: consumer i gets queues i, i + m, i + 2m, ..."""

    name = "AVG_BY_CIRCLE"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        index = _index(current_cid, mq_all, cid_all)
        if index < 0:
            return []
        return [mq for i, mq in enumerate(mq_all) if i % len(cid_all) == index]
