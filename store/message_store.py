"""DefaultMessageStore: the store's one interface (put, get, query, offsets, recovery)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from store import reading
from store.checkpoint import StoreCheckpoint
from store.codec import DispatchRequest, parse_dispatch
from store.commitlog import AppendResult, CommitLog
from store.config import StoreConfig
from store.constants import (
    TRANSACTION_TYPE_MASK,
    BrokerRole,
    FlushDiskType,
    PutMessageStatus,
    SysFlag,
)
from store.consume_queue import ConsumeQueue
from store.index import INDEX_DIR_NAME, IndexService
from store.message import Message, topic_problem
from store.services import ServiceThread, monotonic
from store.waiters import OffsetWaiters

log = logging.getLogger(__name__)

_CQ_TYPES = (0, int(SysFlag.TRANSACTION_COMMIT))  # prepared / rolled back records stay out
ArrivingListener = Callable[[str, int, int], None]  # topic, queueId, max offset in queue
INT = struct.Struct(">i")


@dataclasses.dataclass(slots=True)
class PutMessageResult:
    status: PutMessageStatus
    append: AppendResult | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class DefaultMessageStore:
    def __init__(self, config: StoreConfig, *, clock_ms: Callable[[], int] = _wall_clock_ms,
                 disk_usage: Callable[[str], float] | None = None) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.root = Path(config.store_path_root_dir)
        self.commitlog = CommitLog(config, clock_ms)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.index = IndexService(self.root / INDEX_DIR_NAME, config.max_hash_slot_num,
                                  config.max_index_num)
        self.checkpoint: StoreCheckpoint | None = None
        self.flush_waiters = OffsetWaiters(monotonic)
        self.reput_from_offset = 0
        self.arriving_listeners: list[ArrivingListener] = []
        # f(committed_offset) after buffered appends became readable (write-buffer mode only;
        # otherwise an append is readable at once).
        self.commit_listeners = self.commitlog.commit_listeners
        self.writeable = True
        self.not_writeable_reason = ""
        self.running = False
        self.shutdown_done = False
        self.role = config.broker_role
        self.disk_usage = disk_usage or _disk_used_ratio
        self.put_count = 0
        self.get_count = 0
        self.disk_fall_behind: dict[str, int] = {}  # group -> bytes, from the last pull
        self._last_dispatched_ts = 0
        self._reput_idle = False
        self._valid_topics: set[str] = set()
        self._reput_lock = threading.Lock()
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._last_thorough_flush = monotonic()
        self._last_clean = 0.0
        self._services: list[ServiceThread] = []
        self.recovered_from_crash = False
        self.load_problem = ""

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def abort_file(self) -> Path:
        return self.root / "abort"

    def load(self) -> bool:
        """Maps every file, recovers after a clean stop or a crash, writes the abort file."""
        self.root.mkdir(parents=True, exist_ok=True)
        crashed = self.abort_file.exists()
        self.recovered_from_crash = crashed
        self.commitlog.queue.load()
        self._load_consume_queues()
        self.index.load()
        self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
        from store.recovery import recover

        recover(self, crashed)
        self.abort_file.touch()
        return True

    def _load_consume_queues(self) -> None:
        cq_root = self.root / "consumequeue"
        if not cq_root.is_dir():
            return
        for topic_dir in sorted(cq_root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for qdir in sorted(topic_dir.iterdir()):
                if qdir.is_dir() and qdir.name.isdigit():
                    cq = self._new_consume_queue(topic_dir.name, int(qdir.name))
                    cq.load()

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(topic, queue_id, self.root / "consumequeue",
                          self.config.mapped_file_size_consume_queue)
        self.consume_queues[(topic, queue_id)] = cq
        return cq

    def start(self) -> None:
        self.commitlog.queue.prepare_next_file()
        flush = ServiceThread("GroupCommitService" if self._sync_flush else "FlushRealTimeService",
                              self._flush_commitlog_step)
        self._flush_service = flush
        self.flush_waiters.on_wait = flush.wake
        self._reput_service = ServiceThread("ReputMessageService", self._reput_step)
        self._services = [
            flush,
            self._reput_service,
            ServiceThread("FlushConsumeQueueService", self._flush_logics_step),
            ServiceThread("CleanCommitLogService", self._clean_step),
        ]
        for s in self._services:
            s.start()
        self.running = True

    def shutdown(self) -> None:
        """Stops services, dispatches and flushes everything, removes the abort file."""
        if self.shutdown_done:
            return
        self.running = False
        self.shutdown_done = True
        for s in self._services:
            s.stop()
        self.commitlog.commit()
        self.do_reput()
        self.commitlog.flush()
        self.flush_waiters.advance(self.commitlog.flushed_offset)
        self.flush_waiters.fail_all()
        self._flush_logics(force=True)
        if self.checkpoint is not None:
            self.checkpoint.physic_msg_timestamp = self.commitlog.last_store_timestamp or (
                self.checkpoint.physic_msg_timestamp)
            self.checkpoint.close()
        self.commitlog.close()
        for cq in self.consume_queues.values():
            cq.close()
        self.index.close()
        if self.abort_file.exists():
            self.abort_file.unlink()

    def destroy(self) -> None:
        """Removes every file of the store (tests and `resetOffset`-like admin only)."""
        shutil.rmtree(self.root, ignore_errors=True)

    # -- put -------------------------------------------------------------------------------
    def _check_put(self, msgs: list[Message]) -> tuple[PutMessageStatus, str] | None:
        if self.shutdown_done or not self.running:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is not running"
        if self.role is BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "a slave does not accept writes"
        if not self.writeable:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, self.not_writeable_reason
        held = self.commitlog.lock_held_ms(self.clock_ms())
        if held > self.config.os_page_cache_busy_time_out_mills:
            return PutMessageStatus.OS_PAGECACHE_BUSY, f"put lock held for {held} ms"
        valid = self._valid_topics
        for m in msgs:
            if m.topic not in valid:
                problem = topic_problem(m.topic)
                if problem is not None:
                    return PutMessageStatus.MESSAGE_ILLEGAL, problem
                valid.add(m.topic)
            if m.queue_id < 0:
                return PutMessageStatus.MESSAGE_ILLEGAL, f"bad queue id {m.queue_id}"
        return None

    def append(self, msgs: list[Message]) -> PutMessageResult:
        """Appends without waiting for disk; see put_messages / put_messages_async."""
        problem = self._check_put(msgs)
        if problem is not None:
            status, reason = problem
            return PutMessageResult(status, AppendResult(status, error=reason))
        result = self.commitlog.put_messages(msgs)
        if result.status is PutMessageStatus.PUT_OK:
            self.put_count += len(msgs)
            if self._reput_idle:
                self._reput_idle = False
                self._reput_service.wake()
        return PutMessageResult(result.status, result)

    def put_message(self, msg: Message) -> PutMessageResult:
        return self.put_messages([msg])

    def put_messages(self, msgs: list[Message]) -> PutMessageResult:
        """Appends; under SYNC_FLUSH blocks this thread until flushed (or the timeout)."""
        result = self.append(msgs)
        if result.ok and self._sync_flush:
            assert result.append is not None
            if not self.flush_waiters.wait(result.append.end_offset,
                                           self.config.sync_flush_timeout / 1000):
                result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        return result

    async def put_messages_async(self, msgs: list[Message]) -> PutMessageResult:
        """As put_messages, but awaits the flush on the running event loop."""
        result = self.append(msgs)
        if result.ok and self._sync_flush:
            assert result.append is not None
            if not await self.flush_waiters.wait_async(result.append.end_offset,
                                                       self.config.sync_flush_timeout / 1000):
                result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        return result

    # -- flush services --------------------------------------------------------------------
    def _flush_commitlog_step(self) -> float:
        cfg = self.config
        if self._sync_flush:
            if len(self.flush_waiters) == 0:
                return 0.01
            self._flush_commitlog_now()
            return 0.0 if len(self.flush_waiters) else 0.01
        now = monotonic()
        thorough = now - self._last_thorough_flush >= cfg.flush_commit_log_thorough_interval / 1e3
        self.commitlog.commit()
        if thorough or self.commitlog.queue.dirty_pages() >= cfg.flush_commit_log_least_pages:
            if thorough:
                self._last_thorough_flush = now
            self._flush_commitlog_now()
        return cfg.flush_interval_commit_log / 1000

    def _flush_commitlog_now(self) -> None:
        ts = self.commitlog.last_store_timestamp
        flushed = self.commitlog.flush()
        if self.checkpoint is not None and ts:
            self.checkpoint.physic_msg_timestamp = ts
        self.flush_waiters.advance(flushed)

    def _flush_logics_step(self) -> float:
        self._flush_logics(force=False)
        return self.config.flush_interval_consume_queue / 1000

    def _flush_logics(self, force: bool) -> None:
        ts = self._last_dispatched_ts
        for cq in list(self.consume_queues.values()):
            cq.flush()
        self.index.flush()
        if self.checkpoint is not None and ts:
            self.checkpoint.logics_msg_timestamp = ts
            self.checkpoint.index_msg_timestamp = ts
            self.checkpoint.flush()

    # -- dispatch ("reput") ----------------------------------------------------------------
    def _reput_step(self) -> float:
        if self.commitlog.queue.write_buffer:
            self.commitlog.commit()
        if self.do_reput():
            self._reput_idle = False
            return 0.0
        self._reput_idle = True
        return 0.05

    def do_reput(self) -> int:
        """Dispatches committed records past reput_from_offset; returns how many."""
        with self._reput_lock:
            return self._do_reput()

    def _do_reput(self) -> int:
        count = 0
        touched: dict[tuple[str, int], ConsumeQueue] = {}
        hints = self.commitlog.dispatch_hints
        while self.reput_from_offset < self.commitlog.max_offset:
            if hints:
                count += self._dispatch_hints(hints, touched)
                if self.reput_from_offset >= self.commitlog.max_offset:
                    break
            if self.reput_from_offset < self.commitlog.min_offset:
                log.warning("reput offset %d below commitlog min %d: skipping ahead",
                            self.reput_from_offset, self.commitlog.min_offset)
                self.reput_from_offset = self.commitlog.min_offset
            got = self.commitlog.read_file_data(self.reput_from_offset)
            if got is None:
                break
            mf, data = got
            base = self.reput_from_offset
            pos = 0
            while True:
                r = parse_dispatch(data, pos, check_crc=False)
                if r == 0:
                    break
                if isinstance(r, int):  # end-of-file blank
                    pos = mf.file_tail_offset - base
                    break
                self.dispatch(r, touched)
                pos += r.msg_size
                count += 1
            if pos == 0:
                break
            self.reput_from_offset = base + pos
        if touched:
            self._notify_arriving(touched)
        return count

    def _dispatch_hints(self, hints: collections.deque[DispatchRequest],
                        touched: dict[tuple[str, int], ConsumeQueue]) -> int:
        """Dispatches requests the append path left, while they line up with reput_from."""
        count = 0
        end = self.commitlog.max_offset
        offset = self.reput_from_offset
        dispatch = self.dispatch
        while hints:
            r = hints[0]
            if r.commit_log_offset < offset:  # already dispatched (or truncated away)
                hints.popleft()
                continue
            if r.commit_log_offset != offset or offset + r.msg_size > end:
                break
            hints.popleft()
            dispatch(r, touched)
            offset += r.msg_size
            count += 1
        self.reput_from_offset = offset
        return count

    def dispatch(self, r: DispatchRequest, touched: dict[tuple[str, int], ConsumeQueue]) -> None:
        if r.sys_flag & TRANSACTION_TYPE_MASK in _CQ_TYPES:
            key = (r.topic, r.queue_id)
            cq = self.consume_queues.get(key)
            if cq is None:
                cq = self._new_consume_queue(r.topic, r.queue_id)
            cq.put(r.commit_log_offset, r.msg_size, r.tags_code, r.queue_offset)
            touched[key] = cq
        if self.config.message_index_enable:  # the index skips records it already has
            keys = r.keys.split() if r.keys else []
            if r.uniq_key:
                keys.append(r.uniq_key)
            if keys:
                self.index.build_index(r.topic, keys, r.commit_log_offset, r.store_timestamp)
        self._last_dispatched_ts = r.store_timestamp

    def _notify_arriving(self, touched: dict[tuple[str, int], ConsumeQueue]) -> None:
        for (topic, queue_id), cq in touched.items():
            for listener in self.arriving_listeners:
                try:
                    listener(topic, queue_id, cq.max_offset_in_queue)
                except Exception:
                    log.exception("message arriving listener failed")

    @property
    def dispatch_behind_bytes(self) -> int:
        return max(0, self.commitlog.max_offset - self.reput_from_offset)

    # -- expired files and disk space ------------------------------------------------------
    def _clean_step(self) -> float:
        self.clean_expired_files()
        return self.config.clean_resource_interval / 1000

    def clean_expired_files(self, force_time: bool = False) -> int:
        """Deletes expired commitlog files (at deleteWhen, or when the disk is filling) and
        the consume-queue / index files behind them; guards against a full disk."""
        from store.cleaning import clean_expired_files

        return clean_expired_files(self, force_time)

    # -- reading ---------------------------------------------------------------------------
    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.consume_queues.get((topic, queue_id))

    get_message = reading.get_message
    look_message_by_offset = reading.look_message_by_offset
    look_message_by_msg_id = reading.look_message_by_msg_id
    query_message = reading.query_message
    get_offset_in_queue_by_time = reading.get_offset_in_queue_by_time
    get_message_store_timestamp = reading.get_message_store_timestamp

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.max_offset_in_queue if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.min_offset_in_queue if cq else 0

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for (t, q) in self.consume_queues if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for (t, _) in self.consume_queues})

    # -- replication interface (ha/) -------------------------------------------------------
    @property
    def max_phy_offset(self) -> int:
        return self.commitlog.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commitlog.min_offset

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes:
        """Committed commitlog bytes from `offset`, never crossing a file."""
        return self.commitlog.read(offset, max_bytes)

    def append_commitlog(self, offset: int, data: bytes) -> None:
        """Slave side: bytes replicated from the master, at exactly our max offset (or, for
        an empty store, at a file boundary: where the master's retained data starts)."""
        empty = not self.commitlog.queue.files
        self.commitlog.append_data(offset, data)
        if empty:
            self.reput_from_offset = offset
        self._reput_service.wake() if self._services else None

    # -- runtime info ----------------------------------------------------------------------
    def runtime_info(self) -> dict[str, str]:
        return {
            "commitLogMinOffset": str(self.commitlog.min_offset),
            "commitLogMaxOffset": str(self.commitlog.max_offset),
            "commitLogFlushedOffset": str(self.commitlog.flushed_offset),
            "dispatchBehindBytes": str(self.dispatch_behind_bytes),
            "putMessageTimesTotal": str(self.put_count),
            "getMessageTimesTotal": str(self.get_count),
            "writeable": str(self.writeable).lower(),
            "notWriteableReason": self.not_writeable_reason,
        }


def _disk_used_ratio(path: str) -> float:
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    free = st.f_bavail * st.f_frsize
    return 0.0 if total == 0 else (total - free) / total
