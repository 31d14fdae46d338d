"""Consume queues: per (topic, queueId), 20-byte entries `offset | size | tags code` (SPEC §2.3)."""

from __future__ import annotations

import functools
import logging
import struct
from pathlib import Path

from store.constants import CQ_STORE_UNIT_SIZE
from store.mapped_file import MappedFile, MappedFileQueue

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">qiq")
# A hole left where entries are missing (the queue restarted past its files): size MAX_INT.
BLANK_SIZE = 0x7FFFFFFF


RECOVER_BLOCK = 4096  # entries whose sizes recovery unpacks at once
# Truncation stops zeroing after this many zero bytes in a row (see MappedFileQueue).
ZERO_RUN_PROOF = 1 << 20


@functools.lru_cache(maxsize=8)
def _sizes_struct(count: int) -> struct.Struct:
    return struct.Struct(">" + "8xi8x" * count)


# Entries packed by one call, at most (the structs for 1..ENTRIES_PER_PACK are cached).
ENTRIES_PER_PACK = 128


@functools.lru_cache(maxsize=ENTRIES_PER_PACK)
def _entries_struct(count: int) -> struct.Struct:
    return struct.Struct(">" + "qiq" * count)


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root: Path, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size - file_size % CQ_STORE_UNIT_SIZE
        self.queue = MappedFileQueue(root / topic / str(queue_id), self.file_size)
        self.queue.zero_run_proof = ZERO_RUN_PROOF
        self.max_physic_offset = 0  # commitlog end (offset + size) of the last entry
        self.min_logic_offset = 0  # byte position of the first valid entry (after expiry)
        self._max_pos = 0  # byte position after the last entry
        self._current: MappedFile | None = None

    # -- loading and recovery --------------------------------------------------------------
    def load(self) -> None:
        self.queue.load()

    def recover(self) -> None:
        """Finds the last valid entry: entries stop at the first one of size 0 (all zeros,
        or torn by a crash)."""
        files = self.queue.files
        if not files:
            return
        start = max(0, len(files) - 3)
        end_pos = files[start].file_from_offset
        for mf in files[start:]:
            pos = 0
            while pos < mf.file_size:  # sizes a block at a time, searched in C
                count = min(RECOVER_BLOCK, (mf.file_size - pos) // CQ_STORE_UNIT_SIZE)
                sizes = _sizes_struct(count).unpack_from(mf.mm, pos)
                try:
                    pos += sizes.index(0) * CQ_STORE_UNIT_SIZE
                    break
                except ValueError:
                    pos += count * CQ_STORE_UNIT_SIZE
            end_pos = mf.file_from_offset + pos
            if pos < mf.file_size:
                break
        self.queue.truncate_dirty_files(end_pos)
        self._set_end(end_pos)
        for index in range(end_pos // CQ_STORE_UNIT_SIZE - 1, -1, -1):
            entry = self.get_entry(index)
            if entry is None:
                break
            if entry[1] != BLANK_SIZE:
                self.max_physic_offset = entry[0] + entry[1]
                break
        first = self.queue.first_file()
        if first is not None and self.min_logic_offset < first.file_from_offset:
            self.min_logic_offset = first.file_from_offset

    def _set_end(self, pos: int) -> None:
        self._max_pos = pos
        last = self.queue.last_file()
        if last is not None:
            last.set_positions(pos - last.file_from_offset)
        self._current = last if last is not None and not last.is_full else None

    def truncate_dirty(self, phy_offset: int) -> None:
        """Drops entries pointing at or past `phy_offset` (the commitlog was cut there)."""
        files = self.queue.files
        if not files:
            return
        cut = self._max_pos
        # Entries are in commitlog order: walk back from the end while they point too far.
        while cut > files[0].file_from_offset:
            mf = self.queue.find_by_offset(cut - CQ_STORE_UNIT_SIZE)
            if mf is None:
                break
            entry_pos = cut - CQ_STORE_UNIT_SIZE - mf.file_from_offset
            offset, size, _ = ENTRY.unpack_from(mf.mm, entry_pos)
            if size != BLANK_SIZE and offset + size <= phy_offset:
                break
            cut -= CQ_STORE_UNIT_SIZE
        if cut == self._max_pos:
            return
        self.queue.truncate_dirty_files(cut)
        self._set_end(cut)
        self.max_physic_offset = 0
        if cut > 0:
            last = self.get_entry(cut // CQ_STORE_UNIT_SIZE - 1)
            if last is not None:
                self.max_physic_offset = last[0] + last[1]

    # -- writing ---------------------------------------------------------------------------
    def put_entries(self, first_index: int, flat: list[int], start: int = 0) -> None:
        """Writes entries first_index, first_index + 1, ... from `flat[start:]`, which holds
        (commitlog offset, size, tags code) of each in a row: one pack and one copy per file
        instead of one per entry. Entries already present are skipped (re-dispatch)."""
        n = (len(flat) - start) // 3
        pos = first_index * CQ_STORE_UNIT_SIZE
        if pos < self._max_pos:
            skip = min(n, (self._max_pos - pos) // CQ_STORE_UNIT_SIZE)
            n -= skip
            start += 3 * skip
            pos += skip * CQ_STORE_UNIT_SIZE
        if n <= 0:
            return
        if pos > self._max_pos:
            self._fill_gap(pos)
        while n:
            mf = self._current
            if mf is None or pos >= mf.file_tail_offset:
                mf = self.queue.last_file_for_append(pos)
                self._current = mf
            rel = pos - mf.file_from_offset
            k = min(n, (mf.file_size - rel) // CQ_STORE_UNIT_SIZE, ENTRIES_PER_PACK)
            size = k * CQ_STORE_UNIT_SIZE
            end = start + 3 * k
            # Packed apart, then copied: pack_into writes field by field, and a process killed
            # in between would leave a torn entry (an offset without its size) behind.
            mf.mm[rel : rel + size] = _entries_struct(k).pack(*flat[start:end])
            mf.wrote_position = mf.committed_position = rel + size
            pos += size
            self._max_pos = pos
            self.max_physic_offset = flat[end - 3] + flat[end - 2]
            if mf.wrote_position >= mf.file_size:
                self._current = None
            n -= k
            start = end

    def _fill_gap(self, pos: int) -> None:
        if not self.queue.files:
            # A queue whose files are all gone (expired) starts again mid-way.
            start = pos - pos % self.file_size
            self.queue.create_file(start)
            self._max_pos = start
            self.min_logic_offset = pos
            self._current = None
        if pos > self._max_pos:
            log.warning("%s-%d: consume queue gap %d..%d filled with blanks", self.topic,
                        self.queue_id, self._max_pos // CQ_STORE_UNIT_SIZE,
                        pos // CQ_STORE_UNIT_SIZE)
            while self._max_pos < pos:
                p = self._max_pos
                mf = self.queue.last_file_for_append(p)
                ENTRY.pack_into(mf.mm, p - mf.file_from_offset, 0, BLANK_SIZE, 0)
                mf.set_positions(p + CQ_STORE_UNIT_SIZE - mf.file_from_offset)
                self._max_pos = p + CQ_STORE_UNIT_SIZE
            self._current = None

    # -- reading ---------------------------------------------------------------------------
    @property
    def max_offset_in_queue(self) -> int:
        return self._max_pos // CQ_STORE_UNIT_SIZE

    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_entry(self, index: int) -> tuple[int, int, int] | None:
        pos = index * CQ_STORE_UNIT_SIZE
        if pos < self.min_logic_offset or pos >= self._max_pos:
            return None
        mf = self.queue.find_by_offset(pos)
        if mf is None:
            return None
        return ENTRY.unpack_from(mf.mm, pos - mf.file_from_offset)

    def read_entries(self, index: int, max_count: int) -> bytes:
        """Raw entries from `index` on, at most `max_count`, never crossing a file."""
        pos = index * CQ_STORE_UNIT_SIZE
        if pos < self.min_logic_offset or pos >= self._max_pos:
            return b""
        mf = self.queue.find_by_offset(pos)
        if mf is None:
            return b""
        start = pos - mf.file_from_offset
        end = min(start + max_count * CQ_STORE_UNIT_SIZE, self._max_pos - mf.file_from_offset,
                  mf.file_size)
        try:
            return mf.mm[start:end]
        except ValueError:
            return b""

    # -- flushing and expiry ---------------------------------------------------------------
    def flush(self) -> None:
        for mf in self.queue.files[-2:]:
            if mf.committed_position > mf.flushed_position:
                mf.mm.flush()
                mf.flushed_position = mf.committed_position

    def delete_expired(self, min_commitlog_offset: int) -> int:
        """Deletes whole files whose last entry points below the commitlog's min offset."""

        def expired(mf: MappedFile) -> bool:
            offset, size, _ = ENTRY.unpack_from(mf.mm, mf.file_size - CQ_STORE_UNIT_SIZE)
            return size != 0 and offset + size <= min_commitlog_offset

        deleted = self.queue.delete_first_files(expired, max_count=1 << 30)
        first = self.queue.first_file()
        if first is not None:
            self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset)
        self.correct_min_offset(min_commitlog_offset)
        return deleted

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Moves the min offset past entries whose records were deleted."""
        index = self.min_offset_in_queue
        while index < self.max_offset_in_queue:
            entry = self.get_entry(index)
            if entry is None or (entry[1] != BLANK_SIZE and entry[0] >= min_commitlog_offset):
                break
            index += 1
        self.min_logic_offset = index * CQ_STORE_UNIT_SIZE

    def destroy(self) -> None:
        self.queue.destroy()
        self._max_pos = self.min_logic_offset = self.max_physic_offset = 0
        self._current = None

    def close(self) -> None:
        self.flush()
        self.queue.close()
