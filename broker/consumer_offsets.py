"""Consumer offsets per (topic@group, queueId) (RocketMQ's ConsumerOffsetManager) and
the schedule service's delay offsets (delayOffset.json).

Committed offsets live in memory and persist to `config/consumerOffset.json` every
flushConsumerOffsetInterval (5 s) when something changed, and at shutdown, in RocketMQ's
layout: `{"offsetTable": {"topic@group": {"0": 12, ...}}, "dataVersion": {...}}`.

Fix over 4.x (SPEC §5): a slave remembers which offsets consumers committed on it
(`localCommitTable` in the same file, so a slave restart keeps them). Those are reported
to the master, which keeps the larger offset per queue, and a copy from the master never
lowers them; every other offset a slave holds is a plain copy of the master's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from broker.persistence import ConfigManager
from broker.topic_config import Clock, DataVersion

log = logging.getLogger(__name__)

TOPIC_GROUP_SEPARATOR = "@"

OffsetTable = dict[str, dict[int, int]]
Entry = tuple[str, str, int, int]  # topic, group, queueId, offset


def offset_key(topic: str, group: str) -> str:
    return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"


def split_offset_key(key: str) -> tuple[str, str]:
    """`topic@group` -> (topic, group); topics never contain `@`, groups might."""
    topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
    if not sep or not topic or not group:
        raise ValueError(f"bad offset key {key!r}: expected topic@group")
    return topic, group


def _encode_table(table: OffsetTable) -> dict[str, dict[str, int]]:
    return {key: {str(q): o for q, o in sorted(queues.items())}
            for key, queues in sorted(table.items())}


def table_entries(table: OffsetTable) -> Iterator[Entry]:
    for key, queues in table.items():
        topic, group = split_offset_key(key)
        for queue_id, offset in queues.items():
            yield topic, group, queue_id, offset


def _keep_larger(queues: dict[int, int], queue_id: int, offset: int) -> bool:
    """Sets the queue's offset when `offset` is larger (or it has none); True when it did."""
    if offset > queues.get(queue_id, -1):
        queues[queue_id] = offset
        return True
    return False


def _parse_table(data: Any) -> OffsetTable:
    table: OffsetTable = {}
    for key, queues in data.items():
        split_offset_key(key)
        table[key] = {int(q): int(o) for q, o in queues.items()}
    return table


