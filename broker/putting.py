"""Put then replicate: how a broker stores messages and what it answers (RocketMQ's
CommitLog.handleHA and the put paths of DefaultMessageStore, as the broker sees them).

A put is one store append; stored puts are counted; a SYNC_MASTER then waits until a slave
acknowledged the end of the put (SPEC §5), and a replication failure becomes the answer of
every stored put it covers. Send, transactions, delay and the v2 endpoint's timers all put
through here.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from broker.stats import BrokerStats
from broker.status import STORED_STATUSES
from ha.constants import SLAVE_TIMEOUT
from store.constants import BrokerRole, FlushDiskType, PutMessageStatus
from store.message import Message
from store.message_store import PutMessageResult
from store.waiters import OffsetWaiters

if TYPE_CHECKING:
    from store.message_store import DefaultMessageStore


class Replicator(Protocol):
    """A master's HA service as a put sees it."""

    def notify_data_arrived(self) -> None: ...

    def slave_ok(self) -> bool: ...


class MessagePutter:
    """`replicator` is the master's HA service while it serves slaves (None: no slave is
    waited for); `waiters` are released by the best slave's acknowledged offset."""

    def __init__(self, store: DefaultMessageStore, stats: BrokerStats, role: BrokerRole,
                 flush_disk_type: FlushDiskType, waiters: OffsetWaiters) -> None:
        self.store = store
        self.stats = stats
        self.role = role
        self.flush_disk_type = flush_disk_type
        self.waiters = waiters
        self.replicator: Replicator | None = None

    async def after_put(self, end_offset: int) -> PutMessageStatus | None:
        """After a stored put: wakes the slave links; a SYNC_MASTER waits until a slave
        acked `end_offset`. Returns the status to answer instead, None when replicated
        (or no wait is due)."""
        replicator = self.replicator
        if replicator is None:
            return None
        replicator.notify_data_arrived()
        if self.role is not BrokerRole.SYNC_MASTER:
            return None
        if not replicator.slave_ok():
            return PutMessageStatus.SLAVE_NOT_AVAILABLE
        if not await self.waiters.wait_async(end_offset, SLAVE_TIMEOUT / 1000):
            return PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        return None

    async def put_messages(self, msgs: list[Message]) -> PutMessageResult:
        """Stores messages in one append, waits for the flush / slave the role asks and
        counts them. The status is the store's, or the replication's when that failed."""
        result = await self.store.put_messages_async(msgs)
        return (await self._count_and_replicate([msgs], [result]))[0]

    async def put_message_groups(self, groups: list[list[Message]]
                                 ) -> list[PutMessageResult]:
        """put_messages for several message lists in one store append (each still stored
        in one piece or not at all, with its own result); one wait for the flush / slave
        the role asks, for the last of them."""
        if self.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            results = self.store.append_groups(groups)
        else:  # a SYNC_FLUSH put waits for its flush: those of one loop turn share it
            results = list(await asyncio.gather(*(self.store.put_messages_async(msgs)
                                                  for msgs in groups)))
        return await self._count_and_replicate(groups, results)

    async def put_one(self, msg: Message) -> PutMessageStatus:
        return (await self.put_messages([msg])).status

    async def _count_and_replicate(self, groups: list[list[Message]],
                                   results: list[PutMessageResult]) -> list[PutMessageResult]:
        """Counts the stored puts and waits for the slave the role asks, once, for the
        last of them; a replication failure becomes the status of every stored one."""
        end = 0
        for msgs, result in zip(groups, results, strict=True):
            append = result.append
            if result.status in STORED_STATUSES and append is not None:
                self.stats.record_put(msgs[0].topic, len(msgs))
                end = max(end, append.end_offset)
        if not end:
            return results
        ha_status = await self.after_put(end)
        if ha_status is None:
            return results
        return [PutMessageResult(ha_status, r.append)
                if r.status in STORED_STATUSES and r.append is not None else r
                for r in results]
