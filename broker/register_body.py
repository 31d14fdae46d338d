"""The registration body: the broker's topic table as a zlib-compressed TopicConfigTable.

Each topic's entry (one TopicConfigTable element, serialized) is kept with the TopicConfig
it was made from; a TopicConfig is immutable and replaced whole when the topic changes, so
the next body re-serializes only the topics whose config object is new, and joins the rest
(concatenated TopicConfigTable messages are one message: their repeated fields append). At
50,000 topics, serializing every topic took ~110 ms of pure Python in a worker thread,
which held the GIL in 5 ms turns against the event loop (and the 50,000 protobuf objects it
made set off full garbage collections); with the entries kept, a body after one change
costs ~10 ms on the loop, ENCODE_SLICE topics per turn, and the join and zlib in a thread
(both let go of the GIL).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Generator

from broker.admin import topic_config_to_proto
from broker.topic_config import TopicConfig
from common.constants import PERM_READ_WRITE
from mqproto import namesrv_pb2
from remoting.serving import run_steps_on_loop

REGISTER_BODY_COMPRESS_LEVEL = 1  # zlib: topic tables shrink ~5x already at the fastest level
ENCODE_SLICE = 1000  # topics per loop turn (~0.3 ms when kept, ~2 ms when all new)


def topic_entry(config: TopicConfig, broker_permission: int) -> bytes:
    """`config` as one serialized TopicConfigTable element. A read-only broker offers its
    queues read-only."""
    proto = topic_config_to_proto(config)
    if broker_permission != PERM_READ_WRITE:
        proto.perm = broker_permission
    return namesrv_pb2.TopicConfigTable(topic_configs=[proto]).SerializeToString()


def encode_topic_table(configs: list[TopicConfig], broker_permission: int) -> bytes:
    """A TopicConfigTable of `configs`, serialized and zlib-compressed, at once (any
    thread; bench.scale measures the body with it)."""
    return compress_entries([topic_entry(c, broker_permission) for c in configs])


class TopicTableEncoder:
    """Registration bodies from a table, re-serializing only the topics changed since the
    last body (used from the event loop)."""

    def __init__(self) -> None:
        # The last body's topics: name -> config, and name -> its entry (two dicts, not a
        # tuple per topic: 50,000 more objects would lengthen every full GC pass), made
        # with `_permission`.
        self._configs: dict[str, TopicConfig] = {}
        self._entries: dict[str, bytes] = {}
        self._permission = PERM_READ_WRITE

    def entries_steps(self, configs: list[TopicConfig], broker_permission: int
                      ) -> Generator[None, None, list[bytes]]:
        """The table's serialized entries (joined: the table), ENCODE_SLICE topics per
        step."""
        same_permission = broker_permission == self._permission
        old_config, old_entry = self._configs.get, self._entries.get
        kept: dict[str, TopicConfig] = {}
        entries: dict[str, bytes] = {}
        parts: list[bytes] = []
        for start in range(0, len(configs), ENCODE_SLICE):
            if start:
                yield
            for config in configs[start:start + ENCODE_SLICE]:
                name = config.topic_name
                entry = old_entry(name) if same_permission and old_config(name) is config else None
                if entry is None:
                    entry = topic_entry(config, broker_permission)
                kept[name] = config
                entries[name] = entry
                parts.append(entry)
        # The topics gone since are dropped with the old dicts.
        self._configs, self._entries, self._permission = kept, entries, broker_permission
        return parts

    async def encode(self, configs: list[TopicConfig], broker_permission: int) -> bytes:
        """The compressed body of `configs` (a copy of the table: it may change meanwhile)."""
        parts = await run_steps_on_loop(self.entries_steps(configs, broker_permission))
        return await asyncio.to_thread(compress_entries, parts)


def compress_entries(parts: list[bytes]) -> bytes:
    """The body from the entries (any thread: bytes.join of a megabyte and zlib let go of
    the GIL)."""
    return zlib.compress(b"".join(parts), REGISTER_BODY_COMPRESS_LEVEL)
