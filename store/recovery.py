"""Recovery at start (SPEC §2.6): find where valid commitlog data ends, cut everything there,
and bring consume queues, index and the queue-offset table in line with the commitlog."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from store.codec import parse_dispatch

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
    store._index_end = _index_end(store)
    touched: dict = {}
    count = 0
    queues = store.consume_queues
    index_end = store._index_end if store.config.message_index_enable else 1 << 62
    for data, pos, phys, _, queue_id, queue_offset, topic in commitlog.scan(start):
        count += 1
        if not crashed:
            continue
        # Re-dispatch what the consume queues or the index lack (parsing only those).
        cq = queues.get((topic, queue_id))
        if phys >= index_end or cq is None or queue_offset >= cq.max_offset_in_queue:
            request = parse_dispatch(data, pos, check_crc=False)
            assert not isinstance(request, int)
            store.dispatch(request, touched)
    end = commitlog.scan_end
    if commitlog.scan_error:
        log.warning("commitlog recovery: truncating at %d: %s", end, commitlog.scan_error)
    log.info("recovered %s: scanned %d records from %d, valid data ends at %d",
             "after a crash" if crashed else "after a clean stop", count, start, end)
    commitlog.set_recovered_end(end)
    for cq in store.consume_queues.values():
        cq.truncate_dirty(end)
        if cq.max_offset_in_queue:
            commitlog.topic_queue_table[(cq.topic, cq.queue_id)] = cq.max_offset_in_queue
    store.index.truncate(end)
    store._index_end = _index_end(store)
    if crashed:
        store.reput_from_offset = end
    else:
        dispatched = max((cq.max_physic_offset for cq in store.consume_queues.values()),
                         default=0)
        store.reput_from_offset = min(end, max(dispatched, commitlog.min_offset))
    for mf in files:
        mf.store_timestamp = 0


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
