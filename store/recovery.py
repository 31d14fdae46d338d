"""Recovery at start (SPEC §2.6): find where valid commitlog data ends, cut everything there,
and bring consume queues, index and the queue-offset table in line with the commitlog."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import struct
from typing import TYPE_CHECKING

from store.commitlog import NO_QUEUE_OFFSET_BIT, CommitLog
from store.constants import CQ_STORE_UNIT_SIZE
from store.consume_queue import BLANK_SIZE, ConsumeQueue
from store.dispatch import DispatchRequest, parse_dispatch
from store.reput import MAX_GATHERED, Gathered
from store.scanning import CommitLogScan

if TYPE_CHECKING:
    from store.message_store import DefaultMessageStore

log = logging.getLogger(__name__)

CLEAN_RECOVERY_FILES = 3
CHECK_BLOCK = 1024  # consume-queue entries read at once to check records against


@dataclasses.dataclass
class RestoredQueues:
    """Consume queues taken from a snapshot (store/cq_snapshot.py) instead of from disk."""

    offset: int  # S: every record before it has its entries in the restored queues
    # Queues of topics the snapshot does not hold, loaded from disk: recovered as without one.
    from_disk: list[ConsumeQueue] = dataclasses.field(default_factory=list)


def recover(store: DefaultMessageStore, crashed: bool,
            restored: RestoredQueues | None = None) -> None:
    """SPEC §2.6, in five phases: the queues' own tails; where the commitlog scan starts; the
    scan, which after a crash also checks each record against its queue and dispatches what
    the queues and the index lack; the cut at the end of valid data; where dispatch goes on.

    `restored`: the queues come from a snapshot. After a clean stop their ends are known;
    after a crash the commitlog is scanned from the snapshot's offset S instead of from the
    checkpoint, and only the queues its records touch are read from disk (once each, when
    first met: `_QueueCheck`); the others hold nothing past the snapshot, as every entry
    written after it is for a record at or past S."""
    files = store.commitlog.queue.files
    _recover_queue_tails(store, crashed, restored)
    if not files:
        for cq in store.queues.table.values():
            cq.destroy()
        store.index.truncate(0)
        store.reput_from_offset = 0
        return
    start = _scan_start(store, crashed, restored)
    scan = _scan(store, start, crashed, restored)
    end = scan.end
    if scan.problem:
        log.warning("commitlog recovery: truncating at %d: %s", end, scan.problem)
    log.info("recovered %s%s: scanned %d records from %d, valid data ends at %d%s",
             "after a crash" if crashed else "after a clean stop",
             " from the consume-queue snapshot" if restored is not None else "", scan.count,
             start, end, f"; {scan.queues_read} queues read from disk"
             if crashed and restored is not None else "")
    cut_at(store, end)
    if crashed:
        store.reput_from_offset = end
    else:
        dispatched = max((cq.max_physic_offset for cq in store.queues.table.values()),
                         default=0)
        store.reput_from_offset = min(end, max(dispatched, store.commitlog.min_offset))
    for mf in files:
        mf.store_timestamp = 0


def _recover_queue_tails(store: DefaultMessageStore, crashed: bool,
                         restored: RestoredQueues | None) -> None:
    """Each queue loaded from disk finds its last valid entry (after a crash, one whose
    record is torn is dropped); a queue that cannot be read fails alone."""
    commitlog = store.commitlog
    files = commitlog.queue.files
    to_recover = store.queues.table.values() if restored is None else restored.from_disk
    for cq in to_recover:
        if cq.failed:
            continue
        try:
            tail = cq.recover()
            if crashed and files:
                _drop_torn_last_entry(commitlog, cq, tail)
        except (OSError, ValueError) as e:  # this queue only: the others recover
            store.queues.queue_failed(cq, e, retry=False)


def _scan_start(store: DefaultMessageStore, crashed: bool,
                restored: RestoredQueues | None) -> int:
    """The snapshot's S after a crash with one; the checkpoint's file after a crash; the
    last CLEAN_RECOVERY_FILES files after a clean stop."""
    files = store.commitlog.queue.files
    if crashed and restored is not None:
        return restored.offset
    if crashed:
        return files[_crash_start_file(store)].file_from_offset
    return files[max(0, len(files) - CLEAN_RECOVERY_FILES)].file_from_offset


@dataclasses.dataclass
class _ScanResult:
    end: int  # where valid data ends
    count: int  # records scanned
    problem: str  # why the data ends there, "" at a clean end
    queues_read: int  # queues read from disk during the scan


def _scan(store: DefaultMessageStore, start: int, crashed: bool,
          restored: RestoredQueues | None) -> _ScanResult:
    """Scans the commitlog from `start` to the end of valid data. After a crash every
    record must continue its queue; what the queues or the index lack is dispatched."""
    from_snapshot = crashed and restored is not None
    # Queues already read from disk are not read again when the scan meets them.
    on_disk = ({(cq.topic, cq.queue_id) for cq in restored.from_disk}
               if from_snapshot and restored is not None else set())
    touched: dict[tuple[str, int], ConsumeQueue] = {}
    count = 0
    problem = ""
    problem_at = -1
    index_end = _index_end(store) if store.config.message_index_enable else 1 << 62
    gathered = Gathered(store)
    checks: dict[tuple[str, int], _QueueCheck] = {}
    scan = CommitLogScan(store.commitlog, start)
    records = scan.runs()
    for mm, run in records:
        if not crashed:
            count += len(run)
            continue
        for record in run:
            _, phys, _, queue_id, queue_offset, topic, sys_flag = record
            dispatch = phys >= index_end
            if not sys_flag & NO_QUEUE_OFFSET_BIT:
                key = (topic, queue_id)
                check = checks.get(key)
                if check is None:
                    check = checks[key] = _QueueCheck(
                        store, key, from_snapshot and key not in on_disk)
                if check.failed:
                    count += 1
                    continue
                expected = check.next_offset
                if queue_offset == expected:
                    check.next_offset = expected + 1
                    dispatch = True
                elif queue_offset > expected or (
                        check.block[queue_offset - check.block_start] != phys
                        if 0 <= queue_offset - check.block_start < len(check.block)
                        else not check.points_at(queue_offset, phys, gathered, touched)):
                    # No checksum covers QUEUEOFFSET: a record that does not continue its
                    # queue is damaged, and trusting it could fill a queue with holes up to
                    # a wild offset.
                    problem = (f"record at {phys} has queue offset {queue_offset} of {topic}-"
                               f"{queue_id}, whose consume queue continues at {expected}")
                    problem_at = phys
                    break
            count += 1
            if dispatch:  # what the consume queues or the index lack
                gathered.add_scanned(mm, record)
                if len(gathered) >= MAX_GATHERED:
                    gathered.write(touched)
        if problem:
            break
    records.close()
    gathered.write(touched)
    if touched:
        store.queues.notify_arriving(touched)
    return _ScanResult(problem_at if problem else scan.end, count, problem or scan.error,
                       len(checks))


def cut_at(store: DefaultMessageStore, end: int) -> None:
    """Everything past `end` goes: the commitlog's tail, queue entries and index keys of
    records past it; the queue-offset table follows the queues."""
    commitlog = store.commitlog
    commitlog.set_recovered_end(end)
    for cq in store.queues.table.values():
        if cq.failed:
            continue
        max_offset = cq.max_offset_in_queue
        try:
            cq.truncate_dirty(end)
        except OSError as e:
            store.queues.queue_failed(cq, e, retry=False)
            continue
        if cq.max_offset_in_queue != max_offset:
            store.queues.mark_snapshot_changed([cq])
        if cq.max_offset_in_queue:
            commitlog.topic_queue_table[(cq.topic, cq.queue_id)] = cq.max_offset_in_queue
    store.index.truncate(end)


class _QueueCheck:
    """Where a consume queue goes on during a crash scan, and its entries' commitlog offsets
    read a block at a time (one unpack per block instead of one lookup per record)."""

    __slots__ = ("store", "key", "next_offset", "block_start", "block", "failed")

    def __init__(self, store: DefaultMessageStore, key: tuple[str, int],
                 read_from_disk: bool) -> None:
        self.store = store
        self.key = key
        cq = store.queues.table.get(key)
        if read_from_disk:
            cq = _read_from_disk(store, key, cq)
        self.next_offset = cq.max_offset_in_queue if cq is not None else 0
        # A queue that could not be loaded proves nothing about its records: they are
        # neither checked against it (that would truncate the commitlog, losing every
        # later record of every topic) nor dispatched to it.
        self.failed = cq is not None and bool(cq.failed)
        self.block_start = 0
        self.block: tuple[int, ...] = ()

    def points_at(self, queue_offset: int, phys: int, gathered: Gathered,
                  touched: dict[tuple[str, int], ConsumeQueue]) -> bool:
        """Entry `queue_offset` (below next_offset, outside the block the caller looked in
        first) points at `phys`, or has expired; reads the block from that entry on."""
        cq = self.store.queues.table.get(self.key)
        if cq is None or queue_offset >= cq.max_offset_in_queue:
            gathered.write(touched)  # the entry is gathered, not yet written
            cq = self.store.queues.table.get(self.key)
        if cq is None:
            return True
        raw = cq.read_entries(queue_offset, CHECK_BLOCK)
        if not raw:
            return True  # that part of the queue has expired
        self.block_start = queue_offset
        self.block = _offsets_struct(len(raw) // CQ_STORE_UNIT_SIZE).unpack(raw)
        return self.block[0] == phys


def _read_from_disk(store: DefaultMessageStore, key: tuple[str, int],
                    cq: ConsumeQueue | None) -> ConsumeQueue | None:
    """A queue that records past the snapshot's offset go to: its end as on disk (entries
    written after the snapshot, perhaps a torn last one), read from the snapshot's end on.
    A queue the snapshot does not hold is loaded whole when its directory exists."""
    restored = cq is not None
    if cq is None:
        topic, queue_id = key
        if not os.path.isdir(f"{store.queues.root}/{topic}/{queue_id}"):
            return None
        cq = store.queues.create(topic, queue_id)
    if cq.failed:
        return cq
    store.queues.mark_snapshot_changed([cq])  # the encoder holds what the snapshot said
    try:
        tail = cq.recover_past_snapshot() if restored else cq.reload()
        _drop_torn_last_entry(store.commitlog, cq, tail)
    except (OSError, ValueError) as e:  # this queue only: the others recover
        store.queues.queue_failed(cq, e, retry=False)
    return cq


@functools.lru_cache(maxsize=64)
def _offsets_struct(count: int) -> struct.Struct:
    """The commitlog offsets of `count` consume-queue entries in a row."""
    return struct.Struct(">" + "q12x" * count)


def _drop_torn_last_entry(commitlog: CommitLog, cq: ConsumeQueue,
                          entry: tuple[int, int, int] | None) -> None:
    """A crash can cut the copy of a block of entries inside one (a page fault at a page
    boundary, where the kill is delivered): the last entry then has its offset and size but
    not all of its tags code. It is checked against its record and dropped when they differ;
    the recovery scan dispatches the record again. `entry`: the last entry when cq.recover
    read it already."""
    last = cq.max_offset_in_queue - 1
    if entry is None and last >= 0:
        entry = cq.get_entry(last)
    if entry is None or entry[1] == BLANK_SIZE:
        return
    offset, size, code = entry
    mf = commitlog.queue.find_by_offset(offset)
    record: DispatchRequest | int | None = None
    if mf is None:
        if offset < commitlog.min_offset:
            return  # its record has expired: nothing to check it against
    else:
        try:
            record = parse_dispatch(mf.mm, offset - mf.file_from_offset, check_crc=False,
                                    delay_levels=commitlog.config.delay_levels_ms)
        except ValueError:  # CorruptRecord, or properties that do not decode
            pass
    if isinstance(record, DispatchRequest) and (
            record.commit_log_offset, record.msg_size, record.tags_code, record.topic,
            record.queue_id, record.queue_offset) == (
            offset, size, code, cq.topic, cq.queue_id, last):
        return
    log.warning("%s-%d: last consume-queue entry %d (%d, %d, %d) does not match its record: "
                "dropped, the record is dispatched again", cq.topic, cq.queue_id, last, offset,
                size, code)
    cq.truncate_dirty(offset)


def _crash_start_file(store: DefaultMessageStore) -> int:
    """The last file whose first record is older than the checkpoint: data before it is
    known flushed everywhere."""
    assert store.checkpoint is not None
    min_ts = store.checkpoint.min_timestamp(store.config.message_index_enable)
    files = store.commitlog.queue.files
    for i in range(len(files) - 1, -1, -1):
        ts = store.commitlog.first_record_timestamp(files[i])
        if ts and ts <= min_ts:
            return i
    return 0


def _index_end(store: DefaultMessageStore) -> int:
    """Records at or past this commitlog offset still need index entries."""
    if not any(f.index_count > 1 for f in store.index.files()):
        return 0
    return store.index.max_phy_offset() + 1
