"""Delivery at a v2 message's delivery timestamp, to the delay levels' precision or better.

The broker's schedule service has fixed delay levels (1s 5s 10s 30s 1m ... 2h). A v2 message
due at time T is stored in the internal topic `rmq_sys_proxy_timer` through hops of the
longest level not past T (SCHEDULE_TOPIC_XXXX, with `rmq_sys_proxy_timer` as its real topic).
This service reads that topic: a message still a level or more away takes the next hop; one
due within a level waits here (in memory, its offset not committed) and is put to its real
topic and queue at T. Delivery is at most about 0.1 s late (the schedule service's step).

Its progress is the consumer offset of group `rmq_sys_proxy_timer` (consumerOffset.json),
committed only past messages that took their hop or were delivered: a restart reads again
from there (a message may then be delivered twice; none is lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import random
from typing import TYPE_CHECKING

from broker.convert import message_from_ext, message_from_proto
from broker.schedule import to_schedule_topic
from broker.status import STORED_STATUSES, put_status
from common.codec import MessageExt, decode_record
from common.constants import PERM_WRITE, MessageProperty
from mqproto import messaging_pb2
from mqproto.v2 import definition_pb2 as D
from proxy.convert import PROPERTY_TIMER_DELIVER_MS, V2Error, v2_status
from store.message import Message
from store.reading import TagFilter

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = logging.getLogger(__name__)

TIMER_TOPIC = "rmq_sys_proxy_timer"
TIMER_GROUP = "rmq_sys_proxy_timer"
PROPERTY_TIMER_REAL_TOPIC = "TIMER_REAL_TOPIC"
PROPERTY_TIMER_REAL_QID = "TIMER_REAL_QID"
MAX_DELAY_MS = 3 * 24 * 3600 * 1000  # RocketMQ's timerMaxDelaySec: 3 days
READ_BATCH = 64
IDLE_WAIT_S = 1.0
RETRY_AFTER_FAILURE_S = 1.0


def hop_level(remaining_ms: int, levels_ms: list[int]) -> int:
    """The longest delay level not past `remaining_ms` (0: less than the shortest level)."""
    level = 0
    for i, level_ms in enumerate(levels_ms, start=1):
        if level_ms <= remaining_ms:
            level = i
    return level


def _unscheduled_properties(ext: MessageExt) -> dict[str, str]:
    """A copy of the properties of `ext` without the schedule service's (a record of the
    timer topic put again)."""
    props = dict(ext.properties)
    for name in (MessageProperty.DELAY, MessageProperty.REAL_TOPIC, MessageProperty.REAL_QID):
        props.pop(name, None)
    return props


class TimerService:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.levels_ms = list(broker.store_config.delay_levels_ms)
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0
        self.hops = 0

    # -- send ------------------------------------------------------------------------------
    async def send(self, pb: messaging_pb2.Message, deliver_ms: int,
                   born_host: tuple[str, int]) -> tuple[str, int]:
        """Stores a message due at `deliver_ms` (its first hop); its message id and offset."""
        broker = self.broker
        now = broker.clock_ms()
        if deliver_ms - now > MAX_DELAY_MS:
            raise V2Error(D.ILLEGAL_DELIVERY_TIME,
                          f"the delivery timestamp is {(deliver_ms - now) // 1000} s away, "
                          f"over the maximum of {MAX_DELAY_MS // 1000} s")
        if not broker.config.broker_permission & PERM_WRITE or broker.config.is_slave:
            raise V2Error(D.FORBIDDEN, f"broker {broker.config.broker_name} takes no sends now")
        config = broker.topics.get(pb.topic)
        if config is None:
            raise V2Error(D.TOPIC_NOT_FOUND, f"topic {pb.topic} does not exist on broker "
                                             f"{broker.config.broker_name}")
        if not config.writeable or config.write_queue_nums <= 0:
            raise V2Error(D.FORBIDDEN, f"topic {pb.topic} is not writable")
        msg = message_from_proto(pb, topic=TIMER_TOPIC, queue_id=0, born_host=born_host,
                                 now_ms=now, uniq_key=functools.partial(broker.uniq_key, now))
        msg.properties[PROPERTY_TIMER_REAL_TOPIC] = pb.topic
        msg.properties[PROPERTY_TIMER_REAL_QID] = str(random.randrange(config.write_queue_nums))
        msg = self._hop(msg, deliver_ms - now)
        result = await broker.putter.put_messages([msg])
        if result.status not in STORED_STATUSES or result.append is None:
            detail = result.append.error if result.append is not None else ""
            status = v2_status(put_status(result.status, detail))
            raise V2Error(status.code, status.message)
        return msg.properties[MessageProperty.UNIQ_KEY], result.append.queue_offsets[0]

    def _hop(self, msg: Message, remaining_ms: int) -> Message:
        """`msg` (for TIMER_TOPIC) as it is stored: through the schedule topic when a level
        or more remains."""
        level = hop_level(remaining_ms, self.levels_ms)
        if level == 0:
            msg.properties.pop(MessageProperty.DELAY, None)
            return msg
        msg.properties[MessageProperty.DELAY] = str(level)
        return to_schedule_topic(msg, len(self.levels_ms))

    # -- the timer topic's reader ----------------------------------------------------------
    def start(self) -> None:
        if not self.broker.config.is_slave:
            self._task = asyncio.create_task(self._run(), name="proxyTimer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        broker = self.broker
        store = broker.store
        committed = broker.offsets.query_offset(TIMER_GROUP, TIMER_TOPIC, 0)
        read_offset = max(committed, 0)
        waiting: list[tuple[int, int, MessageExt]] = []  # (due ms, offset, message)
        while True:
            try:
                result = store.get_message(TIMER_GROUP, TIMER_TOPIC, 0, read_offset,
                                           READ_BATCH, TagFilter(None))
                for record, offset in zip(result.messages, result.queue_offsets, strict=False):
                    ext = decode_record(record, 0, check_crc=False)
                    due = self._due_ms(ext)
                    remaining = due - broker.clock_ms()
                    if hop_level(remaining, self.levels_ms):
                        if not await self._put(self._hop(self._again(ext), remaining)):
                            break
                        self.hops += 1
                    else:
                        heapq.heappush(waiting, (due, offset, ext))
                    read_offset = offset + 1
                else:
                    read_offset = max(read_offset, result.next_begin_offset)
                while waiting and waiting[0][0] <= broker.clock_ms():
                    _, offset, ext = waiting[0]
                    if not await self._put(self._real(ext)):
                        break
                    heapq.heappop(waiting)
                    self.delivered += 1
                commit = min((o for _, o, _ in waiting), default=read_offset)
                if commit != committed:
                    broker.offsets.commit_offset(TIMER_GROUP, TIMER_TOPIC, 0, commit)
                    committed = commit
                wait_s = IDLE_WAIT_S
                if waiting:
                    wait_s = min(wait_s, max(0.0, (waiting[0][0] - broker.clock_ms()) / 1000))
                if wait_s > 0:
                    await broker.pull_hold.wait(TIMER_TOPIC, 0, read_offset, wait_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("delivery timer failed; again in %ss", RETRY_AFTER_FAILURE_S)
                await asyncio.sleep(RETRY_AFTER_FAILURE_S)

    @staticmethod
    def _due_ms(ext: MessageExt) -> int:
        due = ext.properties.get(PROPERTY_TIMER_DELIVER_MS, "")
        return int(due) if due.isdigit() else 0

    @staticmethod
    def _again(ext: MessageExt) -> Message:
        return message_from_ext(ext, topic=TIMER_TOPIC, queue_id=0,
                                properties=_unscheduled_properties(ext))

    @staticmethod
    def _real(ext: MessageExt) -> Message:
        props = _unscheduled_properties(ext)
        topic = props.pop(PROPERTY_TIMER_REAL_TOPIC, "")
        queue_id = props.pop(PROPERTY_TIMER_REAL_QID, "0")
        return message_from_ext(ext, topic=topic, queue_id=int(queue_id) if queue_id.isdigit()
                                else 0, properties=props)

    async def _put(self, msg: Message) -> bool:
        if not msg.topic:
            log.error("delayed message without a real topic dropped")
            return True
        result = await self.broker.putter.put_messages([msg])
        if result.status in STORED_STATUSES:
            return True
        log.warning("delayed message for %s not stored (%s); trying again in %ss", msg.topic,
                    result.status.value, RETRY_AFTER_FAILURE_S)
        await asyncio.sleep(RETRY_AFTER_FAILURE_S)
        return False
