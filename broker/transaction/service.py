"""End of transactions and the check service (RocketMQ's EndTransactionProcessor,
TransactionalMessageServiceImpl and TransactionalMessageCheckService).

`end_transaction(...)` is a plain coroutine so that any front (the gRPC servicer, a v2
proxy) can call it; `send_check(group, half)` is the hook a check goes out through. Ends and
checks of one broker are serialised by one lock: each writes at most two records.

Exactly one outcome per transaction (its UNIQ_KEY): an end for a transaction that already
has one is answered SUCCESS and writes nothing; a half loaded after a restart is first
looked up in its real topic by UNIQ_KEY (the index), so that a broker killed between the
final message and the op record does not deliver the message twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from acl.caller import authorize_found
from acl.decision import Denied
from acl.requirements import END_TRANSACTION, STORED_TOPIC
from broker.status import STORED_STATUSES, ok, put_status, status
from broker.transaction.messages import (
    CID_RMQ_SYS_TRANS,
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    LocalTransactionState,
    check_times,
    final_message,
    immunity_seconds,
    is_committed_final,
    op_half_offsets,
    op_message,
    real_topic_and_queue,
    renewed_half,
)
from broker.transaction.table import PendingHalf, PendingTable
from common.codec import MessageExt
from common.constants import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANSACTION_TYPE_MASK,
    MessageProperty,
    SysFlag,
)
from mqproto import common_pb2

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = logging.getLogger(__name__)

# (producer group, the half as its producer sees it) -> the member asked, None when none.
SendCheck = Callable[[str, MessageExt], "str | None"]
Sleep = Callable[[float], Awaitable[None]]

# An end waits this long for the dispatch of its half (normally a few ms behind the put).
DISPATCH_WAIT_S = 3.0
DISPATCH_POLL_S = 0.005
# At start, loading waits this long for the store's dispatch to catch up.
RECOVERY_WAIT_S = 60.0
# Tests only: the broker SIGKILLs itself at this point of a commit ("after_final_put":
# the final message stored, its op record not).
FAULT_ENV = "MQ_TRANSACTION_FAULT"


def _state_name(commit: bool) -> str:
    return "COMMIT" if commit else "ROLLBACK"


class TransactionalMessageService:
    """A master's transactions. `start()` loads the halves without outcome and runs the
    check every transactionCheckInterval (`sleep` paces it, `clock_ms` ages halves)."""

    def __init__(self, broker: BrokerContext, send_check: SendCheck,
                 online_producers: Callable[[], dict[str, int]], *,
                 clock_ms: Callable[[], int], sleep: Sleep = asyncio.sleep) -> None:
        self.broker = broker
        self.send_check = send_check
        self.online_producers = online_producers  # group -> members listening for checks
        self.clock_ms = clock_ms
        self.sleep = sleep
        self.table = PendingTable()
        self.ready = asyncio.Event()
        self._lock = asyncio.Lock()
        self._recovered_below = 0
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._half_arrived = asyncio.Event()  # set when the half queue got an entry
        self._fault = os.environ.get(FAULT_ENV, "")
        self.checks_sent = 0
        self.discarded = 0

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.broker.store.arriving_listeners.append(self._on_arriving)
        self._task = asyncio.create_task(self.run(), name="transactionCheck")

    def _on_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's dispatch listener (dispatch thread): wakes ends waiting for a half."""
        if topic == RMQ_SYS_TRANS_HALF_TOPIC and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self._loop.call_soon_threadsafe(self._half_arrived.set)

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.broker.store.arriving_listeners.remove(self._on_arriving)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        interval_s = self.broker.config.transaction_check_interval / 1000
        while not self.ready.is_set():
            try:
                await self.load()
            except Exception:
                log.exception("loading the halves without outcome failed; again in %ss",
                              interval_s)
                await self.sleep(interval_s)
        while True:
            await self.sleep(interval_s)
            try:
                await self.check_once()
            except Exception:
                log.exception("transaction check failed; next run in %ss", interval_s)

    async def load(self) -> None:
        """Rebuilds the table from the progress offsets once the store dispatched what it
        recovered (the half and op queues and the index must be complete)."""
        store = self.broker.store
        deadline = time.monotonic() + RECOVERY_WAIT_S
        while store.dispatch_behind_bytes > 0 and time.monotonic() < deadline:
            await asyncio.sleep(DISPATCH_POLL_S)
        offsets = self.broker.offsets
        half = offsets.query_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_HALF_TOPIC, 0)
        op = offsets.query_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_OP_HALF_TOPIC, 0)
        self.table = PendingTable(max(half, 0), max(op, 0))
        self._recovered_below = store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0)
        async with self._lock:
            self.refresh()
        self.ready.set()
        if self.table.pending:
            log.info("transactions: %d half messages without an outcome (half offset %d, op "
                     "offset %d)", len(self.table.pending), self.table.half_offset(),
                     self.table.op_offset())

    # -- the queues --------------------------------------------------------------------------
    def refresh(self, known: MessageExt | None = None) -> None:
        """Reads what the op and half queues got since the last scan; commits progress.
        `known`: a half already read (an end's own), taken as it is, not read again."""
        table = self.table
        for i, ext in self._scan(RMQ_SYS_TRANS_OP_HALF_TOPIC, table.op_scanned):
            table.op_scanned = i + 1
            try:
                halves = op_half_offsets(ext.body) if ext is not None else []
            except ValueError as e:
                log.warning("op record %d skipped: %s", i, e)
                halves = []
            for half in halves:
                table.add_op(i, half)
        for i, ext in self._scan(RMQ_SYS_TRANS_HALF_TOPIC, table.half_scanned, known):
            table.half_scanned = i + 1
            if ext is None:
                log.warning("half message %d unreadable (its commitlog file may be gone): "
                            "skipped", i)
            else:
                table.add_half(ext, self._immunity_ms(ext), check_times(ext),
                               recovered=i < self._recovered_below)
        self.commit_progress()

    def _scan(self, topic: str, start: int, known: MessageExt | None = None
              ) -> Iterator[tuple[int, MessageExt | None]]:
        """(queue offset, record; None when unreadable) of queue 0 of `topic`, from `start`
        (or its first entry still kept) to its end; `known` for the entry at its offset."""
        store = self.broker.store
        cq = store.find_consume_queue(topic, 0)
        if cq is None:
            return
        i = max(start, cq.min_offset_in_queue)
        while i < cq.max_offset_in_queue:
            entry = cq.get_entry(i)
            if entry is None:
                yield i, None
            elif known is not None and entry[0] == known.commit_log_offset:
                yield i, known
            else:
                yield i, store.look_message_by_offset(entry[0], entry[1])
            i += 1

    def _immunity_ms(self, ext: MessageExt) -> int:
        """transactionTimeOut, or CHECK_IMMUNITY_TIME_IN_SECONDS when that is longer."""
        timeout = self.broker.config.transaction_time_out
        text = ext.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
        if text is None:
            return timeout
        try:
            return max(timeout, immunity_seconds(text) * 1000)
        except ValueError:
            return timeout

    def commit_progress(self) -> None:
        """The check service's offsets (CID_RMQ_SYS_TRANS), persisted with the others; none
        on a broker that never stored a half (the group would show in consumer stats)."""
        offsets = self.broker.offsets
        if (self.broker.store.find_consume_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0) is None
                and offsets.query_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_HALF_TOPIC, 0) < 0):
            return
        offsets.commit_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_HALF_TOPIC, 0,
                              self.table.half_offset())
        offsets.commit_offset(CID_RMQ_SYS_TRANS, RMQ_SYS_TRANS_OP_HALF_TOPIC, 0,
                              self.table.op_offset())

    async def _wait_dispatched(self, queue_offset: int) -> bool:
        """Until the half queue holds `queue_offset` (woken by the dispatch listener, with a
        slow poll besides); False after DISPATCH_WAIT_S."""
        store = self.broker.store
        deadline = time.monotonic() + DISPATCH_WAIT_S
        while store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0) <= queue_offset:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._half_arrived.clear()
            if store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0) > queue_offset:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._half_arrived.wait(),
                                       min(remaining, DISPATCH_POLL_S * 10))
        return True

    # -- ending ------------------------------------------------------------------------------
    async def end_transaction(self, producer_group: str, message_id: str,
                              commit_log_offset: int, queue_offset: int,
                              state: LocalTransactionState, from_check: bool = False
                              ) -> common_pb2.Status:
        """A producer's outcome for the half at `commit_log_offset` (any copy of it). UNKNOWN
        changes nothing (the half is checked again later)."""
        if self.broker.config.is_slave:
            return status(common_pb2.SERVICE_NOT_AVAILABLE,
                          "transactions are ended on the master, this broker is a slave")
        source = "check" if from_check else "producer"
        level = logging.INFO if from_check else logging.DEBUG  # one line per check, not send
        if state is LocalTransactionState.UNKNOWN:
            log.log(level, "transaction %s of group %s: the %s answered UNKNOWN; checked "
                    "again later", message_id, producer_group, source)
            return ok()
        ext = self.broker.store.look_message_by_offset(commit_log_offset)
        if ext is None or ext.topic != RMQ_SYS_TRANS_HALF_TOPIC:
            return status(common_pb2.TRANSACTION_FAILED,
                          f"no half message at commitlog offset {commit_log_offset}")
        problem = _mismatch(ext, producer_group, message_id, queue_offset)
        if problem:
            return status(common_pb2.TRANSACTION_FAILED, problem)
        try:  # the half is found by the offset the client named: PUB on its topic
            authorize_found(END_TRANSACTION, {STORED_TOPIC: (
                ext.properties.get(MessageProperty.REAL_TOPIC, ""),)}, "EndTransaction")
        except Denied as e:
            return status(common_pb2.NO_PERMISSION,
                          f"{e} (the half message at commitlog offset {commit_log_offset})")
        if not await self._ready(DISPATCH_WAIT_S) or not await self._wait_dispatched(
                ext.queue_offset):
            return status(common_pb2.SYSTEM_BUSY, "the half message is not dispatched yet; "
                          "the check will ask again")
        commit = state is LocalTransactionState.COMMIT
        async with self._lock:
            self.refresh(ext)  # the half, usually not scanned yet: not read twice
            tid = ext.uniq_key or f"@{ext.commit_log_offset}"
            entry = self.table.pending.get(tid)
            if entry is None:
                log.log(level, "transaction %s already ended; %s from the %s ignored", tid,
                        _state_name(commit), source)
                return status(common_pb2.SUCCESS, f"transaction {tid} already ended")
            return await self._end(entry, ext, commit, f"the {source} answered "
                                   f"{_state_name(commit)}", level)

    async def _ready(self, timeout_s: float) -> bool:
        if not self.ready.is_set():  # only while loading: wait_for costs a task an end
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ready.wait(), timeout_s)
        return self.ready.is_set()

    async def _end(self, entry: PendingHalf, ext: MessageExt, commit: bool, why: str,
                   level: int = logging.INFO) -> common_pb2.Status:
        """Under the lock: the final message when committing, then the op record."""
        broker = self.broker
        tid = entry.transaction_id
        if entry.recovered and not entry.committed and self._final_exists(ext, tid):
            log.warning("transaction %s: its commit was stored before a restart, the op record "
                        "was not; writing the op record only", tid)
            entry.committed = True
        if commit and not entry.committed:
            try:
                final = final_message(ext)
            except ValueError as e:
                log.error("transaction %s cannot be committed (%s): rolled back", tid, e)
                commit = False
            else:
                result = await broker.putter.put_messages([final])
                if result.status not in STORED_STATUSES:
                    detail = result.append.error if result.append is not None else ""
                    log.warning("transaction %s: commit put failed (%s %s); the check will "
                                "ask again", tid, result.status.value, detail)
                    return put_status(result.status, detail)
                entry.committed = True
                if self._fault == "after_final_put":
                    log.error("%s=after_final_put: killing this broker", FAULT_ENV)
                    os.kill(os.getpid(), signal.SIGKILL)
        op = op_message(entry.queue_offset, self.clock_ms(), broker.store_host)
        result = await broker.putter.put_messages([op])
        if result.status not in STORED_STATUSES:
            log.error("transaction %s: op record not stored (%s); it stays pending%s", tid,
                      result.status.value, " (committed)" if entry.committed else "")
            return ok() if entry.committed else put_status(result.status)
        self.table.ended(entry)
        self.commit_progress()
        outcome = "COMMIT" if entry.committed else "ROLLBACK"
        log.log(level, "transaction %s of group %s ended %s: %s", tid, entry.producer_group,
                outcome, why)
        return ok()

    def _final_exists(self, ext: MessageExt, tid: str) -> bool:
        """Whether a commit of `tid` is in its real topic (found by UNIQ_KEY in the index)."""
        store = self.broker.store
        if not store.config.message_index_enable:
            return False
        try:
            topic, _ = real_topic_and_queue(ext)
        except ValueError:
            return False
        return any(is_committed_final(m, tid)
                   for m in store.query_message(topic, tid, 16, ext.born_timestamp - 60_000))

    # -- checking ----------------------------------------------------------------------------
    async def check_once(self) -> int:
        """One check run: every half past its immunity is asked about once (a renewed copy
        put first, carrying the count), or rolled back once checked transactionCheckMax
        times. Returns how many were asked."""
        if not self.ready.is_set():
            return 0
        config = self.broker.config
        now = self.clock_ms()
        async with self._lock:
            self.refresh()
        asked = 0
        for entry in sorted(self.table.pending.values(), key=lambda e: e.queue_offset):
            age = now - entry.born_timestamp
            if 0 <= age < entry.immunity_ms:
                continue
            async with self._lock:
                if self.table.pending.get(entry.transaction_id) is not entry:
                    continue  # ended meanwhile
                ext = self.broker.store.look_message_by_offset(entry.commit_log_offset,
                                                               entry.store_size)
                if ext is None:
                    log.error("transaction %s: half message at %d unreadable; dropped",
                              entry.transaction_id, entry.commit_log_offset)
                    self.table.drop(entry.transaction_id)
                    continue
                if entry.check_times >= config.transaction_check_max:
                    log.warning("transaction %s of group %s: no outcome after %d checks; "
                                "rolled back", entry.transaction_id, entry.producer_group,
                                entry.check_times)
                    self.discarded += 1
                    await self._end(entry, ext, False,
                                    f"checked {entry.check_times} times without an outcome")
                    continue
                renewed = await self._renew(entry, ext)
            if renewed is None:
                break  # the store refuses puts: next run
            try:
                member = self.send_check(entry.producer_group, _as_sent(renewed))
            except Exception:  # the hook's fault: the half is asked again next run
                log.exception("transaction %s: sending check %d failed",
                              entry.transaction_id, entry.check_times)
                continue
            self.checks_sent += 1
            asked += 1
            if member is None:
                log.warning("transaction %s: no producer of group %s is online for check %d",
                            entry.transaction_id, entry.producer_group, entry.check_times)
            else:
                log.info("transaction %s: check %d sent to %s of group %s",
                         entry.transaction_id, entry.check_times, member, entry.producer_group)
        async with self._lock:
            self.refresh()
        return asked

    async def _renew(self, entry: PendingHalf, ext: MessageExt) -> MessageExt | None:
        times = entry.check_times + 1
        result = await self.broker.putter.put_messages([renewed_half(ext, times)])
        append = result.append
        if result.status not in STORED_STATUSES or append is None:
            log.warning("transaction %s: renewing the half for a check failed (%s)",
                        entry.transaction_id, result.status.value)
            return None
        copy = self.broker.store.look_message_by_offset(append.commit_log_offsets[0])
        if copy is None:
            return None
        self.table.renewed(entry, copy, times)
        return copy

    # -- admin -------------------------------------------------------------------------------
    async def current_summary(self, producer_group: str = "") -> PendingSummary:
        """`summary` after reading what the half and op queues got since the last check
        (a half stored a moment ago counts at once, not only after the next check)."""
        if self.ready.is_set():
            async with self._lock:
                self.refresh()
        return self.summary(producer_group)

    def summary(self, producer_group: str = "") -> PendingSummary:
        """Halves without outcome per producer group (all groups when "")."""
        online = self.online_producers()
        groups = self.table.groups()
        names = sorted({*groups, *online}) if not producer_group else [producer_group]
        table = self.table
        return PendingSummary(
            table.half_offset(), table.op_offset(),
            self.broker.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, 0),
            [GroupPending(name, len(groups.get(name, [])),
                          min((e.born_timestamp for e in groups.get(name, [])), default=0),
                          max((e.check_times for e in groups.get(name, [])), default=0),
                          online.get(name, 0)) for name in names])


