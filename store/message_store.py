"""DefaultMessageStore: the store's one interface (put, get, query, offsets, recovery)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from store import cq_snapshot, reading, reput
from store.checkpoint import StoreCheckpoint
from store.commitlog import AppendResult, CommitLog
from store.config import StoreConfig
from store.constants import (
    BrokerRole,
    FlushDiskType,
    PutMessageStatus,
)
from store.consume_queue import ConsumeQueue
from store.consume_queue_store import ArrivingListener, ConsumeQueueStore
from store.disk_full import CHECK_INTERVAL_S, DiskFull
from store.histogram import LatencyHistogram
from store.index import INDEX_DIR_NAME, IndexService
from store.message import Message
from store.recovery import RestoredQueues, cut_at, recover
from store.services import ServiceThread, monotonic
from store.waiters import OffsetWaiters

log = logging.getLogger(__name__)

# While records keep coming, the dispatch service looks for them this often instead of being
# woken by each append (as RocketMQ's reput service, which sleeps 1 ms between passes): a
# wake-up and a pass per one-message send cost the broker ~50 µs of CPU per message.
REPUT_POLL_INTERVAL_S = 0.001
# A cause of refusing writes (refuse_writes; the disk guard's is cleaning.DISK_RATIO).
DISK_FULL = "disk full"  # no space for a file (store/disk_full.py)


@dataclasses.dataclass(slots=True)
class PutMessageResult:
    status: PutMessageStatus
    append: AppendResult | None = None

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


def _release_puts(requests: list[tuple[list[Message], asyncio.Future[PutMessageResult]]],
                  results: list[PutMessageResult], ok: bool) -> None:
    """Completes the puts of one round once the flush covered them (ok) or timed out; those
    that failed at append were completed then."""
    for (_, fut), result in zip(requests, results, strict=True):
        if not fut.done():
            if not ok and result.status is PutMessageStatus.PUT_OK:
                result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
            fut.set_result(result)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class DefaultMessageStore:
    def __init__(self, config: StoreConfig, *, clock_ms: Callable[[], int] = _wall_clock_ms,
                 disk_usage: Callable[[str], float] | None = None) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.root = Path(config.store_path_root_dir)
        self.commitlog = CommitLog(config, clock_ms)
        # Why writes are refused, by cause (empty: they are not); `writeable` and
        # `not_writeable_reason` follow it (the put path reads only `writeable`).
        self._refusals: dict[str, str] = {}
        self._refusals_lock = threading.Lock()
        self.writeable = True
        self.not_writeable_reason = ""
        self.disk_full = DiskFull(str(self.root), self._disk_full_changed)
        self.disk_full.resume_steps += [self._make_abort_file, self._allocate_checkpoint,
                                        self._write_held_entries]
        self.commitlog.disk_full = self.disk_full
        self.queues = ConsumeQueueStore(self.root, config, self.disk_full)
        # The commitlog min offset the consume queues and index last followed (cleaning).
        self.cleaned_min_offset = -1
        self.index = IndexService(self.root / INDEX_DIR_NAME, config.max_hash_slot_num,
                                  config.max_index_num)
        self.checkpoint: StoreCheckpoint | None = None
        self.flush_waiters = OffsetWaiters(monotonic)
        self.reput_from_offset = 0
        # f(topic, queue id, max offset in queue) after messages arrived in a queue.
        self.arriving_listeners: list[ArrivingListener] = self.queues.arriving_listeners
        # f(committed_offset) after buffered appends became readable (write-buffer mode only;
        # otherwise an append is readable at once).
        self.commit_listeners = self.commitlog.commit_listeners
        self.commit_listeners.append(self._on_commit)
        self._next_clean = 0.0  # when the clean service next deletes files (monotonic)
        self.running = False
        self.shutdown_done = False
        self.role = config.broker_role
        self.disk_usage = disk_usage or _disk_used_ratio
        self.put_count = 0
        # Seconds of each commitlog flush that wrote something (the flush service's thread).
        self.flush_latency = LatencyHistogram()
        self.get_count = 0
        self.disk_fall_behind: dict[str, int] = {}  # group -> bytes, from the last pull
        self.last_dispatched_ts = 0
        self._reput_idle = False
        self._reput_lock = threading.Lock()
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self.commitlog.allocator.durable_fill = self._sync_flush
        # Under SYNC_FLUSH with the write buffer, appends become readable when the group
        # commit service commits them, and _on_commit wakes the dispatch service then.
        self._wake_reput_on_append = not (self._sync_flush and config.use_write_buffer)
        self._last_thorough_flush = monotonic()
        self._last_clean = 0.0
        self._services: list[ServiceThread] = []
        self.recovered_from_crash = False
        self.load_problem = ""
        # Puts of each event loop waiting for its next iteration (SYNC_FLUSH, see
        # put_messages_async).
        self._pending_puts: dict[asyncio.AbstractEventLoop, list[
            tuple[list[Message], asyncio.Future[PutMessageResult]]]] = {}

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def abort_file(self) -> Path:
        return self.root / "abort"

    def refuse_writes(self, cause: str, reason: str | None) -> None:
        """Puts answer SERVICE_NOT_AVAILABLE with `reason` while any cause holds one; None
        lifts this cause (any thread)."""
        with self._refusals_lock:
            if reason is None:
                self._refusals.pop(cause, None)
            else:
                self._refusals[cause] = reason
            self.not_writeable_reason = "; ".join(self._refusals.values())
            self.writeable = not self._refusals

    def refusing(self, cause: str) -> bool:
        return cause in self._refusals

    def _disk_full_changed(self, reason: str | None) -> None:
        self.refuse_writes(DISK_FULL, reason)
        if reason is not None and self._services:
            self._clean_service.wake()  # it looks for space every second from now on

    def load(self) -> bool:
        """Maps every file, recovers after a clean stop or a crash, writes the abort file.

        The garbage collector is off meanwhile and the objects made are frozen after (left out
        of later collections): hundreds of thousands of consume queues made its full
        collections walk millions of objects, during the load and then on every one."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._load()
        finally:
            if enabled:
                gc.enable()
            gc.freeze()

    def _load(self) -> bool:
        self.root.mkdir(parents=True, exist_ok=True)
        crashed = self.abort_file.exists()
        self.recovered_from_crash = crashed
        self.commitlog.queue.load()
        restored = self.queues.restore(crashed, self.commitlog.queue.files)
        if restored is None:
            self.queues.table.clear()
            self.queues.load()
        self.index.load()
        self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
        if self.checkpoint.allocation_error is not None:
            self.disk_full.report(self.checkpoint.allocation_error,
                                  "cannot allocate the checkpoint file")
        recover(self, crashed, RestoredQueues(*restored) if restored is not None else None)
        try:
            self._make_abort_file()
        except OSError as e:  # no writes until it is there: a crash must read as one
            if not self.disk_full.report(e, "cannot create the abort file"):
                raise
        return True

    def _make_abort_file(self) -> None:
        self.abort_file.touch()

    def _allocate_checkpoint(self) -> None:
        if self.checkpoint is not None and not self.checkpoint.allocated:
            self.checkpoint.allocate()

    def _write_held_entries(self) -> None:
        """Writes the consume-queue entries and index keys held for lack of space; raises
        ENOSPC while some still cannot be written."""
        with self._reput_lock:
            self.queues.write_held()
            if self.config.message_index_enable:
                self.index.write_held()

    def _queue_refusal(self, msgs: list[Message]) -> PutMessageResult | None:
        reason = self.queues.refusal(msgs)
        if reason is None:
            return None
        status = PutMessageStatus.CREATE_MAPPED_FILE_FAILED
        return PutMessageResult(status, AppendResult(status, error=reason))

    def start(self) -> None:
        self.commitlog.queue.prepare_next_file()
        flush = ServiceThread("GroupCommitService" if self._sync_flush else "FlushRealTimeService",
                              self._flush_commitlog_step)
        self._flush_service = flush
        self.flush_waiters.on_wait = flush.wake
        self._reput_service = ServiceThread("ReputMessageService", self._reput_step)
        self._clean_service = ServiceThread("CleanCommitLogService", self._clean_step)
        self._services = [
            flush,
            self._reput_service,
            ServiceThread("FlushConsumeQueueService", self._flush_logics_step),
            self._clean_service,
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
            try:
                self.checkpoint.close()
            except OSError as e:  # as in _flush_checkpoint
                if not self.disk_full.report(e, "cannot allocate the checkpoint file"):
                    raise
        self.commitlog.close()
        # The queues hold no fd of their own, and _flush_logics forced them all to disk.
        self.queues.handles.close_all()
        snapshot = self.queues.encode_snapshot(cq_snapshot.CLEAN, self.reput_from_offset)
        if snapshot is not None:
            self.queues.write_snapshot(*snapshot)  # failed: the next start scans the queues
        else:  # a RUNNING one left would be taken for positions at a clean stop
            self.queues.discard_snapshot()
        self.index.close()
        if self.abort_file.exists():
            self.abort_file.unlink()

    def destroy(self) -> None:
        """Removes every file of the store (tests and `resetOffset`-like admin only)."""
        shutil.rmtree(self.root, ignore_errors=True)

    # -- put -------------------------------------------------------------------------------
    def _check_put(self) -> tuple[PutMessageStatus, str] | None:
        """The store-wide checks of SPEC §2.7; the commitlog checks each message."""
        if self.shutdown_done or not self.running:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store is not running"
        if self.role is BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "a slave does not accept writes"
        if not self.writeable:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, self.not_writeable_reason
        if self.commitlog.begin_time_in_lock:  # someone is appending: for how long?
            held = self.commitlog.lock_held_ms(self.clock_ms())
            if held > self.config.os_page_cache_busy_time_out_mills:
                return PutMessageStatus.OS_PAGECACHE_BUSY, f"put lock held for {held} ms"
        return None

    def append(self, msgs: list[Message]) -> PutMessageResult:
        """Appends without waiting for disk; see put_messages / put_messages_async."""
        if not self.running or self.role is BrokerRole.SLAVE or not self.writeable or (
                self.commitlog.begin_time_in_lock):
            problem = self._check_put()
            if problem is not None:
                status, reason = problem
                return PutMessageResult(status, AppendResult(status, error=reason))
        if self.queues.failed:
            refused = self._queue_refusal(msgs)
            if refused is not None:
                return refused
        result = self.commitlog.put_messages(msgs)
        if result.status is PutMessageStatus.PUT_OK:
            self.put_count += len(msgs)
            if self._reput_idle and self._wake_reput_on_append:
                self._wake_reput()
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

    def put_messages_async(self, msgs: list[Message]) -> asyncio.Future[PutMessageResult]:
        """As put_messages, but a future of the running event loop: await it for the result
        (under SYNC_FLUSH it completes once the flush covered the messages).

        Under SYNC_FLUSH the puts of one loop iteration are appended together, at the next
        one: one encode / lock / copy and one flush wait for all of them, instead of one per
        caller (the loop thread, not the disk, bounded many concurrent writers). A plain
        function, not a coroutine: one frame less to create and resume per put."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PutMessageResult] = loop.create_future()
        if not self._sync_flush:
            try:
                fut.set_result(self.append(msgs))
            except Exception as e:  # raised where the caller awaits, as from a coroutine
                fut.set_exception(e)
            return fut
        pending = self._pending_puts.get(loop)
        if pending is None:
            pending = self._pending_puts[loop] = []
            loop.call_soon(self._append_pending, loop)
        pending.append((msgs, fut))
        return fut

    def _append_pending(self, loop: asyncio.AbstractEventLoop) -> None:
        requests = self._pending_puts.pop(loop)
        try:
            if len(requests) == 1:
                results = [self.append(requests[0][0])]
            else:
                results = self.append_groups([msgs for msgs, _ in requests])
            ok = PutMessageStatus.PUT_OK
            last = None  # groups are appended in order: the last one appended ends furthest
            for (_, fut), result in zip(requests, results, strict=True):
                if result.status is ok:
                    last = result.append
                elif not fut.done():  # failed at once: nothing to wait for
                    fut.set_result(result)
            if last is not None:
                self.flush_waiters.wait_callback(
                    last.wrote_offset + last.wrote_bytes, self.config.sync_flush_timeout / 1000,
                    functools.partial(_release_puts, requests, results))
        except Exception as e:  # never leave a caller waiting
            log.exception("appending %d coalesced puts failed", len(requests))
            for _, fut in requests:
                if not fut.done():
                    fut.set_exception(e)

    def append_groups(self, groups: list[list[Message]]) -> list[PutMessageResult]:
        """append() for several callers' message lists at once (see put_messages_async)."""
        problem = self._check_put()
        if problem is not None:
            status, reason = problem
            return [PutMessageResult(status, AppendResult(status, error=reason)) for _ in groups]
        refused: dict[int, PutMessageResult] = {}
        if self.queues.failed:
            for i, msgs in enumerate(groups):
                r = self._queue_refusal(msgs)
                if r is not None:
                    refused[i] = r
        kept = [g for i, g in enumerate(groups) if i not in refused] if refused else groups
        out = []
        for msgs, r in zip(kept, self.commitlog.put_message_groups(kept), strict=True):
            if r.status is PutMessageStatus.PUT_OK:
                self.put_count += len(msgs)
            out.append(PutMessageResult(r.status, r))
        for i in sorted(refused):  # back in their callers' places
            out.insert(i, refused[i])
        if self._reput_idle and self._wake_reput_on_append:
            self._wake_reput()
        return out

    def _wake_reput(self) -> None:
        self._reput_idle = False
        self._reput_service.wake()

    def _on_commit(self, committed: int) -> None:
        """Buffered appends became readable: the dispatch service may be asleep."""
        if self._reput_idle and self._services:
            self._wake_reput()

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
        before = self.commitlog.flushed_offset
        started = time.perf_counter()
        flushed = self.commitlog.flush()
        if flushed > before:
            self.flush_latency.observe(time.perf_counter() - started)
        if self.checkpoint is not None and ts:
            self.checkpoint.physic_msg_timestamp = ts
        self.flush_waiters.advance(flushed)

    def _flush_logics_step(self) -> float:
        self._flush_logics(force=False)
        return self.config.flush_interval_consume_queue / 1000

    def _flush_logics(self, force: bool) -> None:
        ts = self.last_dispatched_ts
        snapshot = None
        interval = self.config.consume_queue_snapshot_interval
        queues = self.queues
        if not force and interval > 0 and monotonic() >= queues.next_snapshot:
            queues.next_snapshot = monotonic() + interval / 1000
            # Encoded before the queue files are forced below: what it records is on disk
            # before it is written.
            snapshot = queues.encode_snapshot(cq_snapshot.RUNNING, self.reput_from_offset)
        queues.flush_dirty()
        self.index.flush()
        if self.checkpoint is not None and ts:
            self.checkpoint.logics_msg_timestamp = ts
            self.checkpoint.index_msg_timestamp = ts
            self._flush_checkpoint()
        if snapshot is not None:
            queues.write_snapshot(*snapshot)

    def _flush_checkpoint(self) -> None:
        assert self.checkpoint is not None
        try:
            self.checkpoint.flush()
        except OSError as e:  # its timestamps only lag: recovery after a crash reads more
            if not self.disk_full.report(e, "cannot allocate the checkpoint file"):
                raise

    # -- dispatch ("reput") ----------------------------------------------------------------
    def _reput_step(self) -> float:
        # Buffered appends become readable when committed. With a flush waiter the group
        # commit service is about to commit (and wakes this service): committing here too
        # would only contend with it for the GIL just before its fdatasync.
        commitlog = self.commitlog
        if commitlog.queue.write_buffer and not (self._sync_flush and len(self.flush_waiters)):
            commitlog.commit()
        end = commitlog.max_offset
        done = self.do_reput()
        if self.queues.failed:
            with self._reput_lock:
                self.queues.retry_failed()
        # Idle first, then look again: what is appended or committed after this look finds
        # the flag set and wakes the service, so no wake-up is lost and, when the pass got
        # everything, no empty pass follows (it competed with the group commit for the GIL).
        self._reput_idle = True
        if self.reput_from_offset < commitlog.max_offset and (done or commitlog.max_offset != end):
            self._reput_idle = False
            return 0.0
        if done:  # records are coming: look again soon, appends need not wake it
            self._reput_idle = False
            return REPUT_POLL_INTERVAL_S
        return 0.05

    def do_reput(self) -> int:
        """Dispatches committed records past reput_from_offset; returns how many."""
        with self._reput_lock:
            return reput.do_reput(self)

    def cut_undispatched_tail(self) -> int:
        """Controller mode, a slave made master: dispatches every whole record, then cuts
        what follows the last one (a record its old master sent only in part). Returns the
        new max offset."""
        with self._reput_lock:
            reput.do_reput(self)
            end = self.reput_from_offset
            if self.commitlog.max_offset > end:
                log.warning("cutting %d bytes of an incomplete record at commitlog offset %d",
                            self.commitlog.max_offset - end, end)
                self.commitlog.queue.truncate_dirty_files(end)
            # A slave's appends never touched the next queue offsets: take them from the
            # queues (RocketMQ's recoverTopicQueueTable), or puts would reuse offsets.
            self._queue_table_from_queues()
            return end

    def _queue_table_from_queues(self) -> None:
        table = self.commitlog.topic_queue_table
        for cq in self.queues.table.values():
            if cq.max_offset_in_queue:
                table[(cq.topic, cq.queue_id)] = cq.max_offset_in_queue
            else:
                table.pop((cq.topic, cq.queue_id), None)

    def truncate_before_start(self, offset: int) -> None:
        """Controller mode, a broker that follows a new master: cuts the commitlog, its
        consume queues and index at `offset` (its own tail the new master never had), on a
        loaded store that is not started yet."""
        if self.running:
            raise RuntimeError("truncate_before_start on a running store")
        if offset >= self.commitlog.max_offset:
            return
        log.warning("truncating the commitlog from %d to %d (never replicated to the new "
                    "master)", self.commitlog.max_offset, offset)
        cut_at(self, offset)
        self._queue_table_from_queues()
        self.reput_from_offset = min(self.reput_from_offset, offset)

    @property
    def dispatch_behind_bytes(self) -> int:
        return max(0, self.commitlog.max_offset - self.reput_from_offset)

    # -- expired files and disk space ------------------------------------------------------
    def _clean_step(self) -> float:
        """Deletes files every cleanResourceInterval; meanwhile, while the disk is full,
        looks every second whether writes can resume."""
        now = monotonic()
        if now >= self._next_clean:
            self._next_clean = now + self.config.clean_resource_interval / 1000
            self.clean_expired_files()
        if self.disk_full.active:
            self.disk_full.check()
            return min(CHECK_INTERVAL_S, max(0.0, self._next_clean - monotonic()))
        return max(0.0, self._next_clean - monotonic())

    def clean_expired_files(self, force_time: bool = False) -> int:
        """Deletes expired commitlog files (at deleteWhen, or when the disk is filling) and
        the consume-queue / index files behind them; guards against a full disk."""
        from store.cleaning import clean_expired_files

        return clean_expired_files(self, force_time)

    # -- reading ---------------------------------------------------------------------------
    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.table.get((topic, queue_id))

    get_message = reading.get_message
    look_message_by_offset = reading.look_message_by_offset
    look_message_by_msg_id = reading.look_message_by_msg_id
    query_message = reading.query_message
    get_offset_in_queue_by_time = reading.get_offset_in_queue_by_time
    get_message_store_timestamp = reading.get_message_store_timestamp
    get_queue_bytes = reading.get_queue_bytes

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.max_offset_in_queue if cq else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.min_offset_in_queue if cq else 0

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(q for (t, q) in self.queues.table if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for (t, _) in self.queues.table})

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
        try:
            self.commitlog.append_data(offset, data)
        except OSError as e:  # the link closes; the slave pulls again once there is space
            self.disk_full.report(e, "cannot allocate a commitlog file of "
                                     f"{self.commitlog.file_size} bytes",
                                  self.commitlog.file_size)
            raise
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
            # RocketMQ's commitLogDiskRatio: how full the commitlog's disk is (0..1)
            "commitLogDiskRatio": f"{self.disk_usage(str(self.commitlog.queue.store_path)):.4f}",
        }


def _disk_used_ratio(path: str) -> float:
    """How full the disk is, as `df` shows it: used / (used + available to us). Blocks
    reserved for root count as neither (total - available would count them as used: on a
    disk with a large reserve that reads 85 % full at 33 % used, and the store would delete
    files it should keep)."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = used + st.f_bavail * st.f_frsize
    return 0.0 if usable == 0 else used / usable
