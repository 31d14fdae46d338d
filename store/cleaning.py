"""Expired-file deletion and disk-full protection (SPEC §2.7).

Commitlog files older than fileReservedTime are deleted at deleteWhen o'clock, or at any time
once the disk is over diskMaxUsedSpaceRatio; past diskSpaceCleanForciblyRatio the oldest files
go even if not expired; past diskSpaceWarningLevelRatio the store refuses writes until space
comes back. Consume-queue and index files behind the commitlog's new min offset follow, once
each time it moves.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

from store.mapped_file import MappedFile

if TYPE_CHECKING:
    from store.message_store import DefaultMessageStore

DISK_RATIO = "disk ratio"  # the cause of refusing writes this guard sets

log = logging.getLogger(__name__)
MAX_FILES_PER_ROUND = 10


def _is_delete_hour(delete_when: str, now_ms: int) -> bool:
    hour = time.localtime(now_ms / 1000).tm_hour
    return any(part.strip() and int(part) == hour for part in delete_when.split(";"))


def _usable_bytes(path: str) -> int:
    """Bytes the store's file system holds for us, used or free (as the usage ratio counts)."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree + st.f_bavail) * st.f_frsize


def clean_expired_files(store: DefaultMessageStore, force_time: bool = False) -> int:
    cfg = store.config
    now = store.clock_ms()
    used = store.disk_usage(str(store.commitlog.queue.store_path))
    ratio = used * 100
    # While the store's disk-full state holds, its own two lines say when writes stop and
    # start again: this guard's would say it twice, or say "again" while they still stop.
    quiet = store.disk_full.active
    if ratio > cfg.disk_space_warning_level_ratio:
        if not store.refusing(DISK_RATIO) and not quiet:
            log.error("disk %.1f%% full (over %d%%): the store refuses writes", ratio,
                      cfg.disk_space_warning_level_ratio)
        store.refuse_writes(DISK_RATIO, f"disk {ratio:.1f}% full, over "
                                        f"diskSpaceWarningLevelRatio "
                                        f"{cfg.disk_space_warning_level_ratio}%")
    elif store.refusing(DISK_RATIO):
        if not quiet:
            log.info("disk %.1f%% full: the store accepts writes again", ratio)
        store.refuse_writes(DISK_RATIO, None)
    disk_pressure = ratio > cfg.disk_max_used_space_ratio
    forcibly = ratio > cfg.disk_space_clean_forcibly_ratio
    if not (force_time or disk_pressure or _is_delete_hour(cfg.delete_when, now)):
        return 0
    reserved_ms = cfg.file_reserved_time * 3600 * 1000
    # Over the forcibly ratio, files not expired go too, but only as many as bring the disk
    # back under it (RocketMQ deletes up to ten a round: on a small disk that was every
    # unconsumed message at once).
    to_free = 0
    if forcibly:
        to_free = int((ratio - cfg.disk_space_clean_forcibly_ratio) / 100
                      * _usable_bytes(str(store.commitlog.queue.store_path))) + 1
    forced: list[MappedFile] = []

    def deletable(mf: MappedFile) -> bool:
        nonlocal to_free
        try:
            mtime_ms = os.stat(mf.path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return True
        if now - mtime_ms >= reserved_ms:
            return True
        if to_free <= 0:
            return False
        to_free -= mf.file_size
        forced.append(mf)
        return True

    deleted = store.commitlog.queue.delete_first_files(deletable, MAX_FILES_PER_ROUND)
    if forced:
        log.warning("disk %.1f%% full, over diskSpaceCleanForciblyRatio %d%%: deleted %d "
                    "commitlog file(s) before their fileReservedTime, consumed or not "
                    "(messages before commitlog offset %d are gone)", ratio,
                    cfg.disk_space_clean_forcibly_ratio, len(forced),
                    store.commitlog.min_offset)
    if deleted > len(forced):
        log.info("deleted %d expired commitlog file(s) (disk %.1f%% used)",
                 deleted - len(forced), ratio)
    min_offset = store.commitlog.min_offset
    if min_offset == store.cleaned_min_offset:
        # Nothing to follow (RocketMQ's CleanConsumeQueueService also waits for the min
        # offset to move): over diskMaxUsedSpaceRatio this runs every 10 s, and a pass over
        # 400,000 queues (a read each) held the GIL for seconds at a time.
        return deleted
    changed = []  # for the consume-queue snapshot
    files_deleted = deleted > 0
    for cq in list(store.queues.table.values()):
        min_logic = cq.min_logic_offset
        cq_deleted = cq.delete_expired(min_offset)
        if cq_deleted or cq.min_logic_offset != min_logic:
            changed.append(cq)
            files_deleted = files_deleted or cq_deleted > 0
    if files_deleted:  # the snapshot on disk may list them
        store.queues.invalidate_snapshot(changed)
    elif changed:
        store.queues.mark_snapshot_changed(changed)
    store.index.delete_expired(min_offset)
    store.cleaned_min_offset = min_offset
    return deleted
