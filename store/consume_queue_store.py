"""Every consume queue of the store, by (topic, queue id) (RocketMQ 5's ConsumeQueueStore).

Queues are made at load or at their first dispatch, found by reads, marked dirty for the
flush service and changed for the snapshot of their positions (store/cq_snapshot.py), held
and retried when their writes fail, and listeners hear of what arrived in them. The
dispatch, recovery, cleaning and reading modules take it from the store (`store.queues`).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from store import cq_snapshot
from store.config import StoreConfig
from store.constants import CQ_STORE_UNIT_SIZE
from store.consume_queue import ConsumeQueue
from store.cq_files import FileHandles, open_files_cap, sync_filesystem
from store.disk_full import DiskFull
from store.mapped_file import MappedFile
from store.message import Message
from store.services import monotonic

log = logging.getLogger(__name__)

ArrivingListener = Callable[[str, int, int], None]  # topic, queueId, max offset in queue
QueueKey = tuple[str, int]
QUEUE_RETRY_INTERVAL_S = 5.0  # failed consume queues are tried again this often
# Dirty consume queues from which one syncfs replaces an fdatasync per file.
SYNCFS_MIN_QUEUES = 64


class ConsumeQueueStore:
    def __init__(self, root: Path, config: StoreConfig, disk_full: DiskFull) -> None:
        self.root = str(root / "consumequeue")
        self.mapped_file_size = config.mapped_file_size_consume_queue
        self.handles = FileHandles(open_files_cap(config.consume_queue_open_files))
        self.disk_full = disk_full
        self.table: dict[QueueKey, ConsumeQueue] = {}
        self.arriving_listeners: list[ArrivingListener] = []
        # Queues written since their last flush (the flush service visits only these), and
        # changed since the snapshot last encoded them (same lock).
        self._dirty: set[ConsumeQueue] = set()
        self._snapshot_changed: set[ConsumeQueue] = set()
        self._dirty_lock = threading.Lock()
        # Queues whose writes fail (e.g. a file that cannot be opened): their puts answer
        # CREATE_MAPPED_FILE_FAILED, dispatch to the others goes on, a retry runs now and then.
        self.failed: dict[QueueKey, ConsumeQueue] = {}
        # Of those, the ones failed for lack of space: writes resume once they are written.
        self.without_space: set[QueueKey] = set()
        self.next_retry = 0.0  # monotonic; 0: none due
        self._unlogged_failures = 0
        # The snapshot of their positions (store/cq_snapshot.py).
        self.snapshot_path = str(root / cq_snapshot.FILE_NAME)
        self._snapshot_encoder = cq_snapshot.SnapshotEncoder()
        self._snapshot_encoded = False  # the encoder holds every queue
        # Bumped when files are deleted: a snapshot encoded before must not be written.
        self._snapshot_generation = 0
        self._snapshot_lock = threading.Lock()
        self.next_snapshot = 0.0  # the first flush round after start writes one
        self._snapshot_written: tuple[int, int] | None = None  # (S, generation) last written

    # -- the table -------------------------------------------------------------------------
    def create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(topic, queue_id, self.root, self.mapped_file_size, self.handles)
        self.table[(topic, queue_id)] = cq
        return cq

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.table.get((topic, queue_id))

    def load(self, only: set[str] | None = None) -> None:
        """Loads the queues of every topic directory (or of the topics `only`)."""
        if not os.path.isdir(self.root):
            return
        with os.scandir(self.root) as topics:
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
                cq = self.create(topic, queue_id)
                try:
                    cq.load(os.listdir(qpath))
                except (OSError, ValueError) as e:  # this queue only: the others load
                    self.queue_failed(cq, e, retry=False)

    @property
    def file_size(self) -> int:
        """A consume-queue file's size in whole entries."""
        return self.mapped_file_size - self.mapped_file_size % CQ_STORE_UNIT_SIZE

    def mark_dirty(self, cqs: Iterable[ConsumeQueue]) -> None:
        with self._dirty_lock:
            self._dirty.update(cqs)
            self._snapshot_changed.update(cqs)

    def mark_snapshot_changed(self, cqs: Iterable[ConsumeQueue]) -> None:
        with self._dirty_lock:
            self._snapshot_changed.update(cqs)

    def notify_arriving(self, touched: dict[QueueKey, ConsumeQueue]) -> None:
        for (topic, queue_id), cq in touched.items():
            for listener in self.arriving_listeners:
                try:
                    listener(topic, queue_id, cq.max_offset_in_queue)
                except Exception:
                    log.exception("message arriving listener failed")

    def flush_dirty(self) -> None:
        """Forces the queues written since the last call to disk (the flush service)."""
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, set()
        if len(dirty) >= SYNCFS_MIN_QUEUES and os.path.isdir(self.root):
            # One syncfs instead of thousands of fdatasyncs (100,000 dirty queues: measured
            # 22 s one file at a time). Positions are taken first: what is written after
            # them is in the next round's set.
            marks: list[tuple[MappedFile, int]] = [
                (mf, mf.wrote_position) for cq in dirty for mf in cq.files[-2:]]
            sync_filesystem(self.root)
            for mf, wrote in marks:
                if wrote > mf.flushed_position:
                    mf.flushed_position = wrote
        else:
            for cq in dirty:
                cq.flush()

    # -- queues that fail ------------------------------------------------------------------
    def queue_failed(self, cq: ConsumeQueue, err: BaseException, retry: bool = True) -> None:
        """Writing (or loading) `cq` failed: its puts are refused with the reason until a
        retry succeeds; one log line, and while failures go on one summary per retry round.
        A full disk is the store's disk-full state instead (its own log line)."""
        key = (cq.topic, cq.queue_id)
        first = len(self.failed) == len(self.without_space)
        cq.failed = f"consume queue {cq.topic}-{cq.queue_id} cannot be written: {err}"
        cq.retry = retry
        self.failed[key] = cq
        if retry and self.disk_full.report(err, f"cannot write consume queue {cq.topic}-"
                                                f"{cq.queue_id}"):
            self.without_space.add(key)
        elif first:
            log.error("%s%s", cq.failed, "; dispatch goes on for the other queues, puts to it "
                      "answer CREATE_MAPPED_FILE_FAILED" if retry else "")
            self._unlogged_failures = 0
        else:
            self._unlogged_failures += 1
        if not self.next_retry:
            self.next_retry = monotonic() + QUEUE_RETRY_INTERVAL_S

    def retry_failed(self) -> None:
        """Writes the entries held for failed queues (dispatch thread, every few seconds)."""
        if not self.failed or monotonic() < self.next_retry:
            return
        if self._unlogged_failures > 0:
            log.error("%d more consume queues failed (%d failing now), e.g. %s",
                      self._unlogged_failures, len(self.failed),
                      next(reversed(self.failed.values())).failed)
        self._unlogged_failures = 0
        recovered = 0
        for key, cq in list(self.failed.items()):
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
                    self.without_space.add(key)
                continue
            cq.failed = ""
            del self.failed[key]
            self.without_space.discard(key)
            self.mark_dirty([cq])
            recovered += 1
        if recovered:
            log.info("%d failed consume queues are written again (%d still failing)",
                     recovered, len(self.failed))
        self.next_retry = monotonic() + QUEUE_RETRY_INTERVAL_S if self.failed else 0.0

    def write_held(self) -> None:
        """Retries the failed queues now; ENOSPC while some still lack space."""
        if self.failed:
            self.next_retry = monotonic()
            self.retry_failed()
        if self.without_space:
            raise OSError(errno.ENOSPC, "consume queues still cannot be written")

    def refusal(self, msgs: Sequence[Message]) -> str | None:
        """Why a put of `msgs` is refused: a queue of theirs failed (None: none did)."""
        failed = self.failed
        for m in msgs:
            cq = failed.get((m.topic, m.queue_id))
            if cq is not None:
                return cq.failed
        return None

    # -- the snapshot of their positions (store/cq_snapshot.py) ----------------------------
    def restore(self, crashed: bool, commitlog_files: Sequence[MappedFile]
                ) -> tuple[int, list[ConsumeQueue]] | None:
        """The queues' positions from the snapshot: (its commitlog offset S, the queues of
        topics made after it, read from disk), or None when there is none or it does not fit
        (one log line why; every queue is then loaded and scanned)."""
        snap = cq_snapshot.read(self.snapshot_path)
        if snap is None:
            if crashed or os.path.isdir(self.root):
                log.warning("consume-queue snapshot not used (there is none): scanning every "
                            "queue")
            return None
        problem = snap if isinstance(snap, str) else self._snapshot_problem(
            snap, crashed, commitlog_files)
        if not problem:
            assert not isinstance(snap, str)
            new_topics = cq_snapshot.restore(snap, self.root, self.create,
                                             self._snapshot_encoder)
            if isinstance(new_topics, str):
                problem = new_topics
        if problem:
            log.warning("consume-queue snapshot not used (%s): scanning every queue", problem)
            cq_snapshot.discard(self.snapshot_path)
            self.table.clear()
            self._snapshot_encoder.clear()
            return None
        assert not isinstance(snap, str) and not isinstance(new_topics, str)
        self._snapshot_encoded = True
        from_disk: list[ConsumeQueue] = []
        if new_topics:  # made after the snapshot: their queues are read from disk
            before = set(self.table)
            self.load(new_topics)
            from_disk = [cq for key, cq in self.table.items() if key not in before]
            self.mark_snapshot_changed(from_disk)
        if snap.kind == cq_snapshot.CLEAN:
            # Kept for the run that follows: after a crash it re-dispatches from S.
            try:
                cq_snapshot.write_file(self.snapshot_path, snap.as_running())
            except OSError as e:
                if not self.disk_full.report(e, "cannot write the consume-queue snapshot"):
                    log.warning("consume-queue snapshot not kept for a crash (%s): the next "
                                "flush round writes one", e)
                cq_snapshot.discard(self.snapshot_path)
        return snap.offset, from_disk

    def _snapshot_problem(self, snap: cq_snapshot.Snapshot, crashed: bool,
                          files: Sequence[MappedFile]) -> str:
        """Why the snapshot cannot be used at this start ("" when it can)."""
        if snap.cq_file_size != self.file_size:
            return (f"written for consume-queue files of {snap.cq_file_size} bytes, not "
                    f"{self.file_size}")
        if crashed and snap.kind == cq_snapshot.CLEAN:
            return "written at a clean stop, yet the abort file says the store crashed"
        if not crashed and snap.kind != cq_snapshot.CLEAN:
            return "written while running: the clean stop did not write its own"
        if crashed and snap.boot != cq_snapshot.boot_id():
            return "written in another boot of the machine, whose page cache is lost"
        if not files:
            return "no commitlog"
        if not files[0].file_from_offset <= snap.offset <= files[-1].file_tail_offset:
            return (f"its commitlog offset {snap.offset} is outside the commitlog "
                    f"({files[0].file_from_offset}..{files[-1].file_tail_offset})")
        return ""

    def encode_snapshot(self, kind: int, offset: int) -> tuple[bytes, int, int] | None:
        """(file body, S, generation) of a snapshot of the queues now, where S = `offset` is
        the dispatch position read before this call, or None while a queue has failed (its
        held entries are for records before S) or nothing changed."""
        # S is read first: dispatch writes a record's entries before it moves its position
        # past it, and marks the queue changed in between, so every queue holding entries
        # of records before S is encoded below with at least those entries.
        if self.failed:
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
            encoder.update(list(self.table.values()))
            self._snapshot_encoded = True
        else:
            encoder.update(changed)
        return encoder.body(kind, offset, self.file_size), offset, generation

    def encode_all_next(self) -> None:
        """The next snapshot encodes every queue again, not only those changed (what a start
        without a snapshot does; benchmarks measure it)."""
        self._snapshot_encoded = False

    def write_snapshot(self, body: bytes, offset: int, generation: int) -> None:
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

    def discard_snapshot(self) -> None:
        cq_snapshot.discard(self.snapshot_path)

    def invalidate_snapshot(self, cqs: Iterable[ConsumeQueue]) -> None:
        """Files of `cqs` (or of the commitlog) were deleted: the snapshot on disk may list
        them, and one being encoded must not be written."""
        # Marked before the generation moves: an encode that sees the new generation
        # encodes them.
        self.mark_snapshot_changed(cqs)
        with self._snapshot_lock:
            self._snapshot_generation += 1
            cq_snapshot.discard(self.snapshot_path)
        self.next_snapshot = 0.0
