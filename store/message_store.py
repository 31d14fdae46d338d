"""DefaultMessageStore: the store's one interface (put, get, query, offsets, recovery)."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import gc
import logging
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from store import cq_snapshot, reading, reput
from store.checkpoint import StoreCheckpoint
from store.commitlog import AppendResult, CommitLog
from store.config import StoreConfig
from store.constants import (
    CQ_STORE_UNIT_SIZE,
    BrokerRole,
    FlushDiskType,
    PutMessageStatus,
)
from store.consume_queue import ConsumeQueue
from store.cq_files import FileHandles, open_files_cap, sync_filesystem
from store.disk_full import CHECK_INTERVAL_S, DiskFull
from store.histogram import LatencyHistogram
from store.index import INDEX_DIR_NAME, IndexService
from store.message import Message
from store.recovery import RestoredQueues, recover
from store.services import ServiceThread, monotonic
from store.waiters import OffsetWaiters

log = logging.getLogger(__name__)

ArrivingListener = Callable[[str, int, int], None]  # topic, queueId, max offset in queue
INT = struct.Struct(">i")
# Dirty consume queues from which one syncfs replaces an fdatasync per file.
SYNCFS_MIN_QUEUES = 64
QUEUE_RETRY_INTERVAL_S = 5.0  # failed consume queues are tried again this often
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
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.cq_root = str(self.root / "consumequeue")
        self.cq_handles = FileHandles(open_files_cap(config.consume_queue_open_files))
        # Queues written since their last flush (the flush service visits only these).
        self._dirty_queues: set[ConsumeQueue] = set()
        # Queues changed since the consume-queue snapshot last encoded them (same lock).
        self._snapshot_changed: set[ConsumeQueue] = set()
        self._dirty_lock = threading.Lock()
        self.snapshot_path = str(self.root / cq_snapshot.FILE_NAME)
        self._snapshot_encoder = cq_snapshot.SnapshotEncoder()
        self._snapshot_encoded = False  # the encoder holds every queue
        # Bumped when files are deleted: a snapshot encoded before must not be written.
        self._snapshot_generation = 0
        self._snapshot_lock = threading.Lock()
        self._next_snapshot = 0.0  # the first flush round after start writes one
        self._snapshot_written: tuple[int, int] | None = None  # (S, generation) last written
        # Queues whose writes fail (e.g. a file that cannot be opened): their puts answer
        # CREATE_MAPPED_FILE_FAILED, dispatch to the others goes on, a retry runs now and then.
        self.failed_queues: dict[tuple[str, int], ConsumeQueue] = {}
        # The commitlog min offset the consume queues and index last followed (cleaning).
        self.cleaned_min_offset = -1
        self._next_queue_retry = 0.0
        self._unlogged_queue_failures = 0
        self.index = IndexService(self.root / INDEX_DIR_NAME, config.max_hash_slot_num,
                                  config.max_index_num)
        self.checkpoint: StoreCheckpoint | None = None
        self.flush_waiters = OffsetWaiters(monotonic)
        self.reput_from_offset = 0
        self.arriving_listeners: list[ArrivingListener] = []
        # f(committed_offset) after buffered appends became readable (write-buffer mode only;
        # otherwise an append is readable at once).
        self.commit_listeners = self.commitlog.commit_listeners
        self.commit_listeners.append(self._on_commit)
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
        # Consume queues failed for lack of space: writes resume once they are written again.
        self._queues_without_space: set[tuple[str, int]] = set()
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
        self._last_dispatched_ts = 0
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
        restored = self._restore_consume_queues(crashed)
        if restored is None:
            self.consume_queues.clear()
            self._load_consume_queues()
        self.index.load()
        self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
        if self.checkpoint.allocation_error is not None:
            self.disk_full.report(self.checkpoint.allocation_error,
                                  "cannot allocate the checkpoint file")
        recover(self, crashed, restored)
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
            if self.failed_queues:
                self._next_queue_retry = monotonic()
                self.retry_failed_queues()
            if self._queues_without_space:
                raise OSError(errno.ENOSPC, "consume queues still cannot be written")
            if self.config.message_index_enable:
                self.index.write_held()

    def _restore_consume_queues(self, crashed: bool) -> RestoredQueues | None:
        """The queues' positions from the snapshot (store/cq_snapshot.py), or None when there
        is none or it does not fit (one log line why; every queue is scanned then)."""
        snap = cq_snapshot.read(self.snapshot_path)
        if snap is None:
            if crashed or os.path.isdir(self.cq_root):
                log.warning("consume-queue snapshot not used (there is none): scanning every "
                            "queue")
            return None
        problem = snap if isinstance(snap, str) else self._snapshot_problem(snap, crashed)
        if not problem:
            assert not isinstance(snap, str)
            new_topics = cq_snapshot.restore(snap, self.cq_root, self._new_consume_queue,
                                             self._snapshot_encoder)
            if isinstance(new_topics, str):
                problem = new_topics
        if problem:
            log.warning("consume-queue snapshot not used (%s): scanning every queue", problem)
            cq_snapshot.discard(self.snapshot_path)
            self.consume_queues.clear()
            self._snapshot_encoder.clear()
            return None
        assert not isinstance(snap, str) and not isinstance(new_topics, str)
        self._snapshot_encoded = True
        restored = RestoredQueues(snap.offset)
        if new_topics:  # made after the snapshot: their queues are read from disk
            before = set(self.consume_queues)
            self._load_consume_queues(new_topics)
            restored.from_disk = [cq for key, cq in self.consume_queues.items()
                                  if key not in before]
            self.mark_snapshot_changed(restored.from_disk)
        if snap.kind == cq_snapshot.CLEAN:
            # Kept for the run that follows: after a crash it re-dispatches from S.
            try:
                cq_snapshot.write_file(self.snapshot_path, snap.as_running())
            except OSError as e:
                if not self.disk_full.report(e, "cannot write the consume-queue snapshot"):
                    log.warning("consume-queue snapshot not kept for a crash (%s): the next "
                                "flush round writes one", e)
                cq_snapshot.discard(self.snapshot_path)
        return restored

    def _snapshot_problem(self, snap: cq_snapshot.Snapshot, crashed: bool) -> str:
        """Why the snapshot cannot be used at this start ("" when it can)."""
        cq_size = self.consume_queue_file_size
        if snap.cq_file_size != cq_size:
            return f"written for consume-queue files of {snap.cq_file_size} bytes, not {cq_size}"
        if crashed and snap.kind == cq_snapshot.CLEAN:
            return "written at a clean stop, yet the abort file says the store crashed"
        if not crashed and snap.kind != cq_snapshot.CLEAN:
            return "written while running: the clean stop did not write its own"
        if crashed and snap.boot != cq_snapshot.boot_id():
            return "written in another boot of the machine, whose page cache is lost"
        files = self.commitlog.queue.files
        if not files:
            return "no commitlog"
        if not files[0].file_from_offset <= snap.offset <= files[-1].file_tail_offset:
            return (f"its commitlog offset {snap.offset} is outside the commitlog "
                    f"({files[0].file_from_offset}..{files[-1].file_tail_offset})")
        return ""

    def _load_consume_queues(self, only: set[str] | None = None) -> None:
        """Loads the queues of every topic directory (or of the topics `only`)."""
        cq_root = self.cq_root
        if not os.path.isdir(cq_root):
            return
        with os.scandir(cq_root) as topics:
            topic_dirs = sorted((e.name, e.path) for e in topics
                                if e.is_dir() and (only is None or e.name in only))
        for topic, path in topic_dirs:
            try:
                with os.scandir(path) as queues:
                    queue_dirs = sorted((int(e.name), e.path) for e in queues
                                        if e.name.isdigit() and e.is_dir())
            except OSError as e:  # this topic only: the others load
                log.error("consume queues of topic %s not loaded: %s", topic, e)
                continue
            for queue_id, qpath in queue_dirs:
                cq = self._new_consume_queue(topic, queue_id)
                try:
                    cq.load(os.listdir(qpath))
                except (OSError, ValueError) as e:  # this queue only: the others load
                    self.queue_failed(cq, e, retry=False)

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(topic, queue_id, self.cq_root,
                          self.config.mapped_file_size_consume_queue, self.cq_handles)
        self.consume_queues[(topic, queue_id)] = cq
        return cq

    def mark_dirty(self, cqs: list[ConsumeQueue]) -> None:
        with self._dirty_lock:
            self._dirty_queues.update(cqs)
            self._snapshot_changed.update(cqs)

    def mark_snapshot_changed(self, cqs: list[ConsumeQueue]) -> None:
        with self._dirty_lock:
            self._snapshot_changed.update(cqs)

    # -- queues that fail ------------------------------------------------------------------
    def queue_failed(self, cq: ConsumeQueue, err: BaseException, retry: bool = True) -> None:
        """Writing (or loading) `cq` failed: its puts are refused with the reason until a
        retry succeeds; one log line, and while failures go on one summary per retry round.
        A full disk is the store's disk-full state instead (its own log line)."""
        key = (cq.topic, cq.queue_id)
        first = len(self.failed_queues) == len(self._queues_without_space)
        cq.failed = f"consume queue {cq.topic}-{cq.queue_id} cannot be written: {err}"
        cq.retry = retry
        self.failed_queues[key] = cq
        if retry and self.disk_full.report(err, f"cannot write consume queue {cq.topic}-"
                                                f"{cq.queue_id}"):
            self._queues_without_space.add(key)
        elif first:
            log.error("%s%s", cq.failed, "; dispatch goes on for the other queues, puts to it "
                      "answer CREATE_MAPPED_FILE_FAILED" if retry else "")
            self._unlogged_queue_failures = 0
        else:
            self._unlogged_queue_failures += 1
        if not self._next_queue_retry:
            self._next_queue_retry = monotonic() + QUEUE_RETRY_INTERVAL_S

    def retry_failed_queues(self) -> None:
        """Writes the entries held for failed queues (dispatch thread, every few seconds)."""
        if not self.failed_queues or monotonic() < self._next_queue_retry:
            return
        if self._unlogged_queue_failures > 0:
            log.error("%d more consume queues failed (%d failing now), e.g. %s",
                      self._unlogged_queue_failures, len(self.failed_queues),
                      next(reversed(self.failed_queues.values())).failed)
        self._unlogged_queue_failures = 0
        recovered = 0
        for key, cq in list(self.failed_queues.items()):
            if not cq.retry:
                continue
            try:
                while cq.pending:
                    run = cq.pending[0]
                    cq.put_entries(run[0], run, 1)
                    cq.pending.pop(0)
                if not cq.files:  # nothing held: can its file be made now?
                    cq._file_for_append(cq._max_pos)
            except OSError as e:
                if self.disk_full.report(e, f"cannot write consume queue {cq.topic}-"
                                            f"{cq.queue_id}"):
                    self._queues_without_space.add(key)
                continue
            cq.failed = ""
            del self.failed_queues[key]
            self._queues_without_space.discard(key)
            self.mark_dirty([cq])
            recovered += 1
        if recovered:
            log.info("%d failed consume queues are written again (%d still failing)",
                     recovered, len(self.failed_queues))
        self._next_queue_retry = (monotonic() + QUEUE_RETRY_INTERVAL_S
                                  if self.failed_queues else 0.0)

    def _failed_queue_put(self, msgs: list[Message]) -> PutMessageResult | None:
        failed = self.failed_queues
        for m in msgs:
            cq = failed.get((m.topic, m.queue_id))
            if cq is not None:
                status = PutMessageStatus.CREATE_MAPPED_FILE_FAILED
                return PutMessageResult(status, AppendResult(status, error=cq.failed))
        return None

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
        self.cq_handles.close_all()
        snapshot = self._encode_snapshot(cq_snapshot.CLEAN)
        if snapshot is not None:
            self._write_snapshot(*snapshot)  # failed: the next start scans the queues
        else:  # a RUNNING one left would be taken for positions at a clean stop
            cq_snapshot.discard(self.snapshot_path)
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
        if self.failed_queues:
            refused = self._failed_queue_put(msgs)
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
        if self.failed_queues:
            for i, msgs in enumerate(groups):
                r = self._failed_queue_put(msgs)
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
        ts = self._last_dispatched_ts
        snapshot = None
        interval = self.config.consume_queue_snapshot_interval
        if not force and interval > 0 and monotonic() >= self._next_snapshot:
            self._next_snapshot = monotonic() + interval / 1000
            # Encoded before the queue files are forced below: what it records is on disk
            # before it is written.
            snapshot = self._encode_snapshot(cq_snapshot.RUNNING)
        with self._dirty_lock:
            dirty, self._dirty_queues = self._dirty_queues, set()
        if len(dirty) >= SYNCFS_MIN_QUEUES and os.path.isdir(self.cq_root):
            # One syncfs instead of thousands of fdatasyncs (100,000 dirty queues: measured
            # 22 s one file at a time). Positions are taken first: what is written after
            # them is in the next round's set.
            marks = [(mf, mf.wrote_position) for cq in dirty for mf in cq.files[-2:]]
            sync_filesystem(self.cq_root)
            for mf, wrote in marks:
                if wrote > mf.flushed_position:
                    mf.flushed_position = wrote
        else:
            for cq in dirty:
                cq.flush()
        self.index.flush()
        if self.checkpoint is not None and ts:
            self.checkpoint.logics_msg_timestamp = ts
            self.checkpoint.index_msg_timestamp = ts
            self._flush_checkpoint()
        if snapshot is not None:
            self._write_snapshot(*snapshot)

    def _flush_checkpoint(self) -> None:
        assert self.checkpoint is not None
        try:
            self.checkpoint.flush()
        except OSError as e:  # its timestamps only lag: recovery after a crash reads more
            if not self.disk_full.report(e, "cannot allocate the checkpoint file"):
                raise

    # -- consume-queue snapshot (store/cq_snapshot.py) ------------------------------------
    def _encode_snapshot(self, kind: int) -> tuple[bytes, int, int] | None:
        """(file body, S, generation) of a snapshot of the queues now, or None while a queue
        has failed (its held entries are for records before S) or nothing changed."""
        # S first: dispatch writes a record's entries before it moves reput_from_offset past
        # it, and marks the queue changed in between, so every queue holding entries of
        # records before S is encoded below with at least those entries.
        offset = self.reput_from_offset
        if self.failed_queues:
            return None
        generation = self._snapshot_generation
        with self._dirty_lock:
            changed, self._snapshot_changed = self._snapshot_changed, set()
        if (kind == cq_snapshot.RUNNING and not changed and self._snapshot_encoded
                and self._snapshot_written == (offset, generation)):
            return None  # idle since the last one: the file holds this already
        encoder = self._snapshot_encoder
        if not self._snapshot_encoded:
            encoder.clear()
            encoder.update(list(self.consume_queues.values()))
            self._snapshot_encoded = True
        else:
            encoder.update(changed)
        return encoder.body(kind, offset, self.consume_queue_file_size), offset, generation

    def _write_snapshot(self, body: bytes, offset: int, generation: int) -> None:
        with self._snapshot_lock:
            if generation != self._snapshot_generation:
                return  # files were deleted meanwhile: the next round encodes them
            try:
                cq_snapshot.write_file(self.snapshot_path, body)
            except OSError as e:  # a crash scans every queue until one is written
                if not self.disk_full.report(e, "cannot write the consume-queue snapshot"):
                    log.warning("consume-queue snapshot not written: %s", e)
                return
            self._snapshot_written = (offset, generation)

    def invalidate_snapshot(self, cqs: list[ConsumeQueue]) -> None:
        """Files of `cqs` (or of the commitlog) were deleted: the snapshot on disk may list
        them, and one being encoded must not be written."""
        # Marked before the generation moves: an encode that sees the new generation
        # encodes them.
        self.mark_snapshot_changed(cqs)
        with self._snapshot_lock:
            self._snapshot_generation += 1
            cq_snapshot.discard(self.snapshot_path)
        self._next_snapshot = 0.0

    @property
    def consume_queue_file_size(self) -> int:
        size = self.config.mapped_file_size_consume_queue
        return size - size % CQ_STORE_UNIT_SIZE

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
        if self.failed_queues:
            with self._reput_lock:
                self.retry_failed_queues()
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
        return self.consume_queues.get((topic, queue_id))

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