class ConsumerOffsetManager(ConfigManager[tuple[OffsetTable, DataVersion, OffsetTable]]):
    """Used from the event loop only."""

    def __init__(self, path: Path, clock_ms: Clock, *, track_local_commits: bool = False
                 ) -> None:
        """`track_local_commits`: a slave's manager, which remembers what consumers
        committed on it until the master took it (see the module doc)."""
        super().__init__(path)
        self.clock_ms = clock_ms
        self.offset_table: OffsetTable = {}
        self.data_version = DataVersion()
        self.track_local_commits = track_local_commits
        self.local_commits: OffsetTable = {}
        # topic@group -> queueId -> clock_ms() of the last commit, moved or not (in memory:
        # the analytics' sign that a consumer is alive).
        self.commit_times: dict[str, dict[int, int]] = {}

    # -- persistence -----------------------------------------------------------------------
    def encode(self) -> Any:
        if self.dirty:
            self.data_version = self.data_version.next(self.clock_ms())
        data = {
            "offsetTable": _encode_table(self.offset_table),
            "dataVersion": self.data_version.to_json(),
        }
        if self.local_commits:
            data["localCommitTable"] = _encode_table(self.local_commits)
        return data

    def parse(self, data: Any) -> tuple[OffsetTable, DataVersion, OffsetTable]:
        return (_parse_table(data["offsetTable"]), DataVersion.from_json(data.get("dataVersion")),
                _parse_table(data.get("localCommitTable", {})))

    def apply(self, parsed: tuple[OffsetTable, DataVersion, OffsetTable]) -> None:
        self.offset_table, self.data_version, local_commits = parsed
        self.dirty = False
        if self.track_local_commits:
            self.local_commits = local_commits
        elif local_commits:  # a former slave, now a master: its table holds them already
            log.info("dropping %d slave-side commit records: this broker is a master",
                     sum(len(q) for q in local_commits.values()))
            self.dirty = True

    # -- table -----------------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = offset_key(topic, group)
        self.commit_times.setdefault(key, {})[queue_id] = self.clock_ms()
        queues = self.offset_table.setdefault(key, {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.dirty = True
        if self.track_local_commits:
            local = self.local_commits.setdefault(key, {})
            if local.get(queue_id) != offset:
                local[queue_id] = offset
                self.dirty = True

    # -- master / slave reconciliation (SPEC §5) -------------------------------------------
    def merge_larger(self, entries: Iterable[Entry]) -> int:
        """Master side: keeps each offset where it is larger than ours (or we have none);
        returns how many moved forward."""
        moved = 0
        for topic, group, queue_id, offset in entries:
            moved += _keep_larger(self.offset_table.setdefault(offset_key(topic, group), {}),
                                  queue_id, offset)
        if moved:
            self.dirty = True
        return moved

    def local_commit_entries(self) -> list[Entry]:
        """Slave side: the offsets consumers committed here that the master has not taken."""
        return list(table_entries(self.local_commits))

    def forget_local_commits(self, reported: Iterable[Entry]) -> None:
        """Slave side: the master took `reported`; a queue committed again since stays."""
        for topic, group, queue_id, offset in reported:
            key = offset_key(topic, group)
            queues = self.local_commits.get(key)
            if queues is not None and queues.get(queue_id) == offset:
                del queues[queue_id]
                if not queues:
                    del self.local_commits[key]
                self.dirty = True

    def copy_from_master(self, entries: Iterable[Entry]) -> bool:
        """Slave side: the table becomes the master's, except that an offset committed here
        and not yet taken by the master is never lowered. True when something changed."""
        table: OffsetTable = {}
        for topic, group, queue_id, offset in entries:
            table.setdefault(offset_key(topic, group), {})[queue_id] = offset
        for key, queues in self.local_commits.items():
            merged = table.setdefault(key, {})
            for queue_id, offset in queues.items():
                _keep_larger(merged, queue_id, offset)
        if table == self.offset_table:
            return False
        self.offset_table = table
        self.dirty = True
        return True

    def reset_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """An admin moved the group's offsets (resetOffsetByTime): set as given, also
        backwards; not a consumer's commit."""
        key = offset_key(topic, group)
        self.offset_table.setdefault(key, {}).update(offsets)
        self.dirty = True

    def last_commit_time(self, group: str, topic: str, queue_id: int) -> int:
        """clock_ms() of the group's last commit on the queue; 0 when none since start."""
        return self.commit_times.get(offset_key(topic, group), {}).get(queue_id, 0)

    def queue_commit_times(self, group: str, topic: str) -> dict[int, int]:
        """A copy of queueId -> clock_ms() of the group's last commit on each queue."""
        return dict(self.commit_times.get(offset_key(topic, group), {}))

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, -1 when the group committed none for this queue."""
        return self.offset_table.get(offset_key(topic, group), {}).get(queue_id, -1)

    def entries(self) -> Iterator[Entry]:
        """(topic, group, queueId, offset) of every committed offset."""
        return table_entries(self.offset_table)

    def groups(self) -> set[str]:
        return {split_offset_key(k)[1] for k in self.offset_table}

    def topics_of_group(self, group: str) -> list[str]:
        return sorted(t for t, g in map(split_offset_key, self.offset_table) if g == group)

    def clean_topic(self, topic: str) -> None:
        """Drops the offsets of every group on `topic` (the topic was deleted)."""
        for table in (self.offset_table, self.local_commits):
            for key in [k for k in table if split_offset_key(k)[0] == topic]:
                del table[key]
                self.dirty = True
        for key in [k for k in self.commit_times if split_offset_key(k)[0] == topic]:
            del self.commit_times[key]


class DelayOffsetManager(ConfigManager[dict[int, int]]):
    """Progress of the schedule service per delay level (`config/delayOffset.json`,
    RocketMQ's layout `{"offsetTable": {"1": 0, ...}}`). A slave copies its master's."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.offset_table: dict[int, int] = {}

    def encode(self) -> Any:
        return {"offsetTable": {str(level): o for level, o in sorted(self.offset_table.items())}}

    def parse(self, data: Any) -> dict[int, int]:
        table = {int(level): int(o) for level, o in data["offsetTable"].items()}
        for level, offset in table.items():
            if level <= 0 or offset < 0:
                raise ValueError(f"bad delay offset entry {level}: {offset}")
        return table

    def apply(self, parsed: dict[int, int]) -> None:
        self.offset_table = parsed

    def advance(self, level: int, offset: int) -> None:
        """The schedule service delivered level `level` up to queue offset `offset`."""
        self.offset_table[level] = offset
        self.dirty = True

    def copy_from_master(self, table: dict[int, int]) -> bool:
        """Slave side: True when the table changed (the caller persists it)."""
        if table == self.offset_table:
            return False
        self.offset_table = dict(table)
        return True
