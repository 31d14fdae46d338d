"""Hash index files (SPEC §2.4): RocketMQ's IndexFile and IndexService.

One file per `index/{yyyyMMddHHmmssSSS}` (creation time, local time), created at full size and
mapped with mmap. Big-endian layout:

    header   40 bytes: beginTimestamp (8) endTimestamp (8) beginPhyOffset (8) endPhyOffset (8)
             hashSlotCount (4, slots in use) indexCount (4, next entry number; starts at 1)
    slots    hash_slot_num x 4 bytes: number of the newest entry of the slot, 0 = empty
    entries  index_num x 20 bytes: keyHash (4) phyOffset (8) timeDiff (4, whole seconds after
             beginTimestamp) prevIndex (4, the previous entry of the same slot, 0 = end of chain)

Entry 0 is never used, so 0 means "no entry". A file is full when indexCount reaches
index_num; the next key goes to a new file.

Disk space: a write through the mapping into a page the file system cannot back is a SIGBUS
on a full disk. A new file gets its header and slots allocated (posix_fallocate) at
creation and its entries ALLOCATE_ENTRIES at a time ahead of the next one, so the mapping is
only written where space is allocated, and a full disk is an ENOSPC from the allocation: the
keys not indexed yet are held and indexed by the next call, once there is space.

Write order, so that a reader in another thread never follows a half-written entry: the entry,
then its slot, then indexCount; the header is rewritten once per batch of messages, after their
keys. After a process crash the newest file may hold entries past its header's indexCount (the
messages being indexed when it died): `load` unlinks them from their chains and zeroes them,
and since the header's endPhyOffset predates them, the dispatcher indexes them again.

Times in entries have one-second resolution, so a query matches an entry when its second
[beginTimestamp + timeDiff*1000, +999] overlaps the asked range: the result may hold a message
stored up to 999 ms outside the range, never misses one inside it. Like equal hashes, the caller
settles that when it reads the message.
"""

from __future__ import annotations

import logging
import mmap
import os
import re
import struct
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

from crc32c import crc32c as _crc32c

from common import native
from store.cq_files import data_end

log = logging.getLogger(__name__)

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
MAX_HASH_SLOT_NUM = 5_000_000
MAX_INDEX_NUM = 20_000_000
INDEX_DIR_NAME = "index"

IndexEntry = tuple[int, int, int, int]  # key_hash, phy_offset, time_diff, prev

INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_ENTRY = struct.Struct(">iqiI")
_SLOT = struct.Struct(">I")
_pack_header = INDEX_HEADER.pack_into
_pack_entry = INDEX_ENTRY.pack_into
_unpack_entry = INDEX_ENTRY.unpack_from
_pack_slot = _SLOT.pack_into
_unpack_slot = _SLOT.unpack_from

_INT_MAX = 0x7FFFFFFF
INDEX_FILE_NAME = re.compile(r"^\d{17}$")
_TMP_SUFFIX = ".tmp"
_ZERO_ENTRY = bytes(INDEX_SIZE)
_ENTRIES_PER_READ = 4096
# Entries allocated at a time (1.25 MiB), ahead of the one written next.
ALLOCATE_ENTRIES = 65_536
# Messages whose keys wait for space at most; past it more are dropped (logged).
MAX_HELD_ITEMS = 1_000_000