@dataclasses.dataclass(frozen=True)
class GroupPending:
    producer_group: str
    pending: int
    oldest_born_timestamp: int
    max_check_times: int
    online_producers: int


@dataclasses.dataclass(frozen=True)
class PendingSummary:
    half_offset: int
    op_offset: int
    half_max_offset: int
    groups: list[GroupPending]


def _mismatch(ext: MessageExt, group: str, message_id: str, queue_offset: int) -> str:
    """checkPrepareMessage: why the request does not name this half, or ""."""
    if group and ext.properties.get("PGROUP") != group:
        return (f"the producer group is wrong: the half at {ext.commit_log_offset} is of "
                f"group {ext.properties.get('PGROUP')!r}, not {group!r}")
    if message_id and ext.uniq_key != message_id:
        return (f"the half at {ext.commit_log_offset} is message {ext.uniq_key}, not "
                f"{message_id}")
    if queue_offset and ext.queue_offset != queue_offset:
        return (f"the half at {ext.commit_log_offset} has queue offset {ext.queue_offset}, "
                f"not {queue_offset}")
    return ""


def _as_sent(ext: MessageExt) -> MessageExt:
    """The half as its producer sent it (sendCheckMessage): real topic and queue, and the
    PREPARED transaction type (a v2 gateway calls it a TRANSACTION message)."""
    sys_flag = (ext.sys_flag & ~TRANSACTION_TYPE_MASK) | int(SysFlag.TRANSACTION_PREPARED)
    try:
        topic, queue_id = real_topic_and_queue(ext)
    except ValueError:
        return dataclasses.replace(ext, sys_flag=sys_flag)
    return dataclasses.replace(ext, topic=topic, queue_id=queue_id, sys_flag=sys_flag)
