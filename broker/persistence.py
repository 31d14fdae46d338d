"""Atomic JSON config files with a backup (RocketMQ's ConfigManager, SPEC §4).

A write goes to `NAME.tmp`, is fsynced, the current file is kept as `NAME.bak`, and the
temp file is renamed over `NAME`; the directory is fsynced last. At every moment `NAME`
is either the old or the new content, never a torn mix. A load that finds `NAME` missing
or corrupt falls back to `NAME.bak`; when both exist and are unreadable it refuses to go
on (ConfigFileCorrupt) rather than start with nothing and lose offsets or topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class ConfigFileCorrupt(ValueError):
    """Neither a config file nor its backup can be read."""


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def _temp_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: Path, data: Any) -> None:
    """Writes `data` as JSON to `path` atomically, keeping the previous file as `.bak`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2, sort_keys=True)
    tmp = _temp_path(path)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    if path.exists():
        # A hard link keeps `path` in place while the backup is replaced.
        bak, bak_tmp = backup_path(path), _temp_path(backup_path(path))
        with contextlib.suppress(FileNotFoundError):
            bak_tmp.unlink()
        try:
            os.link(path, bak_tmp)
        except OSError:  # a file system without hard links
            bak_tmp.write_bytes(path.read_bytes())
        os.replace(bak_tmp, bak)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def read_json_with_backup(path: Path, parse: Callable[[Any], T]) -> T | None:
    """`parse` of the JSON in `path`, else in its `.bak`, else None when neither exists.

    `parse` raises ValueError/KeyError/TypeError to call well-formed JSON of the wrong
    shape corrupt too. Raises ConfigFileCorrupt when a file exists but no copy is readable.
    """
    problems: list[str] = []
    for candidate in (path, backup_path(path)):
        if not candidate.exists():
            continue
        try:
            parsed = parse(_read(candidate))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError,
                AttributeError) as e:
            problems.append(f"{candidate}: {e!r}")
            log.error("config file %s is unreadable: %r", candidate, e)
            continue
        if candidate != path:
            log.warning("loaded %s from its backup %s", path.name, candidate)
        return parsed
    if problems:
        raise ConfigFileCorrupt("; ".join(problems))
    return None


class JsonConfigFile:
    """One config file written from worker threads: writes are serialised, and a snapshot
    older than the one already written is dropped (threads may run out of order)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._written_seq = 0

    def write(self, seq: int, data: Any) -> bool:
        with self._lock:
            if seq <= self._written_seq:
                return False
            write_json_atomic(self.path, data)
            self._written_seq = seq
            return True


class ConfigManager(Generic[T]):
    """A table kept in memory on the event loop and persisted as one JSON file.

    Subclasses give `encode` (table -> JSON data, on the loop), `parse` (JSON data ->
    table, pure; raises on a bad shape) and `apply` (install a parsed table), and set
    `dirty` when the table changed.
    """

    def __init__(self, path: Path) -> None:
        self.file = JsonConfigFile(path)
        self._seq = 0
        self.dirty = False

    @property
    def path(self) -> Path:
        return self.file.path

    def encode(self) -> Any:
        raise NotImplementedError

    def parse(self, data: Any) -> T:
        raise NotImplementedError

    def apply(self, parsed: T) -> None:
        raise NotImplementedError

    def load(self) -> bool:
        """True when a file (or its backup) was loaded; ConfigFileCorrupt when unreadable."""
        parsed = read_json_with_backup(self.path, self.parse)
        if parsed is None:
            return False
        self.apply(parsed)
        return True

    def snapshot(self) -> tuple[int, Any]:
        self._seq += 1
        data = self.encode()
        self.dirty = False
        return self._seq, data

    def persist(self) -> None:
        """Writes now, in this thread (start-up, shutdown, tests)."""
        self.file.write(*self.snapshot())

    async def persist_async(self) -> None:
        """Snapshots on the loop, writes in a worker thread."""
        seq, data = self.snapshot()
        await asyncio.to_thread(self.file.write, seq, data)

    async def persist_if_dirty(self) -> bool:
        """The periodic persistence: writes only when the table changed since last time."""
        if not self.dirty:
            return False
        try:
            await self.persist_async()
        except BaseException:
            self.dirty = True  # try again next period
            raise
        return True