def key_hash(topic: str, key: str) -> int:
    """keyHash of `topic#key`: CRC32C of its UTF-8 bytes, masked to 31 bits.

    A deliberate change from RocketMQ, which uses Java's String.hashCode(): crc32c runs in C
    (one call instead of a Python loop over the characters) and spreads keys well. Files written
    by a Java broker therefore cannot be read with this module.
    """
    return _crc32c(f"{topic}#{key}".encode()) & _INT_MAX


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def index_file_name(time_ms: int) -> str:
    """yyyyMMddHHmmssSSS in local time, as RocketMQ's UtilAll.timeMillisToHumanString."""
    stamp = datetime.fromtimestamp(time_ms // 1000).strftime("%Y%m%d%H%M%S")
    return f"{stamp}{time_ms % 1000:03d}"


def _next_name(name: str) -> str:
    """The file name one millisecond after `name` (calendar arithmetic, no time zone)."""
    moment = datetime.strptime(name[:14], "%Y%m%d%H%M%S") + timedelta(milliseconds=int(name[14:]))
    moment += timedelta(milliseconds=1)
    return moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class IndexFile:
    """One mapped index file. The public attributes mirror the header; only IndexService
    changes them (inspection tools read them)."""

    __slots__ = ("path", "_mm", "_slot_num", "_index_num", "_entries_base", "begin_timestamp",
                 "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
                 "index_count", "_dirty", "allocated_entries")

    def __init__(self, path: Path, mm: mmap.mmap, hash_slot_num: int, index_num: int) -> None:
        self.path = path
        self._mm = mm
        self._slot_num = hash_slot_num
        self._index_num = index_num
        self._entries_base = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
         self.hash_slot_count, self.index_count) = INDEX_HEADER.unpack_from(mm, 0)
        if not 1 <= self.index_count <= index_num:
            raise ValueError(f"{path}: indexCount {self.index_count} outside 1..{index_num}")
        self._dirty = False
        # Entries [0, allocated_entries) have disk space, and the header and slots too when
        # it is > 0; an opened file is allocated again before it is written.
        self.allocated_entries = 0

    @classmethod
    def create(cls, path: Path, hash_slot_num: int, index_num: int) -> IndexFile:
        """Creates the full-size file under a temporary name, then renames it to `path`;
        its header, slots and first entries are allocated (OSError when they cannot be)."""
        tmp = path.with_name(path.name + _TMP_SUFFIX)
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        entries = min(index_num, ALLOCATE_ENTRIES)
        try:
            os.ftruncate(fd, index_file_size(hash_slot_num, index_num))
            os.posix_fallocate(fd, 0, index_file_size(hash_slot_num, entries))
            os.pwrite(fd, INDEX_HEADER.pack(0, 0, 0, 0, 0, 1), 0)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        os.rename(tmp, path)
        f = cls.open(path, hash_slot_num, index_num)
        f.allocated_entries = entries
        return f

    @classmethod
    def open(cls, path: Path, hash_slot_num: int, index_num: int) -> IndexFile:
        size = index_file_size(hash_slot_num, index_num)
        fd = os.open(path, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise ValueError(f"{path}: size {actual}, expected {size} for hash_slot_num="
                                 f"{hash_slot_num} index_num={index_num}")
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        try:
            return cls(path, mm, hash_slot_num, index_num)
        except BaseException:
            mm.close()
            raise

    # -- reading ---------------------------------------------------------------------------
    @property
    def is_full(self) -> bool:
        return self.index_count >= self._index_num

    def entries(self) -> Iterator[IndexEntry]:
        """(key_hash, phy_offset, time_diff, prev) of entries 1 .. indexCount-1, in order."""
        pos = self._entries_base + INDEX_SIZE
        end = self._entries_base + self.index_count * INDEX_SIZE
        while pos < end:
            stop = min(end, pos + _ENTRIES_PER_READ * INDEX_SIZE)
            yield from INDEX_ENTRY.iter_unpack(self._mm[pos:stop])
            pos = stop

    def __repr__(self) -> str:
        return (f"IndexFile({self.path.name}, count={self.index_count}, "
                f"phy=[{self.begin_phy_offset}, {self.end_phy_offset}], "
                f"ts=[{self.begin_timestamp}, {self.end_timestamp}])")

    # -- internals ---------------------------------------------------------------------------
    def _allocate(self, entries: int) -> None:
        """Allocates the header, the slots and the entries below `entries` (at most all);
        OSError (ENOSPC on a full disk) when it cannot."""
        entries = min(entries, self._index_num)
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, self._entries_base + entries * INDEX_SIZE)
        finally:
            os.close(fd)
        self.allocated_entries = entries

    def _write_header(self) -> None:
        _pack_header(self._mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                     self.end_phy_offset, self.hash_slot_count, self.index_count)
        self._dirty = True

    def _count_in(self, count: int, slot_count: int, end_ts: int, end_phy: int) -> None:
        """After a batch's entries and slots: its counts and ends, into the header last."""
        self.index_count, self.hash_slot_count = count, slot_count
        self.end_timestamp, self.end_phy_offset = end_ts, end_phy
        self._write_header()

    def _slot_pos(self, h: int) -> int:
        return INDEX_HEADER_SIZE + h % self._slot_num * HASH_SLOT_SIZE

    def _unlink_entries(self, first: int, end: int) -> None:
        """Takes entries first .. end-1 (the newest ones) out of their chains and zeroes them."""
        mm, base = self._mm, self._entries_base
        for n in range(end - 1, first - 1, -1):
            h, _, _, prev = _unpack_entry(mm, base + n * INDEX_SIZE)
            slot_pos = self._slot_pos(h)
            if _unpack_slot(mm, slot_pos)[0] == n:
                if prev >= n:
                    prev = INVALID_INDEX
                _pack_slot(mm, slot_pos, prev)
                if prev == INVALID_INDEX and n < self.index_count:
                    self.hash_slot_count -= 1
        mm[base + first * INDEX_SIZE : base + end * INDEX_SIZE] = bytes((end - first) * INDEX_SIZE)
        self._dirty = True

    def _repair_tail(self) -> int | None:
        """Drops entries written past indexCount by a process that died while indexing;
        returns the phyOffset of the first one dropped (None if there were none)."""
        mm, base, end = self._mm, self._entries_base, self.index_count
        # Only allocated entries are read: reading a hole through a mapping allocates it on
        # tmpfs (a SIGBUS when it is full). Nothing was written past the first hole.
        fd = os.open(self.path, os.O_RDONLY)
        try:
            data_to = data_end(fd, len(mm), base + end * INDEX_SIZE)
        finally:
            os.close(fd)
        while end < self._index_num:
            pos = base + end * INDEX_SIZE
            if pos + INDEX_SIZE > data_to or mm[pos : pos + INDEX_SIZE] == _ZERO_ENTRY:
                break
            end += 1
        if end == self.index_count:
            return None
        first_phy = _unpack_entry(mm, base + self.index_count * INDEX_SIZE)[1]
        self._unlink_entries(self.index_count, end)
        return first_phy

    def _truncate(self, phy_offset: int) -> None:
        """Drops the entries with phyOffset >= phy_offset (a suffix: entries are appended in
        commitlog order); the file keeps at least its first entry."""
        mm, base = self._mm, self._entries_base
        lo, hi = 1, self.index_count  # first entry to drop: smallest n with phy(n) >= phy_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if _unpack_entry(mm, base + mid * INDEX_SIZE)[1] >= phy_offset:
                hi = mid
            else:
                lo = mid + 1
        if lo >= self.index_count:
            return
        self._unlink_entries(lo, self.index_count)
        self.index_count = lo
        _, phy, diff, _ = _unpack_entry(mm, base + (lo - 1) * INDEX_SIZE)
        self.end_phy_offset = phy
        # Only the second is known: keep an upper bound so time-range queries still find it.
        self.end_timestamp = min(self.end_timestamp, self.begin_timestamp + diff * 1000 + 999)
        self._write_header()

    def _select(self, h: int, begin_ms: int, end_ms: int, max_num: int, out: list[int],
                seen: set[int]) -> None:
        """Appends to `out` the offsets of chain entries with hash `h` in the time range,
        newest first, until `out` holds max_num."""
        count = self.index_count  # entries >= count may be in the middle of being written
        if count <= 1:
            return
        mm, base, limit = self._mm, self._entries_base, self._index_num
        begin_ts = self.begin_timestamp
        n = _unpack_slot(mm, self._slot_pos(h))[0]
        while INVALID_INDEX < n < limit:
            kh, phy, diff, prev = _unpack_entry(mm, base + n * INDEX_SIZE)
            if n < count:
                t = begin_ts + diff * 1000
                if t + 999 < begin_ms:
                    break  # older entries of the chain are older still
                if kh == h and t <= end_ms and phy not in seen:
                    seen.add(phy)
                    out.append(phy)
                    if len(out) >= max_num:
                        return
            if prev >= n:
                break
            n = prev

    def _flush(self) -> None:
        if self._dirty:
            self._dirty = False  # before msync: a write during msync marks it again
            self._mm.flush()

    def _close(self) -> None:
        self._flush()
        self._mm.close()

    def _destroy(self) -> None:
        self._mm.close()
        self.path.unlink(missing_ok=True)


