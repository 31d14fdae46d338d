"""The dispatch ("reput") service's work (SPEC §2.3, §2.4): consume-queue entries and index
keys for every committed record past `reput_from_offset`.

Records appended by this process come with what dispatch needs (`CommitLog.appended`), so
they are not parsed back; replicated and recovered records are parsed from the commitlog.
Either way entries are gathered per queue and written many at a time: one pack and one copy
per queue and call instead of one per record.
"""

from __future__ import annotations

import bisect
import collections
import logging
import mmap
from collections.abc import Callable
from typing import TYPE_CHECKING

from common.codec import SIZE_MAGIC
from common.constants import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE
from store.commitlog import NO_QUEUE_OFFSET_BIT, AppendedBatch, EncodedMessage
from store.consume_queue import ConsumeQueue
from store.dispatch import DispatchRequest, parse_dispatch
from store.scanning import ScannedRecord
from store.scanning import dispatch_request as scanned_request

if TYPE_CHECKING:
    from store.message_store import DefaultMessageStore

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]
# Per queue: [queue offset of the first entry, then (offset, size, tags code) of each, flat].
QueueEntries = list[int]
IndexItem = tuple[str, "list[str] | tuple[str, ...]", int, int]  # topic, keys, phy, store ts
# Records gathered before they are written: bounds memory and the time a reader waits.
MAX_GATHERED = 4096
# Entries held for a failed consume queue until its retry, at most (then dropped, logged).
MAX_HELD_ENTRIES = 1 << 20
REPUT_CHUNK_BYTES = 8 * 1024 * 1024  # commitlog bytes read per dispatch pass


class Gathered:
    """Consume-queue entries and index keys of many records, written in one go."""

    __slots__ = ("store", "queues", "index_items", "count", "pending", "last_timestamp",
                 "written")

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store
        self.queues: dict[QueueKey, QueueEntries] = {}
        self.index_items: list[IndexItem] = []
        self.count = 0  # records gathered in all
        self.pending = 0  # records gathered since the last write
        self.last_timestamp = 0
        self.written: list[ConsumeQueue] = []  # queues written, for the flush service

    def __len__(self) -> int:
        return self.pending

    def add_request(self, r: DispatchRequest) -> None:
        """One record parsed from the commitlog."""
        if not r.sys_flag & NO_QUEUE_OFFSET_BIT:
            self.add_entry((r.topic, r.queue_id), r.queue_offset, r.commit_log_offset,
                           r.msg_size, r.tags_code)
        keys = r.keys.split() if r.keys else []
        if r.uniq_key:
            keys.append(r.uniq_key)
        if keys:
            self.index_items.append((r.topic, keys, r.commit_log_offset, r.store_timestamp))
        self.last_timestamp = r.store_timestamp
        self.count += 1
        self.pending += 1

    def add_scanned(self, mm: mmap.mmap, record: ScannedRecord) -> None:
        """One record from CommitLogScan (recovery), in the file mapped by `mm`."""
        self.add_request(scanned_request(mm, record, self.store.config.delay_levels_ms))

    def add_entry(self, key: QueueKey, queue_offset: int, offset: int, size: int,
                  code: int) -> None:
        q = self.queues.get(key)
        if q is not None and q[0] + len(q) // 3 == queue_offset:
            q += (offset, size, code)
        else:
            if q is not None:  # not the next entry of the gathered run: write the run first
                self._write_queue(key, q, None)
            self.queues[key] = [queue_offset, offset, size, code]

    def add_batches(self, batches: list[AppendedBatch], from_offset: int) -> None:
        """Records appended by this process; those before `from_offset` are skipped."""
        lib = self.store.commitlog.native
        gather = lib.gather if lib is not None else _gather_records
        index_on = self.store.config.message_index_enable
        count = 0
        ts = 0
        for first, _, ts, encoded, phys_offsets, queue_offsets in batches:
            if first < from_offset:  # partly dispatched from the parsed commitlog already
                i = bisect.bisect_left(phys_offsets, from_offset)
                encoded, phys_offsets, queue_offsets = (
                    encoded[i:], phys_offsets[i:], queue_offsets[i:])
            count += len(encoded)
            gather(encoded, phys_offsets, queue_offsets, ts, self.queues, self.index_items,
                   index_on, self.add_entry)
        self.count += count
        self.pending += count
        if ts:
            self.last_timestamp = ts

    def write(self, touched: dict[QueueKey, ConsumeQueue]) -> None:
        for key, q in self.queues.items():
            self._write_queue(key, q, touched)
        self.queues = {}
        if self.written:
            self.store.queues.mark_dirty(self.written)
            self.written = []
        if self.index_items:
            if self.store.config.message_index_enable:  # the index skips what it has
                try:
                    self.store.index.build_index_batch(self.index_items)
                except OSError as e:  # it holds the keys it could not write
                    if not self.store.disk_full.report(e, "cannot allocate index entries",
                                                       self.store.index.new_file_bytes):
                        raise
            self.index_items = []
        if self.last_timestamp:
            self.store.last_dispatched_ts = self.last_timestamp
        self.pending = 0

    def _write_queue(self, key: QueueKey, q: QueueEntries,
                     touched: dict[QueueKey, ConsumeQueue] | None) -> None:
        store = self.store
        cq = store.queues.table.get(key)
        if cq is None:
            cq = store.queues.create(*key)
        if cq.failed:
            _hold(cq, q)
            return
        try:
            cq.put_entries(q[0], q, 1)
        except OSError as e:  # this queue only: dispatch goes on for the others
            store.queues.queue_failed(cq, e)
            _hold(cq, q)
            return
        self.written.append(cq)
        if touched is not None:
            touched[key] = cq


