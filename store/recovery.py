"""Recovery at start (SPEC §2.6): find where valid commitlog data ends, cut everything there,
and bring consume queues, index and the queue-offset table in line with the commitlog."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from store.codec import parse_dispatch
from store.constants import TRANSACTION_TYPE_MASK, SysFlag
from store.consume_queue import ConsumeQueue

if TYPE_CHECKING:
    from store.message_store import DefaultMessageStore

log = logging.getLogger(__name__)

CLEAN_RECOVERY_FILES = 3


def recover(store: DefaultMessageStore, crashed: bool) -> None:
    commitlog = store.commitlog
    files = commitlog.queue.files
    for cq in store.consume_queues.values():
        cq.recover()
    if not files:
        for cq in store.consume_queues.values():
            cq.destroy()
        store.index.truncate(0)
        store.reput_from_offset = 0
        return
    if crashed:
        start_index = _crash_start_file(store)
    else:
        start_index = max(0, len(files) - CLEAN_RECOVERY_FILES)
    start = files[start_index].file_from_offset
    touched: dict = {}
    count = 0
    queues = store.consume_queues
    index_end = _index_end(store) if store.config.message_index_enable else 1 << 62
    problem = ""
    records = commitlog.scan(start)
    for data, pos, phys, _, queue_id, queue_offset, topic, sys_flag in records:
        if not crashed:
            count += 1
            continue
        cq = queues.get((topic, queue_id))
        next_offset = cq.max_offset_in_queue if cq is not None else 0
        if sys_flag & TRANSACTION_TYPE_MASK in _CQ_TYPES and not _follows_queue(
                cq, queue_offset, next_offset, phys):
            # No checksum covers QUEUEOFFSET: a record that does not continue its queue is
            # damaged, and trusting it could fill a queue with holes up to a wild offset.
            problem = (f"record at {phys} has queue offset {queue_offset} of {topic}-{queue_id}"
                       f", whose consume queue continues at {next_offset}")
            break
        count += 1
        # Re-dispatch what the consume queues or the index lack (parsing only those).
        if phys >= index_end or queue_offset >= next_offset:
            request = parse_dispatch(data, pos, check_crc=False)
            assert not isinstance(request, int)
            store.dispatch(request, touched)
    records.close()
    end = commitlog.scan_end
    problem = problem or commitlog.scan_error
    if problem:
        log.warning("commitlog recovery: truncating at %d: %s", end, problem)
    log.info("recovered %s: scanned %d records from %d, valid data ends at %d",
             "after a crash" if crashed else "after a clean stop", count, start, end)
    commitlog.set_recovered_end(end)
    for cq in store.consume_queues.values():
        cq.truncate_dirty(end)
        if cq.max_offset_in_queue:
            commitlog.topic_queue_table[(cq.topic, cq.queue_id)] = cq.max_offset_in_queue
    store.index.truncate(end)
    if crashed:
        store.reput_from_offset = end
    else:
        dispatched = max((cq.max_physic_offset for cq in store.consume_queues.values()),
                         default=0)
        store.reput_from_offset = min(end, max(dispatched, commitlog.min_offset))
    for mf in files:
        mf.store_timestamp = 0


_CQ_TYPES = (0, int(SysFlag.TRANSACTION_COMMIT))


def _follows_queue(cq: ConsumeQueue | None, queue_offset: int, next_offset: int,
                   phys: int) -> bool:
    """The record is its queue's next entry, or the entry already there points at it."""
    if queue_offset == next_offset:
        return True
    if cq is None or queue_offset > next_offset:
        return False
    entry = cq.get_entry(queue_offset)
    return entry is None or entry[0] == phys  # None: that part of the queue has expired


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