class IndexService:
    """The index files of one store directory (RocketMQ's IndexService).

    Threads: build_index is called from one dispatch thread and takes the lock only to roll to
    a new file; queries, truncate, delete_expired, flush and close take the lock. truncate is
    meant for recovery, before dispatch starts: it must not run during a build_index call.
    """

    def __init__(self, index_dir: str | os.PathLike, hash_slot_num: int = MAX_HASH_SLOT_NUM,
                 index_num: int = MAX_INDEX_NUM) -> None:
        if hash_slot_num < 1 or index_num < 2 or index_num > _INT_MAX:
            raise ValueError(
                f"bad index sizes: hash_slot_num={hash_slot_num} index_num={index_num}")
        self.index_dir = Path(index_dir)
        self._hash_slot_num = hash_slot_num
        self._index_num = index_num
        self._entries_base = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self._lock = threading.Lock()
        self._files: list[IndexFile] = []
        self._cur: IndexFile | None = None  # newest file, the one written to
        self._last_phy = -1  # commitlog offset of the newest indexed message
        self._loaded = False
        self._native = native.lib
        # Messages (or the rest of one's keys) not indexed for lack of disk space, in order:
        # the next build_index_batch indexes them first.
        self._held: list[tuple[str, Iterable[str], int, int]] = []

    def load(self) -> None:
        """Maps the existing files in name (= creation) order; creates the directory."""
        with self._lock:
            if self._loaded:
                raise RuntimeError(f"{self.index_dir}: index already loaded")
            self.index_dir.mkdir(parents=True, exist_ok=True)
            for tmp in self.index_dir.glob("*" + _TMP_SUFFIX):  # creation cut short by a crash
                tmp.unlink()
            paths = sorted(p for p in self.index_dir.iterdir() if INDEX_FILE_NAME.match(p.name))
            files: list[IndexFile] = []
            dropped: list[int] = []
            try:
                for path in paths:
                    f = IndexFile.open(path, self._hash_slot_num, self._index_num)
                    files.append(f)
                    phy = f._repair_tail()
                    if phy is not None:
                        dropped.append(phy)
            except BaseException:
                for f in files:
                    f._mm.close()
                raise
            self._files = files
            self._cur = files[-1] if files else None
            self._last_phy = self._newest_phy()
            # The interrupted message began in the previous (full, sealed) file: drop it there
            # too, so that it is indexed again as a whole.
            if dropped and min(dropped) <= self._last_phy:
                self._truncate_locked(min(dropped))
            self._loaded = True

    # -- writing -----------------------------------------------------------------------------
    def build_index(self, topic: str, keys: Iterable[str], phy_offset: int,
                    store_timestamp_ms: int) -> None:
        """Indexes `topic#key` for each non-empty key of the message at `phy_offset`.

        Messages at or below the newest indexed offset are skipped, as RocketMQ's buildIndex
        does, so re-dispatching after a restart does not index a message twice.
        """
        self.build_index_batch([(topic, keys, phy_offset, store_timestamp_ms)])

    def build_index_batch(self, messages: Iterable[tuple[str, Iterable[str], int, int]]) -> None:
        """build_index for many messages (topic, keys, phy offset, store time), in commitlog
        order; the header is written once, after their entries and slots.

        OSError (ENOSPC) when no space could be allocated for the entries: the keys written
        are counted in, the others held and indexed first by the next call."""
        items = messages if isinstance(messages, list) else list(messages)
        if self._held:
            items = self._held + items
            self._held = []
        index_keys = self._native.index_keys if self._native is not None else _index_keys
        limit = self._index_num
        i = k = 0
        f = self._cur
        # count, slot_count, begin_ts, begin_phy, end_ts, end_phy, last_phy (see _index_keys)
        state = [0, 0, 0, 0, -1, -1, self._last_phy]
        first = 0
        full: tuple[IndexFile, int, int, int, int] | None = None
        try:
            if f is None:
                f = self._roll()
            first = f.index_count
            state[:4] = first, f.hash_slot_count, f.begin_timestamp, f.begin_phy_offset
            while True:
                if f.allocated_entries <= state[0] < limit:  # room for one entry at least
                    f._allocate(state[0] + ALLOCATE_ENTRIES)
                i, k = index_keys(f._mm, self._entries_base, self._hash_slot_num,
                                  f.allocated_entries, items, i, k, state)
                f.begin_timestamp, f.begin_phy_offset = state[2], state[3]
                # A full file is counted in only once the next one holds the rest of its last
                # message: a kill in between leaves entries past indexCount in one of them,
                # which load() drops, so that message is indexed again whole (not skipped as
                # indexed).
                if full is not None:
                    full[0]._count_in(*full[1:])
                    full = None
                if i >= len(items):
                    break
                if state[0] < limit:  # stopped where the allocated entries end
                    continue
                if state[0] != first:
                    full = (f, state[0], state[1], state[4], state[5])
                f = self._roll()
                first = f.index_count
                state[:4] = first, f.hash_slot_count, f.begin_timestamp, f.begin_phy_offset
        except OSError:
            # The keys written are counted in; the message being indexed is taken up again
            # from its first key not written (a kill before that drops the rest of its keys
            # from the index: the header already names it indexed).
            if full is not None:
                full[0]._count_in(*full[1:])
            elif f is not None and state[0] != first:
                f._count_in(state[0], state[1], state[4], state[5])
            self._last_phy = state[6]
            self._hold(items, i, k)
            raise
        if state[0] != first:
            f._count_in(state[0], state[1], state[4], state[5])
        if state[5] >= 0:
            self._last_phy = state[5]

    @property
    def new_file_bytes(self) -> int:
        """The bytes a new index file allocates at creation."""
        return index_file_size(self._hash_slot_num, min(self._index_num, ALLOCATE_ENTRIES))

    def write_held(self) -> None:
        """Indexes the keys held for lack of space, if any (OSError while there is none)."""
        if self._held:
            self.build_index_batch([])

    def _hold(self, items: list[tuple[str, Iterable[str], int, int]], i: int, k: int) -> None:
        """Keeps items[i:] (the first from its key k on) for the next build_index_batch."""
        held = items[i:]
        if held and k:
            topic, keys, phy, ts = held[0]
            held[0] = (topic, list(keys)[k:], phy, ts)
        if len(held) > MAX_HELD_ITEMS:
            log.error("index: %d messages wait for disk space, over %d: the newest %d are not "
                      "indexed (queries by key miss them)", len(held), MAX_HELD_ITEMS,
                      len(held) - MAX_HELD_ITEMS)
            del held[MAX_HELD_ITEMS:]
        self._held = held

    def _roll(self) -> IndexFile:
        with self._lock:
            if not self._loaded:
                raise RuntimeError(f"{self.index_dir}: index not loaded (call load() first)")
            name = index_file_name(_now_ms())
            if self._files and name <= self._files[-1].path.name:
                name = _next_name(self._files[-1].path.name)  # same ms, or the clock went back
            while (self.index_dir / name).exists():
                name = _next_name(name)
            f = IndexFile.create(self.index_dir / name, self._hash_slot_num, self._index_num)
            self._files.append(f)
            self._cur = f
            return f

    # -- reading -----------------------------------------------------------------------------
    def query_offsets(self, topic: str, key: str, max_num: int, begin_ms: int,
                      end_ms: int) -> list[int]:
        """Commitlog offsets of messages whose `topic#key` has the same hash and whose store
        time (to the second) is in [begin_ms, end_ms]: newest first, at most max_num, distinct.
        The caller confirms the key (and the exact time if it matters) by reading each one."""
        out: list[int] = []
        if max_num <= 0 or begin_ms > end_ms:
            return out
        h = key_hash(topic, key)
        seen: set[int] = set()
        with self._lock:
            newest = self._cur
            for f in reversed(self._files):
                if f.index_count <= 1 or f.begin_timestamp > end_ms:
                    continue
                # The newest file's endTimestamp lags its entries while a message is indexed.
                if f.end_timestamp < begin_ms and f is not newest:
                    continue
                f._select(h, begin_ms, end_ms, max_num, out, seen)
                if len(out) >= max_num:
                    break
        return out

    def max_phy_offset(self) -> int:
        with self._lock:
            return max((f.end_phy_offset for f in self._files), default=0)

    def last_timestamp_ms(self) -> int:
        """endTimestamp of the newest file holding an entry (0 if none)."""
        with self._lock:
            for f in reversed(self._files):
                if f.index_count > 1:
                    return f.end_timestamp
            return 0

    def files(self) -> list[IndexFile]:
        """The loaded files, oldest first (a file deleted meanwhile can no longer be read)."""
        with self._lock:
            return list(self._files)

    # -- recovery and clean-up ---------------------------------------------------------------
    def truncate(self, phy_offset: int) -> None:
        """Drops every entry with phyOffset >= phy_offset (crash recovery): deletes the files
        that begin at or past it and cuts the one that straddles it."""
        with self._lock:
            self._truncate_locked(phy_offset)

    def _truncate_locked(self, phy_offset: int) -> None:
        kept: list[IndexFile] = []
        for f in self._files:
            if f.begin_phy_offset >= phy_offset:
                f._destroy()
                continue
            if f.index_count > 1 and f.end_phy_offset >= phy_offset:
                f._truncate(phy_offset)
            kept.append(f)
        self._files = kept
        self._cur = kept[-1] if kept else None
        self._last_phy = self._newest_phy()

    def delete_expired(self, min_phy_offset: int) -> int:
        """Deletes the files, never the newest, whose endPhyOffset < min_phy_offset."""
        with self._lock:
            if len(self._files) <= 1:
                return 0
            expired = [f for f in self._files[:-1] if f.end_phy_offset < min_phy_offset]
            for f in expired:
                f._destroy()
            self._files = [f for f in self._files if f not in expired]
            return len(expired)

    def flush(self) -> None:
        """msyncs every file written since the last flush."""
        with self._lock:
            for f in self._files:
                f._flush()

    def close(self) -> None:
        with self._lock:
            for f in self._files:
                f._close()
            self._files = []
            self._cur = None
            self._last_phy = -1
            self._loaded = False

    def _newest_phy(self) -> int:
        return max((f.end_phy_offset for f in self._files if f.index_count > 1), default=-1)