def _hold(cq: ConsumeQueue, run: QueueEntries) -> None:
    """Keeps a failed queue's entries for its retry (see DefaultMessageStore.queue_failed).
    A run that continues the last one held is appended to it: the held runs stay few, so
    counting them is not a walk over every dispatch pass since the failure."""
    if not cq.retry:
        return
    pending = cq.pending
    held = sum(len(r) // 3 for r in pending)
    if held + len(run) // 3 > MAX_HELD_ENTRIES:
        log.error("%s-%d: over %d entries held for the retry: %d dropped", cq.topic,
                  cq.queue_id, MAX_HELD_ENTRIES, len(run) // 3)
        return
    last = pending[-1] if pending else None
    if last is not None and run[0] == last[0] + len(last) // 3:
        last.extend(run[1:])
    else:
        pending.append(run)


def _gather_records(encoded: list[EncodedMessage], phys_offsets: list[int],
                    queue_offsets: list[int], ts: int, queues: dict[QueueKey, QueueEntries],
                    index_items: list[IndexItem], index_on: bool,
                    add_entry: Callable[[QueueKey, int, int, int, int], None]) -> None:
    """Consume-queue entries (into `queues`, or `add_entry` when a record does not continue
    its queue's gathered run) and index keys of appended records stored at time `ts`."""
    for e, phys, qoff in zip(encoded, phys_offsets, queue_offsets, strict=True):
        _, sys_flag, _, _, size, _, code, keys, uniq, delay, key = e
        if not sys_flag & NO_QUEUE_OFFSET_BIT:
            if delay:
                code = ts + delay
            q = queues.get(key)
            if q is not None and q[0] + len(q) // 3 == qoff:
                q += (phys, size, code)
            else:
                add_entry(key, qoff, phys, size, code)
        if index_on and (keys or uniq):
            if keys:
                names = keys.split()
                if uniq:
                    names.append(uniq)
                index_items.append((key[0], names, phys, ts))
            else:
                index_items.append((key[0], (uniq,), phys, ts))


def do_reput(store: DefaultMessageStore) -> int:
    """Dispatches committed records past reput_from_offset (the caller holds the reput lock);
    returns how many."""
    commitlog = store.commitlog
    appended = commitlog.appended
    touched: dict[QueueKey, ConsumeQueue] = {}
    gathered = Gathered(store)
    # Read a bounded chunk, not the rest of the file, per pass (it is copied out).
    chunk = max(REPUT_CHUNK_BYTES, 2 * store.config.max_message_size)
    while store.reput_from_offset < commitlog.max_offset:
        if appended:
            while _take_appended(store, appended, gathered, touched):
                pass
            if store.reput_from_offset >= commitlog.max_offset:
                break
        if store.reput_from_offset < commitlog.min_offset:
            log.warning("reput offset %d below commitlog min %d: skipping ahead",
                        store.reput_from_offset, commitlog.min_offset)
            store.reput_from_offset = commitlog.min_offset
        got = commitlog.read_file_data(store.reput_from_offset, chunk)
        if got is None:
            break
        mf, data = got
        base = store.reput_from_offset
        pos = 0
        limit = len(data)
        while True:
            if pos + 8 <= limit:
                total, magic = SIZE_MAGIC.unpack_from(data, pos)
                if magic == BLANK_MAGIC_CODE:  # end-of-file blank (maybe past this chunk)
                    pos = mf.file_tail_offset - base
                    break
                if magic == MESSAGE_MAGIC_CODE and pos + total > limit:
                    # Cut off by the chunk, or not all here yet (a slave's data ends
                    # wherever its last frame ended): dispatch it on a later pass.
                    break
            r = parse_dispatch(data, pos, check_crc=False,
                               delay_levels=store.config.delay_levels_ms)
            if isinstance(r, int):  # the end of data (blanks are handled above)
                break
            gathered.add_request(r)
            pos += r.msg_size
            if len(gathered) >= MAX_GATHERED:
                gathered.write(touched)
        gathered.write(touched)
        if pos == 0:
            break
        store.reput_from_offset = base + pos
    if touched:
        store.queues.notify_arriving(touched)
    return gathered.count


def _take_appended(store: DefaultMessageStore, appended: collections.deque[AppendedBatch],
                   gathered: Gathered, touched: dict[QueueKey, ConsumeQueue]) -> bool:
    """Dispatches appended batches (up to MAX_GATHERED records) that line up with
    reput_from_offset and are committed (readable), and moves reput_from_offset past them;
    False when there was none."""
    end = store.commitlog.max_offset
    start = offset = store.reput_from_offset
    batches: list[AppendedBatch] = []
    records = 0
    while appended:
        batch = appended[0]
        first, batch_end = batch[0], batch[1]
        if batch_end <= offset:  # already dispatched (or truncated away)
            appended.popleft()
            continue
        if batch_end > end or first > offset:
            break
        # The parsed commitlog may have covered the start of a batch: go on from a record.
        if first < offset and offset not in batch[4]:
            break
        appended.popleft()
        batches.append(batch)
        offset = batch_end
        records += len(batch[3])
        if records >= MAX_GATHERED:
            break
    if not batches:
        return False
    gathered.add_batches(batches, start)
    gathered.write(touched)
    store.reput_from_offset = offset
    return True
