"""Which half messages have no outcome yet (RocketMQ keeps this implicit in its check loop;
here it is one table, fed in queue order from the half and op queues).

A transaction is its UNIQ_KEY. A check puts a renewed copy of its half at the end of the
half queue, so one transaction may have several copies; the table keeps the latest. An op
record names the half-queue offset of the copy that was latest when the transaction ended;
any copy with an op ends the transaction.

Progress (what persists as CID_RMQ_SYS_TRANS's offsets, so a restart rescans only from
there): the half offset is the first copy still pending (or the scan position when none);
the op offset is the first scanned op that names a copy at or past that half offset. Pure
bookkeeping: no store, no clock, no I/O.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq

from common.codec import MessageExt


@dataclasses.dataclass
class PendingHalf:
    transaction_id: str
    producer_group: str
    queue_offset: int  # of the latest copy in the half queue
    commit_log_offset: int
    store_size: int
    born_timestamp: int
    check_times: int
    immunity_ms: int
    # Loaded by a scan after a (re)start, not seen ending live: its commit may already be
    # in the real topic (the broker died between the final message and the op record).
    recovered: bool = False
    # The final message is stored, the op record is not (it failed): end with an op only.
    committed: bool = False
    busy: bool = False  # an end or a check is writing for it


class PendingTable:
    def __init__(self, half_offset: int = 0, op_offset: int = 0) -> None:
        self.pending: dict[str, PendingHalf] = {}
        self._latest: dict[int, str] = {}  # queue offset of a latest copy -> transaction id
        # The keys of _latest as a min-heap, with offsets since dropped from _latest left in
        # it until they reach the top (or a rebuild): half_offset() at every end and check
        # without a scan of every pending half.
        self._heap: list[int] = []
        self.half_scanned = half_offset  # next half-queue offset to scan
        self.op_scanned = op_offset  # next op-queue offset to scan
        # Half offsets ended (an op exists) that the half scan has not reached yet.
        self._ended_ahead: set[int] = set()
        # (op offset, half offset) of scanned ops that may matter after a restart.
        self._ops: collections.deque[tuple[int, int]] = collections.deque()

    # -- scans -------------------------------------------------------------------------------
    def add_half(self, ext: MessageExt, immunity_ms: int, checks: int,
                 recovered: bool) -> PendingHalf | None:
        """The half-queue scan reached the copy `ext` (at half_scanned). Returns the pending
        entry it made or renewed, None when the copy is ended or superseded."""
        offset = ext.queue_offset
        self.half_scanned = max(self.half_scanned, offset + 1)
        tid = ext.uniq_key or f"@{ext.commit_log_offset}"
        entry = self.pending.get(tid)
        if offset in self._ended_ahead:
            self._ended_ahead.discard(offset)
            if entry is not None and entry.queue_offset < offset:
                self.drop(tid)  # an older copy was left by a restart
            return None
        if entry is not None:
            if entry.queue_offset >= offset:
                return None  # superseded (or this very copy, renewed live)
            del self._latest[entry.queue_offset]
            entry.queue_offset, entry.commit_log_offset = offset, ext.commit_log_offset
            entry.store_size, entry.check_times = ext.store_size, max(entry.check_times, checks)
            self._set_latest(offset, tid)
            return entry
        entry = PendingHalf(tid, ext.properties.get("PGROUP", ""), offset,
                            ext.commit_log_offset, ext.store_size, ext.born_timestamp, checks,
                            immunity_ms, recovered=recovered)
        self.pending[tid] = entry
        self._set_latest(offset, tid)
        return entry

    def add_op(self, op_offset: int, half_offset: int) -> str | None:
        """The op-queue scan reached an op (at op_scanned) naming `half_offset`. Returns the
        transaction it ended, if one was pending."""
        self.op_scanned = max(self.op_scanned, op_offset + 1)
        self._ops.append((op_offset, half_offset))
        if half_offset >= self.half_scanned:
            self._ended_ahead.add(half_offset)
            return None
        tid = self._latest.get(half_offset)
        if tid is not None:
            self.drop(tid)
        return tid

    # -- live changes ---------------------------------------------------------------------------
    def renewed(self, entry: PendingHalf, ext: MessageExt, checks: int) -> None:
        """A check put the renewed copy `ext` of a pending half."""
        self._latest.pop(entry.queue_offset, None)
        entry.queue_offset, entry.commit_log_offset = ext.queue_offset, ext.commit_log_offset
        entry.store_size, entry.check_times = ext.store_size, checks
        self._set_latest(entry.queue_offset, entry.transaction_id)

    def ended(self, entry: PendingHalf) -> None:
        """An op record for the entry's latest copy is stored."""
        if entry.queue_offset >= self.half_scanned:
            self._ended_ahead.add(entry.queue_offset)
        self.drop(entry.transaction_id)

    def _set_latest(self, offset: int, tid: str) -> None:
        self._latest[offset] = tid
        heapq.heappush(self._heap, offset)

    def drop(self, tid: str) -> None:
        entry = self.pending.pop(tid, None)
        if entry is not None:
            self._latest.pop(entry.queue_offset, None)

    # -- progress -----------------------------------------------------------------------------
    def half_offset(self) -> int:
        """Below this, every copy is ended or superseded."""
        latest, heap = self._latest, self._heap
        while heap and heap[0] not in latest:
            heapq.heappop(heap)
        if len(heap) > 2 * len(latest) + 64:  # dropped offsets kept by an old pending one
            heap[:] = latest
            heapq.heapify(heap)
        return heap[0] if heap else self.half_scanned

    def op_offset(self) -> int:
        """From here on, the op queue holds every op a rescan from half_offset() needs."""
        half = self.half_offset()
        ops = self._ops
        while ops and ops[0][1] < half:
            ops.popleft()
        # Ops naming copies at or past `half` may sit behind ones that do not: the first of
        # them bounds the rescan.
        return ops[0][0] if ops else self.op_scanned

    def groups(self) -> dict[str, list[PendingHalf]]:
        out: dict[str, list[PendingHalf]] = {}
        for entry in self.pending.values():
            out.setdefault(entry.producer_group, []).append(entry)
        return out
