"""Consumer offsets per (topic@group, queueId) (RocketMQ's ConsumerOffsetManager).

Committed offsets live in memory and persist to `config/consumerOffset.json` every
flushConsumerOffsetInterval (5 s) when something changed, and at shutdown, in RocketMQ's
layout: `{"offsetTable": {"topic@group": {"0": 12, ...}}, "dataVersion": {...}}`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from broker.persistence import ConfigManager
from broker.topic_config import Clock, DataVersion

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"

OffsetTable = dict[str, dict[int, int]]


def offset_key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def split_offset_key(key: str) -> tuple[str, str]:
    """`topic@group` -> (topic, group); topics never contain `@`, groups might."""
    topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
    if not sep or not topic or not group:
        raise ValueError(f"bad offset key {key!r}: expected topic@group")
    return topic, group


class ConsumerOffsetManager(ConfigManager[tuple[OffsetTable, DataVersion]]):
    """Used from the event loop only."""

    def __init__(self, path: Path, clock_ms: Clock) -> None:
        super().__init__(path)
        self.clock_ms = clock_ms
        self.offset_table: OffsetTable = {}
        self.data_version = DataVersion()
        self.dirty = False

    # -- persistence -----------------------------------------------------------------------
    def encode(self) -> Any:
        if self.dirty:
            self.data_version = self.data_version.next(self.clock_ms())
            self.dirty = False
        return {
            "offsetTable": {
                key: {str(q): o for q, o in sorted(queues.items())}
                for key, queues in sorted(self.offset_table.items())
            },
            "dataVersion": self.data_version.to_json(),
        }

    def parse(self, data: Any) -> tuple[OffsetTable, DataVersion]:
        table: OffsetTable = {}
        for key, queues in data["offsetTable"].items():
            split_offset_key(key)
            table[key] = {int(q): int(o) for q, o in queues.items()}
        return table, DataVersion.from_json(data.get("dataVersion"))

    def apply(self, parsed: tuple[OffsetTable, DataVersion]) -> None:
        self.offset_table, self.data_version = parsed
        self.dirty = False

    async def persist_if_dirty(self) -> bool:
        """The periodic persistence: writes only when an offset changed since last time."""
        if not self.dirty:
            return False
        try:
            await self.persist_async()
        except BaseException:
            self.dirty = True  # try again next period
            raise
        return True

    # -- table -----------------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        queues = self.offset_table.setdefault(offset_key(topic, group), {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, -1 when the group committed none for this queue."""
        return self.offset_table.get(offset_key(topic, group), {}).get(queue_id, -1)

    def entries(self) -> Iterator[tuple[str, str, int, int]]:
        """(topic, group, queueId, offset) of every committed offset."""
        for key, queues in self.offset_table.items():
            topic, group = split_offset_key(key)
            for queue_id, offset in queues.items():
                yield topic, group, queue_id, offset

    def groups(self) -> set[str]:
        return {split_offset_key(k)[1] for k in self.offset_table}

    def topics_of_group(self, group: str) -> list[str]:
        return sorted(t for t, g in map(split_offset_key, self.offset_table) if g == group)

    def clean_topic(self, topic: str) -> None:
        """Drops the offsets of every group on `topic` (the topic was deleted)."""
        for key in [k for k in self.offset_table if split_offset_key(k)[0] == topic]:
            del self.offset_table[key]
            self.dirty = True