def _index_keys(mm: mmap.mmap, base: int, slot_num: int, limit: int,
                items: list[tuple[str, Iterable[str], int, int]], i: int, k: int,
                state: list[int]) -> tuple[int, int]:
    """Writes the entries and slots of items[i:] (from key k of the first one) into one file's
    mapping; `state` = [count, slot_count, begin_ts, begin_phy, end_ts, end_phy, last_phy] goes
    in and comes out updated (the header is the caller's). Items at or below last_phy are
    skipped. Returns (len(items), 0) when done, or (item, key) where the file filled up."""
    count, slot_count, begin_ts, begin_phy, end_ts, end_phy, last_phy = state
    try:
        for n in range(i, len(items)):
            topic, keys, phy_offset, store_timestamp_ms = items[n]
            if phy_offset <= last_phy:
                continue
            prefix = topic + "#"
            first_key = k if n == i else 0
            for j, key in enumerate(keys):
                if j < first_key or not key:
                    continue
                if count >= limit:
                    return n, j
                h = _crc32c((prefix + key).encode()) & _INT_MAX
                slot_pos = INDEX_HEADER_SIZE + h % slot_num * HASH_SLOT_SIZE
                prev = _unpack_slot(mm, slot_pos)[0]
                if prev >= count:  # never in a sound file; keeps chains pointing backwards
                    prev = INVALID_INDEX
                if count > 1:
                    diff = (store_timestamp_ms - begin_ts) // 1000
                    if not 0 <= diff <= _INT_MAX:
                        diff = 0 if diff < 0 else _INT_MAX
                else:
                    begin_ts, begin_phy = store_timestamp_ms, phy_offset
                    diff = 0
                # The entry, then its slot; indexCount (the header) after the whole batch.
                _pack_entry(mm, base + count * INDEX_SIZE, h, phy_offset, diff, prev)
                _pack_slot(mm, slot_pos, count)
                if not prev:
                    slot_count += 1
                count += 1
                end_ts, end_phy = store_timestamp_ms, phy_offset
            last_phy = phy_offset
        return len(items), 0
    finally:
        state[:] = count, slot_count, begin_ts, begin_phy, end_ts, end_phy, last_phy
