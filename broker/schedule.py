"""Delayed messages (SPEC §7; RocketMQ's ScheduleMessageService).

A send with delay level L is stored under SCHEDULE_TOPIC_XXXX, queue L - 1, its real topic
and queue in REAL_TOPIC / REAL_QID; the store makes the consume-queue entry's tags code its
delivery time (store time + the level's delay). On a master, one task per level walks its
queue from the offset kept in delayOffset.json and puts each message to its real topic once
it is due. Messages of one level are due in the order they were stored, so a level waits
only for its next message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from broker.consumer_offsets import DelayOffsetManager
from broker.convert import message_from_ext
from broker.status import STORED_STATUSES
from common.codec import MessageExt
from common.constants import SCHEDULE_TOPIC, MessageProperty
from store.constants import PutMessageStatus
from store.message import Message
from store.message_store import DefaultMessageStore

log = logging.getLogger(__name__)

# Longest nap of a level with nothing due, so new messages and clock changes are seen.
IDLE_WAIT_S = 0.1
# After a failed put (disk full, a slave-only store...), the level tries again this late.
RETRY_AFTER_FAILURE_S = 10.0
# Puts that can never succeed: the message is skipped (RocketMQ 4.x retried it forever).
_NEVER_STORED = frozenset({PutMessageStatus.MESSAGE_ILLEGAL,
                           PutMessageStatus.PROPERTIES_SIZE_EXCEEDED})

PutMessage = Callable[[Message], Awaitable[PutMessageStatus]]


def to_schedule_topic(msg: Message, levels: int) -> Message:
    """A message with a DELAY property, moved to its level's SCHEDULE_TOPIC_XXXX queue (a
    level past the table takes the last one), its real topic and queue in properties."""
    props = dict(msg.properties)
    level = max(1, min(int(props[MessageProperty.DELAY]), levels))
    props[MessageProperty.DELAY] = str(level)
    props[MessageProperty.REAL_TOPIC] = msg.topic
    props[MessageProperty.REAL_QID] = str(msg.queue_id)
    return dataclasses.replace(msg, topic=SCHEDULE_TOPIC, queue_id=level - 1,
                               properties=props)


def due_message(ext: MessageExt) -> Message:
    """The message a delayed record becomes when due: its real topic and queue again."""
    props = dict(ext.properties)
    topic = props.pop(MessageProperty.REAL_TOPIC)
    queue_id = int(props.pop(MessageProperty.REAL_QID))
    del props[MessageProperty.DELAY]
    return message_from_ext(ext, topic=topic, queue_id=queue_id, properties=props)


class ScheduleMessageService:
    """`put` stores one message and answers the store's status; `clock_ms` is the time
    delivery times are compared with; `sleep` paces the levels (tests pass fakes)."""

    def __init__(self, store: DefaultMessageStore, offsets: DelayOffsetManager, put: PutMessage,
                 clock_ms: Callable[[], int],
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.store = store
        self.offsets = offsets
        self.put = put
        self.clock_ms = clock_ms
        self.sleep = sleep
        self.levels_ms = store.config.delay_levels_ms
        self.delivered = 0
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run_level(level), name=f"schedule-level-{level}")
                       for level in range(1, len(self.levels_ms) + 1)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    async def _run_level(self, level: int) -> None:
        while True:
            try:
                wait_s = await self.deliver_due(level)
            except Exception:
                log.exception("delay level %d: delivery failed; next try in %ss", level,
                              RETRY_AFTER_FAILURE_S)
                wait_s = RETRY_AFTER_FAILURE_S
            await self.sleep(wait_s)

    async def deliver_due(self, level: int) -> float:
        """Delivers the level's due messages; returns how long to wait before looking again."""
        cq = self.store.find_consume_queue(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return IDLE_WAIT_S
        offset = self.offsets.offset_table.get(level, 0)
        if offset < cq.min_offset_in_queue:  # its messages expired before they were due
            log.warning("delay level %d: offset %d below the queue's minimum %d, skipping "
                        "ahead", level, offset, cq.min_offset_in_queue)
            offset = cq.min_offset_in_queue
            self.offsets.advance(level, offset)
        delay_ms = self.levels_ms[level - 1]
        while offset < cq.max_offset_in_queue:
            entry = cq.get_entry(offset)
            if entry is None:
                return IDLE_WAIT_S
            phy, size, deliver_at = entry
            now = self.clock_ms()
            if deliver_at > now + delay_ms:
                # Further away than the level's delay: the clock went back, or the level was
                # configured shorter since. Due now, as RocketMQ corrects it.
                deliver_at = now
            if deliver_at > now:
                return min(IDLE_WAIT_S, (deliver_at - now) / 1000)
            ext = self.store.look_message_by_offset(phy, size)
            if ext is None:
                log.warning("delay level %d: no record at commitlog offset %d (queue offset "
                            "%d), skipped", level, phy, offset)
            elif not await self._deliver(level, offset, ext):
                return RETRY_AFTER_FAILURE_S
            offset += 1
            self.offsets.advance(level, offset)
        return IDLE_WAIT_S

    async def _deliver(self, level: int, offset: int, ext: MessageExt) -> bool:
        """Puts one due message to its real topic; False when it should be tried again."""
        try:
            msg = due_message(ext)
        except (KeyError, ValueError):
            log.error("delay level %d: record at queue offset %d (commitlog %d) has no real "
                      "topic / queue; skipped", level, offset, ext.commit_log_offset)
            return True
        status = await self.put(msg)
        if status in _NEVER_STORED:
            log.error("delay level %d: message %s for %s refused for good (%s); skipped",
                      level, ext.uniq_key, msg.topic, status.value)
            return True
        if status not in STORED_STATUSES:
            log.warning("delay level %d: putting message %s to %s failed (%s); trying again "
                        "in %ss", level, ext.uniq_key, msg.topic, status.value,
                        RETRY_AFTER_FAILURE_S)
            return False
        self.delivered += 1
        return True

