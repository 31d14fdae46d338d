"""Consume queues: per (topic, queueId), 20-byte entries `offset | size | tags code` (SPEC §2.3).

A queue's files are read and written with pread / pwrite through the store's bounded fd cache
(store/cq_files.py): a queue holds no fd and no mapping, so a broker holds as many queues as
its disk does. Recovery reads only the allocated start of each file (up to its first hole).
"""

from __future__ import annotations

import functools
import logging
import os
import struct

from store.constants import CQ_STORE_UNIT_SIZE
from store.cq_files import FileHandles, data_end, sync_file, zero_tail
from store.mapped_file import cut_files, file_offsets, find_file, offset_file_name

log = logging.getLogger(__name__)

ENTRY = struct.Struct(">qiq")
# A hole left where entries are missing (the queue restarted past its files): size MAX_INT.
BLANK_SIZE = 0x7FFFFFFF
BLANK_ENTRY = ENTRY.pack(0, BLANK_SIZE, 0)


RECOVER_BLOCK = 4096  # entries whose sizes recovery unpacks at once
# Truncation stops zeroing after this many zero bytes in a row (holes count: see zero_tail).
ZERO_RUN_PROOF = 1 << 20


@functools.lru_cache(maxsize=8)
def _sizes_struct(count: int) -> struct.Struct:
    return struct.Struct(">" + "8xi8x" * count)


# Entries packed by one call, at most (the structs for 1..ENTRIES_PER_PACK are cached).
ENTRIES_PER_PACK = 128


@functools.lru_cache(maxsize=ENTRIES_PER_PACK)
def _entries_struct(count: int) -> struct.Struct:
    return struct.Struct(">" + "qiq" * count)


class CQFile:
    """One consume-queue file: its path and positions (no fd, no mapping)."""

    __slots__ = ("path", "file_from_offset", "file_size", "wrote_position",
                 "flushed_position")

    def __init__(self, path: str, file_from_offset: int, file_size: int) -> None:
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self.wrote_position = 0
        self.flushed_position = 0

    @property
    def file_tail_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def set_positions(self, pos: int) -> None:
        self.wrote_position = self.flushed_position = pos

    def __repr__(self) -> str:
        return f"CQFile({self.path}, wrote={self.wrote_position})"


