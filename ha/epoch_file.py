"""The epoch file of a broker in controller mode (RocketMQ 5's EpochFileCache and
CheckpointFile): which master epoch wrote which part of the commitlog.

Each entry is `<epoch, startOffset>`; an entry ends where the next one starts, the last at
the commitlog's max offset. A broker made master appends `<its new epoch, its max offset>`.
A slave linking to a master finds the newest epoch both hold with the same start and cuts its
commitlog at the end of it (`find_consistent_point`).

File text: line 1 the entry count, line 2 the CRC32 of the entry lines, then one
`epoch-startOffset` per line. Each write goes to a temporary file, is synced and renamed
over the previous one, whose copy stays as `.bak`; a file whose count or CRC does not match
is read from `.bak` instead.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import zlib
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)


class EpochFileError(ValueError):
    """An append that would not keep epochs and start offsets strictly increasing, or a
    file neither copy of which reads."""


@dataclasses.dataclass(frozen=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


def encode(entries: Sequence[EpochEntry]) -> str:
    lines = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)
    return f"{len(entries)}\n{zlib.crc32(lines.encode())}\n{lines}"


def decode(text: str) -> list[EpochEntry]:
    """The entries of a file's text; EpochFileError when its count or CRC do not match."""
    head, _, rest = text.partition("\n")
    crc_text, _, lines = rest.partition("\n")
    try:
        count, crc = int(head), int(crc_text)
    except ValueError:
        raise EpochFileError("no count and CRC lines") from None
    if zlib.crc32(lines.encode()) != crc:
        raise EpochFileError("CRC mismatch")
    entries = []
    for line in lines.splitlines():
        epoch, sep, start = line.partition("-")
        try:
            if not sep:
                raise ValueError(line)
            entries.append(EpochEntry(int(epoch), int(start)))
        except ValueError:
            raise EpochFileError(f"bad entry {line!r}") from None
    if len(entries) != count:
        raise EpochFileError(f"{len(entries)} entries, the count says {count}")
    return entries


class EpochFile:
    """The entries, kept in memory and written through at each change."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.backup = self.path.with_name(self.path.name + ".bak")
        self.entries: list[EpochEntry] = []

    def load(self) -> list[EpochEntry]:
        """Reads the file, else its backup; no file at all: no entries."""
        for candidate in (self.path, self.backup):
            try:
                self.entries = decode(candidate.read_text())
                if candidate is self.backup:
                    log.warning("epoch file %s unreadable: read its backup", self.path)
                return self.entries
            except FileNotFoundError:
                continue
            except (EpochFileError, UnicodeDecodeError) as e:
                log.warning("epoch file %s: %s", candidate, e)
        if self.path.exists() or self.backup.exists():
            raise EpochFileError(f"neither {self.path} nor its backup can be read")
        self.entries = []
        return self.entries

    @property
    def last(self) -> EpochEntry | None:
        return self.entries[-1] if self.entries else None

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def append(self, epoch: int, start_offset: int) -> None:
        """A new master epoch writes from `start_offset` on. The same last entry again is a
        no-op (a retried promotion)."""
        last = self.last
        if last is not None:
            if last == EpochEntry(epoch, start_offset):
                return
            if epoch <= last.epoch or start_offset < last.start_offset:
                raise EpochFileError(f"entry <{epoch}, {start_offset}> does not follow "
                                     f"<{last.epoch}, {last.start_offset}>")
            if start_offset == last.start_offset:  # the last epoch wrote nothing
                self.entries = self.entries[:-1]
        self._write([*self.entries, EpochEntry(epoch, start_offset)])

    def truncate_suffix(self, offset: int) -> None:
        """The commitlog is cut at `offset`: entries starting at or past it go (an entry
        starting exactly at the cut stays when it is the first)."""
        kept = [e for e in self.entries if e.start_offset < offset or e is self.entries[0]]
        if kept != self.entries:
            self._write(kept)

    def _write(self, entries: list[EpochEntry]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = encode(entries).encode()
        for target in (self.backup, self.path):
            with tmp.open("wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        self.entries = entries


def end_offsets(entries: Sequence[EpochEntry], max_offset: int) -> list[int]:
    """Where each entry ends: the next one's start, the last at `max_offset`."""
    return [*(e.start_offset for e in entries[1:]), max_offset] if entries else []


def find_consistent_point(local: Sequence[EpochEntry], local_max: int,
                          remote: Sequence[EpochEntry], remote_max: int) -> int:
    """Where a slave (`local`) must cut its commitlog to follow a master (`remote`): the end
    of the newest epoch both hold with the same start offset, the smaller of the two ends.
    An empty local history starts from its own max offset (nothing to compare: no cut
    beyond it); -1 when there is no common epoch."""
    if not local:
        return local_max
    remote_by_epoch = {e.epoch: (e, end) for e, end in zip(remote, end_offsets(remote,
                                                                               remote_max),
                                                          strict=True)}
    for entry, end in reversed(list(zip(local, end_offsets(local, local_max), strict=True))):
        theirs = remote_by_epoch.get(entry.epoch)
        if theirs is not None and theirs[0].start_offset == entry.start_offset:
            return min(end, theirs[1])
    return -1
