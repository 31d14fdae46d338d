"""Pull processing (RocketMQ's PullMessageProcessor) and long polling
(PullRequestHoldService).

A pull that finds no new message waits up to its suspend time; the store's dispatch
thread reports each consume-queue append through an arriving listener, which is handed to
the event loop (one pending hand-over at a time) and wakes the pulls waiting on that queue.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker.constants import (
    DEADLINE_MARGIN_S,
    DEFAULT_PULL_BATCH_SIZE,
    FILTER_SKIP_ANSWER_S,
    MAX_SUSPEND_MILLIS,
    WHICH_BROKER_WHEN_CONSUME_SLOWLY,
)
from broker.convert import message_to_proto
from broker.status import GET_STATUS_PROTO, RequestError, pull_code, status
from common.codec import decode_record
from common.constants import MASTER_ID, PERM_READ
from mqproto import common_pb2, messaging_pb2
from store.constants import GetMessageStatus
from store.reading import GetMessageResult, MessageFilter

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]


class PullRequestHoldService:
    """Pulls waiting for a message on (topic, queueId), woken by the store's dispatch."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 max_offset_in_queue: Callable[[str, int], int]) -> None:
        self.loop = loop
        self.max_offset_in_queue = max_offset_in_queue
        self._holds: dict[QueueKey, dict[asyncio.Future[bool], int]] = {}
        self._lock = threading.Lock()
        self._arrived: dict[QueueKey, int] = {}  # handed over from the dispatch thread
        self._drain_scheduled = False
        self.closed = False
        # Set at shutdown: long-lived streams (consumer group watches) end with it.
        self.closed_event = asyncio.Event()

    def __len__(self) -> int:
        return sum(len(h) for h in self._holds.values())

    # -- dispatch thread -------------------------------------------------------------------
    def on_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's arriving listener; runs on the dispatch thread."""
        key = (topic, queue_id)
        with self._lock:
            if self._arrived.get(key, -1) < max_offset:
                self._arrived[key] = max_offset
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass

    # -- event loop ------------------------------------------------------------------------
    def _drain(self) -> None:
        with self._lock:
            arrived, self._arrived = self._arrived, {}
            self._drain_scheduled = False
        for (topic, queue_id), max_offset in arrived.items():
            self.notify_message_arriving(topic, queue_id, max_offset)

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int) -> int:
        """Wakes the pulls on a queue that wait below `max_offset`; returns how many."""
        holds = self._holds.get((topic, queue_id))
        if not holds:
            return 0
        woken = 0
        for future, offset in holds.items():
            if offset < max_offset and not future.done():
                future.set_result(True)
                woken += 1
        return woken

    async def wait(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """True when a message at or past `offset` arrived, False on timeout or shutdown."""
        if self.closed or timeout_s <= 0:
            return False
        key = (topic, queue_id)
        future: asyncio.Future[bool] = self.loop.create_future()
        holds = self._holds.setdefault(key, {})
        holds[future] = offset
        try:
            if self.max_offset_in_queue(topic, queue_id) > offset:
                return True  # it arrived while this pull was being set up
            try:
                return await asyncio.wait_for(future, timeout_s)
            except TimeoutError:
                return False
        finally:
            holds.pop(future, None)
            if not holds:
                self._holds.pop(key, None)

    def shutdown(self) -> None:
        """Answers every waiting pull now (it re-reads and returns what there is)."""
        self.closed = True
        self.closed_event.set()
        for holds in list(self._holds.values()):
            for future in holds:
                if not future.done():
                    future.set_result(False)


class PullProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    async def pull(self, request: messaging_pb2.PullMessageRequest,
                   time_remaining: float | None = None) -> messaging_pb2.PullMessageResponse:
        """`time_remaining` is the caller's gRPC deadline: a long poll answers before it."""
        broker = self.broker
        group, topic, queue_id = request.consumer_group, request.topic, request.queue_id
        self._check(request)
        if not broker.slave_read_allowed():
            # RocketMQ's PULL_RETRY_IMMEDIATELY with suggestWhichBrokerId = master.
            return messaging_pb2.PullMessageResponse(
                status=status(common_pb2.NO_MATCHED_MSG, "this slave serves pulls only when "
                              "slaveReadEnable or its master is gone: pull from the master"),
                next_begin_offset=request.queue_offset, suggest_which_broker_id=MASTER_ID)
        if request.HasField("commit_offset") and not broker.config.is_slave:
            try:
                broker.commit_offset(group, topic, queue_id, request.commit_offset)
            except RequestError as e:
                log.warning("pull of %s from %s-%d: commit offset ignored: %s", group, topic,
                            queue_id, e.remark)
        max_nums = request.max_msg_nums if request.max_msg_nums > 0 else DEFAULT_PULL_BATCH_SIZE
        message_filter = broker.filters.message_filter(request.expression_type,
                                                       request.subscription)
        offset = request.queue_offset
        result = broker.store.get_message(group, topic, queue_id, offset, max_nums,
                                          message_filter)
        code = pull_code(result.status, offset)
        suspend_s = min(request.suspend_timeout_millis, MAX_SUSPEND_MILLIS) / 1000
        if time_remaining is not None:
            suspend_s = min(suspend_s, time_remaining - DEADLINE_MARGIN_S)
        if suspend_s > 0:
            result, code = await self._hold(request, max_nums, message_filter, result, code,
                                            suspend_s)
        next_begin_offset = result.next_begin_offset
        if code == common_pb2.OFFSET_ILLEGAL and broker.config.is_slave:
            # A slave may just be behind its master: keep the consumer where it is and let
            # it retry (RocketMQ without offsetCheckInSlave).
            code, next_begin_offset = common_pb2.NO_MATCHED_MSG, offset
        return self._response(request, result, code, next_begin_offset)

    async def _hold(self, request: messaging_pb2.PullMessageRequest, max_nums: int,
                    message_filter: MessageFilter, result: GetMessageResult, code: int,
                    suspend_s: float) -> tuple[GetMessageResult, int]:
        """Long polling: a pull that found nothing waits for the next message of its queue.
        A filtered pull that scanned to the queue's end without a match waits from there,
        and keeps waiting while what arrives does not match (its next offset moving past
        it), so that its consumer is answered for a message it takes, or with the moved
        offset FILTER_SKIP_ANSWER_S after the pull came in (its consumer commits it: a
        group whose filter skips everything has no lag), or at the end of the suspend
        time."""
        broker = self.broker
        group, topic, queue_id = request.consumer_group, request.topic, request.queue_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + suspend_s
        skip_deadline = min(deadline, loop.time() + FILTER_SKIP_ANSWER_S)
        offset = request.queue_offset
        while True:
            if code == common_pb2.NO_NEW_MSG:
                wait_from = offset
            elif (result.status is GetMessageStatus.NO_MATCHED_MESSAGE
                  and result.next_begin_offset >= result.max_offset):
                wait_from = result.next_begin_offset  # nothing matched up to the end
            else:
                return result, code
            skipped = wait_from > request.queue_offset
            remaining = (skip_deadline if skipped else deadline) - loop.time()
            if remaining <= 0:
                return result, code
            arrived = await broker.pull_hold.wait(topic, queue_id, wait_from, remaining)
            again = broker.store.get_message(group, topic, queue_id, wait_from, max_nums,
                                             message_filter)
            again_code = pull_code(again.status, wait_from)
            if again_code == common_pb2.NO_NEW_MSG and wait_from > offset:
                # Nothing new past what was skipped: answer with the skip (NO_MATCHED_MSG,
                # next offset past the non-matching messages).
                if not arrived:
                    return result, code
                continue
            result, code, offset = again, again_code, wait_from
            if not arrived:
                return result, code

    def _check(self, request: messaging_pb2.PullMessageRequest) -> None:
        broker = self.broker
        if not broker.config.broker_permission & PERM_READ:
            raise RequestError(common_pb2.NO_PERMISSION,
                               f"the broker[{broker.config.broker_name}] pulling message is "
                               "forbidden")
        if not request.consumer_group:
            raise RequestError(common_pb2.INVALID_PARAMETER, "consumer_group is required")
        config = broker.topics.get(request.topic)
        if config is None:
            raise RequestError(common_pb2.TOPIC_NOT_EXIST,
                               f"topic[{request.topic}] not exist, apply first please!")
        if not config.readable:
            raise RequestError(common_pb2.NO_PERMISSION,
                               f"the topic[{request.topic}] pulling message is forbidden")
        if not 0 <= request.queue_id < config.read_queue_nums:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"queueId[{request.queue_id}] is illegal, topic:"
                               f"[{request.topic}] topicConfig.readQueueNums:"
                               f"[{config.read_queue_nums}]")
        if request.queue_offset < 0:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"queue offset {request.queue_offset} is negative")

    def _response(self, request: messaging_pb2.PullMessageRequest, result: GetMessageResult,
                  code: int, next_begin_offset: int) -> messaging_pb2.PullMessageResponse:
        broker = self.broker
        messages: list[messaging_pb2.Message] = []
        raw = b""
        if request.raw_records:
            raw = b"".join(result.messages)
        else:
            messages = [message_to_proto(decode_record(record, 0, check_crc=False))
                        for record in result.messages]
        if result.messages:
            broker.stats.record_get(request.consumer_group, request.topic,
                                    len(result.messages))
        suggest = MASTER_ID
        if (result.suggest_pulling_from_slave and broker.config.slave_read_enable
                and not broker.config.is_slave):
            suggest = WHICH_BROKER_WHEN_CONSUME_SLOWLY
        remark = "" if code == common_pb2.SUCCESS else result.status.value
        return messaging_pb2.PullMessageResponse(
            status=status(code, remark),
            get_message_status=GET_STATUS_PROTO[result.status],
            next_begin_offset=next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
            suggest_which_broker_id=suggest,
            messages=messages,
            raw_records=raw,
        )