def _scan_end(fd: int, file_size: int, start: int = 0) -> tuple[int, int]:
    """(position of the first entry of size 0 from `start` on, end of the zeros known to
    follow it) in one consume-queue file: only its allocated bytes from `start` are read."""
    hole = data_end(fd, file_size, start)
    pos = start
    unit = CQ_STORE_UNIT_SIZE
    while pos < file_size and pos < hole:
        count = min(RECOVER_BLOCK, -(-(hole - pos) // unit), (file_size - pos) // unit)
        data = os.pread(fd, count * unit, pos)
        count = len(data) // unit
        if count == 0:
            break
        sizes = _sizes_struct(count).unpack_from(data)
        try:
            i = sizes.index(0)
        except ValueError:
            pos += count * unit
            continue
        end = pos + i * unit
        rest = data[i * unit:]
        return end, (pos + len(data) if rest == bytes(len(rest)) else end)
    return pos, pos  # in a hole (zeros), or the end of the file


class ConsumeQueue:
    __slots__ = ("topic", "queue_id", "file_size", "dir", "handles", "files",
                 "max_physic_offset", "min_logic_offset", "_max_pos", "_tail_real",
                 "failed", "retry", "pending")

    def __init__(self, topic: str, queue_id: int, root: str | os.PathLike, file_size: int,
                 handles: FileHandles | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size - file_size % CQ_STORE_UNIT_SIZE
        self.dir = f"{os.fspath(root)}/{topic}/{queue_id}"
        self.handles = handles if handles is not None else FileHandles(4)
        self.files: list[CQFile] = []
        self.max_physic_offset = 0  # commitlog end (offset + size) of the last entry
        self.min_logic_offset = 0  # byte position of the first valid entry (after expiry)
        self._max_pos = 0  # byte position after the last entry
        self._tail_real = True  # the last entry (if any) is a real one, not a blank
        # Why writing this queue fails ("" while it works), whether retrying can help, and
        # the entries (runs as put_entries takes them) waiting for the retry.
        self.failed = ""
        self.retry = True
        self.pending: list[list[int]] = []

    # -- files -----------------------------------------------------------------------------
    def _file_path(self, offset: int) -> str:
        return f"{self.dir}/{offset_file_name(offset)}"

    def first_file(self) -> CQFile | None:
        return self.files[0] if self.files else None

    def last_file(self) -> CQFile | None:
        return self.files[-1] if self.files else None

    def find_by_offset(self, offset: int) -> CQFile | None:
        return find_file(self.files, self.file_size, offset)

    def _create_file(self, offset: int) -> CQFile:
        os.makedirs(self.dir, exist_ok=True)
        mf = CQFile(self._file_path(offset), offset, self.file_size)
        self.handles.create(mf.path, self.file_size)
        self.files.append(mf)
        return mf

    def _file_for_append(self, pos: int) -> CQFile:
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full:
            return last
        return self._create_file(last.file_tail_offset if last is not None
                                 else pos - pos % self.file_size)

    def _delete_file(self, mf: CQFile) -> None:
        self.handles.forget(mf.path)
        try:
            os.unlink(mf.path)
        except FileNotFoundError:
            pass

    def _cut(self, offset: int, zeroed: bool = False) -> None:
        """Drops everything at or after `offset`: later files are deleted, one is cut (its
        tail zeroed unless `zeroed`)."""
        def cut(mf: CQFile, pos: int) -> None:
            if not zeroed:
                fd = os.open(mf.path, os.O_RDWR)
                try:
                    zero_tail(fd, pos, self.file_size, ZERO_RUN_PROOF)
                finally:
                    os.close(fd)
            mf.set_positions(pos)

        self.files = cut_files(self.files, offset, cut, self._delete_file)

    # -- loading and recovery --------------------------------------------------------------
    def load(self, names: list[str] | None = None) -> None:
        """Takes the queue's files (`names`: its directory's listing, when the caller has
        it); positions are set to full, recovery fixes the last ones."""
        if names is None:
            names = os.listdir(self.dir) if os.path.isdir(self.dir) else []
        for offset in file_offsets(self.dir, names, self.file_size):
            mf = CQFile(self._file_path(offset), offset, self.file_size)
            mf.set_positions(self.file_size)
            self.files.append(mf)

    def restore(self, first: int, count: int, end: int, min_logic: int, max_physic: int,
                tail_real: bool) -> None:
        """Takes the files and positions recorded in a snapshot (store/cq_snapshot.py):
        `count` files from offset `first` on, entries up to byte position `end`."""
        size = self.file_size
        files = []
        for offset in range(first, first + count * size, size):
            mf = CQFile(self._file_path(offset), offset, size)
            mf.wrote_position = mf.flushed_position = size
            files.append(mf)
        self.files = files
        self._set_end(end)
        self.min_logic_offset = min_logic
        self.max_physic_offset = max_physic
        self._tail_real = tail_real

    def reload(self) -> tuple[int, int, int] | None:
        """Forgets the files and positions taken from a snapshot (the min logic offset aside)
        and takes them from disk again (load, then recover)."""
        self.files = []
        self._max_pos = self.max_physic_offset = 0
        self._tail_real = True
        self.load()
        return self.recover()

    def recover(self) -> tuple[int, int, int] | None:
        """Finds the last valid entry: entries stop at the first one of size 0 (all zeros,
        or torn by a crash). Reads the last files' allocated bytes only. Returns the last
        entry when it was read on the way (for the check after a crash), or None."""
        files = self.files
        if not files:
            return None
        start = max(0, len(files) - 3)
        end_pos = files[start].file_from_offset
        tail = None  # the last entry, when it is in the file where the entries end
        for mf in files[start:]:
            # A last file created and killed before it was sized (entries are written only
            # after) is empty.
            end, last = self._scan_file(mf, 0, empty_ok=mf is files[-1])
            end_pos = mf.file_from_offset + end
            if end < self.file_size:
                tail = last
                break
        self._cut(end_pos, zeroed=True)
        self._set_end(end_pos)
        self._find_last_real(end_pos, tail)
        first = self.first_file()
        if first is not None and self.min_logic_offset < first.file_from_offset:
            self.min_logic_offset = first.file_from_offset
        return tail

    def _find_last_real(self, end_pos: int, tail: tuple[int, int, int] | None) -> None:
        """max_physic_offset and _tail_real from the entries before `end_pos` (`tail`: the
        last of them, when read already)."""
        self._tail_real = True
        last = tail
        for index in range(end_pos // CQ_STORE_UNIT_SIZE - 1, -1, -1):
            entry = last if last is not None else self.get_entry(index)
            last = None
            if entry is None:
                break
            if entry[1] != BLANK_SIZE:
                self.max_physic_offset = entry[0] + entry[1]
                break
            self._tail_real = False

    def recover_past_snapshot(self) -> tuple[int, int, int] | None:
        """After a crash, for a queue restored from a snapshot that records after it went to:
        finds where its entries end reading only past the recorded end (in its file, and in
        files made after the snapshot), and zeroes stale bytes after that, as recover does
        for the whole queue. Returns the last entry when one was read past the recorded end."""
        size = self.file_size
        pos = self._max_pos
        tail = None
        while True:
            mf = self.find_by_offset(pos) if self.files else None
            if mf is None:  # at the end of the last file: was the next one made after?
                start = self.files[-1].file_tail_offset if self.files else pos - pos % size
                mf = CQFile(self._file_path(start), start, size)
                if not os.path.exists(mf.path):
                    break
                self.files.append(mf)
            end, last = self._scan_file(mf, pos - mf.file_from_offset, empty_ok=True)
            tail = last or tail
            pos = mf.file_from_offset + end
            if end < size:
                break
        # A file after the one where the entries end holds nothing valid (stale, or empty).
        stale = (self.files[-1].file_tail_offset if self.files else pos)
        while os.path.exists(self._file_path(stale)):
            self.handles.forget(self._file_path(stale))
            os.unlink(self._file_path(stale))
            stale += size
        self._cut(pos, zeroed=True)
        if pos != self._max_pos:
            self._set_end(pos)
            self._find_last_real(pos, tail)
        return tail

    def _scan_file(self, mf: CQFile, start: int, empty_ok: bool
                   ) -> tuple[int, tuple[int, int, int] | None]:
        """(where the entries of `mf` end, from byte `start` on; the last entry before that
        end when it lies past `start`), zeroing stale bytes after the end. An empty file
        (`empty_ok`: made and killed before it was sized) is sized first."""
        size = self.file_size
        fd = os.open(mf.path, os.O_RDWR)
        try:
            have = os.fstat(fd).st_size
            if have == 0 and empty_ok:
                os.ftruncate(fd, size)
            elif have != size:
                raise ValueError(f"{mf.path}: size {have}, expected {size}")
            end, known_zero_to = _scan_end(fd, size, start)
            last = (ENTRY.unpack(os.pread(fd, CQ_STORE_UNIT_SIZE, end - CQ_STORE_UNIT_SIZE))
                    if end > start else None)
            if end < size:
                zero_tail(fd, end, size, ZERO_RUN_PROOF, known_zero_to)
            return end, last
        finally:
            os.close(fd)

    def _set_end(self, pos: int) -> None:
        self._max_pos = pos
        last = self.last_file()
        if last is not None:
            last.set_positions(pos - last.file_from_offset)

    def truncate_dirty(self, phy_offset: int) -> None:
        """Drops entries pointing at or past `phy_offset` (the commitlog was cut there)."""
        files = self.files
        if not files or (self._tail_real and self.max_physic_offset <= phy_offset):
            return  # the usual case at every start: no entry to read
        cut = self._max_pos
        # Entries are in commitlog order: walk back from the end while they point too far.
        while cut > files[0].file_from_offset:
            entry = self._read_entry(cut - CQ_STORE_UNIT_SIZE)
            if entry is None:
                break
            offset, size, _ = entry
            if size != BLANK_SIZE and offset + size <= phy_offset:
                break
            cut -= CQ_STORE_UNIT_SIZE
        if cut == self._max_pos:
            return
        self._cut(cut)
        self._set_end(cut)
        self._tail_real = True
        self.max_physic_offset = 0
        if cut > 0:
            last = self.get_entry(cut // CQ_STORE_UNIT_SIZE - 1)
            if last is not None:
                self.max_physic_offset = last[0] + last[1]

    # -- writing ---------------------------------------------------------------------------
    def put_entries(self, first_index: int, flat: list[int], start: int = 0) -> None:
        """Writes entries first_index, first_index + 1, ... from `flat[start:]`, which holds
        (commitlog offset, size, tags code) of each in a row: one pwrite per file instead of
        one per entry. Entries already present are skipped (re-dispatch)."""
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
            mf = self._file_for_append(pos)
            rel = pos - mf.file_from_offset
            k_file = min(n, (mf.file_size - rel) // CQ_STORE_UNIT_SIZE)
            parts = []
            end = start
            left = k_file
            while left:
                k = min(left, ENTRIES_PER_PACK)
                parts.append(_entries_struct(k).pack(*flat[end : end + 3 * k]))
                end += 3 * k
                left -= k
            # One pwrite: a process killed in it leaves whole entries or a torn last one,
            # which recovery after a crash checks (recovery.py).
            self.handles.pwrite(mf.path, parts[0] if len(parts) == 1 else b"".join(parts),
                                rel)
            size = k_file * CQ_STORE_UNIT_SIZE
            mf.wrote_position = rel + size
            pos += size
            self._max_pos = pos
            self._tail_real = True
            self.max_physic_offset = flat[end - 3] + flat[end - 2]
            n -= k_file
            start = end

    def _fill_gap(self, pos: int) -> None:
        if not self.files:
            # A queue whose files are all gone (expired) starts again mid-way.
            start = pos - pos % self.file_size
            self._create_file(start)
            self._max_pos = start
            self.min_logic_offset = pos
        if pos > self._max_pos:
            log.warning("%s-%d: consume queue gap %d..%d filled with blanks", self.topic,
                        self.queue_id, self._max_pos // CQ_STORE_UNIT_SIZE,
                        pos // CQ_STORE_UNIT_SIZE)
            while self._max_pos < pos:
                p = self._max_pos
                mf = self._file_for_append(p)
                rel = p - mf.file_from_offset
                count = min(pos - p, mf.file_size - rel) // CQ_STORE_UNIT_SIZE
                self.handles.pwrite(mf.path, BLANK_ENTRY * count, rel)
                mf.wrote_position = rel + count * CQ_STORE_UNIT_SIZE
                self._max_pos = p + count * CQ_STORE_UNIT_SIZE
            self._tail_real = False

    # -- reading ---------------------------------------------------------------------------
    @property
    def max_offset_in_queue(self) -> int:
        return self._max_pos // CQ_STORE_UNIT_SIZE

    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def _read_entry(self, pos: int) -> tuple[int, int, int] | None:
        mf = self.find_by_offset(pos)
        if mf is None:
            return None
        try:
            raw = self.handles.pread(mf.path, CQ_STORE_UNIT_SIZE, pos - mf.file_from_offset)
        except FileNotFoundError:  # deleted (expired) meanwhile
            return None
        return ENTRY.unpack(raw) if len(raw) == CQ_STORE_UNIT_SIZE else None

    def get_entry(self, index: int) -> tuple[int, int, int] | None:
        pos = index * CQ_STORE_UNIT_SIZE
        if pos < self.min_logic_offset or pos >= self._max_pos:
            return None
        return self._read_entry(pos)

    def read_entries(self, index: int, max_count: int) -> bytes:
        """Raw entries from `index` on, at most `max_count`, never crossing a file."""
        pos = index * CQ_STORE_UNIT_SIZE
        if pos < self.min_logic_offset or pos >= self._max_pos:
            return b""
        mf = self.find_by_offset(pos)
        if mf is None:
            return b""
        start = pos - mf.file_from_offset
        end = min(start + max_count * CQ_STORE_UNIT_SIZE, self._max_pos - mf.file_from_offset,
                  mf.file_size)
        try:
            return self.handles.pread(mf.path, end - start, start)
        except FileNotFoundError:
            return b""

    # -- flushing and expiry ---------------------------------------------------------------
    def flush(self) -> None:
        for mf in self.files[-2:]:
            wrote = mf.wrote_position
            if wrote > mf.flushed_position:
                try:
                    sync_file(mf.path)
                except FileNotFoundError:
                    continue
                mf.flushed_position = wrote

    def delete_expired(self, min_commitlog_offset: int) -> int:
        """Deletes whole files whose last entry points below the commitlog's min offset."""
        deleted = 0
        while len(self.files) > 1:
            mf = self.files[0]
            try:
                raw = self.handles.pread(mf.path, CQ_STORE_UNIT_SIZE,
                                         self.file_size - CQ_STORE_UNIT_SIZE)
            except FileNotFoundError:
                raw = b""
            if len(raw) == CQ_STORE_UNIT_SIZE:
                offset, size, _ = ENTRY.unpack(raw)
                if size == 0 or offset + size > min_commitlog_offset:
                    break
            self.files.pop(0)
            self._delete_file(mf)
            deleted += 1
        first = self.first_file()
        if first is not None:
            self.min_logic_offset = max(self.min_logic_offset, first.file_from_offset)
        self.correct_min_offset(min_commitlog_offset)
        return deleted

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Moves the min offset past entries whose records were deleted (read a block at a
        time: one pread each, not one per entry)."""
        index = self.min_offset_in_queue
        while index < self.max_offset_in_queue:
            block = self.read_entries(index, RECOVER_BLOCK)
            whole = len(block) - len(block) % CQ_STORE_UNIT_SIZE
            if not whole:
                break
            for offset, size, _ in ENTRY.iter_unpack(block[:whole]):
                if size != BLANK_SIZE and offset >= min_commitlog_offset:
                    self.min_logic_offset = index * CQ_STORE_UNIT_SIZE
                    return
                index += 1
        self.min_logic_offset = index * CQ_STORE_UNIT_SIZE

    def destroy(self) -> None:
        for mf in self.files:
            self._delete_file(mf)
        self.files = []
        self._max_pos = self.min_logic_offset = self.max_physic_offset = 0
        self._tail_real = True

    def close(self) -> None:
        self.flush()
        for mf in self.files:
            self.handles.forget(mf.path)
