"""Send processing (RocketMQ's SendMessageProcessor): checks, auto-create, one store put.

A single message and a batch take the same path; a batch is one store append, so its
messages land one after another in one queue or not at all.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from acl.caller import authorize_found
from acl.decision import Denied
from acl.requirements import SEND_BACK, STORED_TOPIC
from broker.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    DLQ_QUEUE_NUMS,
    MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    RETRY_FIRST_DELAY_LEVEL,
    RETRY_GROUP_TOPIC_PREFIX,
    RETRY_QUEUE_NUMS,
)
from broker.convert import decode_messages, message_from_ext, message_from_proto, parse_born_host
from broker.schedule import to_schedule_topic
from broker.status import STORED_STATUSES, RequestError, ok, put_status, unexpected
from broker.topic_config import TopicConfig, send_topic_problem
from common.codec import MessageExt, encode_offset_msg_id
from common.constants import PERM_READ_WRITE, PERM_WRITE, MessageProperty
from mqproto import common_pb2, messaging_pb2
from store.constants import PutMessageStatus
from store.message import Message, topic_problem

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from broker.transaction.prepare import HalfMessages
    from store.commitlog import AppendResult
    from store.message_store import PutMessageResult

log = logging.getLogger(__name__)
SEVERAL = "SendBatch (send channel, several)"  # how a SEND_BATCHES failure is logged
P = ParamSpec("P")
R = TypeVar("R")


@functools.lru_cache(maxsize=16)  # asked at every send
def _offset_msg_id_host(store_host: tuple[str, int]) -> str:
    """offsetMsgId = store host bytes + offset (8 bytes), in hex: the host part."""
    return encode_offset_msg_id(store_host, 0)[:-16]


# The answer status of a plain stored put, made once (a message passed to a constructor
# is copied into it; never changed).
_PUT_OK_STATUS = put_status(PutMessageStatus.PUT_OK)


def _outcome(result: PutMessageResult, first: Message
             ) -> tuple[common_pb2.Status, AppendResult | None]:
    """A put's answer status and its append (None when nothing was stored; logged)."""
    append = result.append
    if result.status is PutMessageStatus.PUT_OK and append is not None:
        return _PUT_OK_STATUS, append
    if result.status in STORED_STATUSES and append is not None:
        return put_status(result.status), append
    detail = append.error if append is not None else ""
    log.debug("send to %s-%d refused: %s %s", first.topic, first.queue_id,
              result.status.value, detail)
    return put_status(result.status, detail), None


def _observe_latency(send: Callable[Concatenate[SendProcessor, P], Awaitable[R]]
                     ) -> Callable[Concatenate[SendProcessor, P], Coroutine[Any, Any, R]]:
    """A send request's handler that also puts its time in the broker's send latency
    histogram (refused sends too: it counts every answered send request)."""
    @functools.wraps(send)
    async def timed(self: SendProcessor, *args: P.args, **kwargs: P.kwargs) -> R:
        started = time.perf_counter()
        try:
            return await send(self, *args, **kwargs)
        finally:
            self.broker.stats.send_latency.observe(time.perf_counter() - started)
    return timed


class SendProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        # Prepared (transactional) messages: broker/transaction's hook, set by the
        # controller; without it they are refused.
        self.half_messages: HalfMessages | None = None

    @_observe_latency
    async def send_message(self, request: messaging_pb2.SendMessageRequest,
                           born_host: tuple[str, int]) -> messaging_pb2.SendMessageResponse:
        topic = request.message.topic
        status, results = await self._send(topic, request.queue_id, [request.message],
                                           request.default_topic_queue_nums, born_host,
                                           producer_group=request.producer_group)
        return messaging_pb2.SendMessageResponse(
            status=status, result=results[0] if results else None)

    @_observe_latency
    async def send_batch(self, request: messaging_pb2.SendBatchRequest,
                         born_host: tuple[str, int]) -> messaging_pb2.SendBatchResponse:
        # The batch's topic is the one its access was checked for (acl/resources.py): its
        # messages name that one or none.
        topic = request.topic
        if not topic:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               "the batch names no topic (SendBatchRequest.topic): a batch "
                               "has one topic, named there")
        if request.encoded_messages:
            return await self._send_encoded(request, born_host)
        if not request.messages:
            raise RequestError(common_pb2.INVALID_PARAMETER, "a batch needs at least one message")
        for i, m in enumerate(request.messages):
            if m.topic and m.topic != topic:
                raise RequestError(common_pb2.MESSAGE_ILLEGAL,
                                   f"message {i} of the batch is for topic {m.topic!r}, "
                                   f"the batch for {topic!r}: a batch has one topic")
        self._check_batch_size(sum(len(m.body) for m in request.messages))
        status, results = await self._send(topic, request.queue_id, request.messages,
                                           request.default_topic_queue_nums, born_host,
                                           batch=True)
        return messaging_pb2.SendBatchResponse(status=status, results=results)

    async def send_grouped(self, requests: Sequence[messaging_pb2.SendBatchRequest],
                           born_host: tuple[str, int]
                           ) -> list[messaging_pb2.SendBatchResponse | None]:
        """Batches of a SEND_BATCHES frame (any topics) stored in one append, each checked
        and answered on its own as send_batch would. Spread over many topics a frame holds
        hundreds of small batches: one coroutine, future and append each cost more than
        their messages. A batch this path does not take (not encoded, a topic not in the
        table: created by the send, or a retry / dead-letter topic) is None: the caller
        sends it with send_batch, after these."""
        started = time.perf_counter()
        broker = self.broker
        responses: list[messaging_pb2.SendBatchResponse | None] = [None] * len(requests)
        try:
            self._check_broker()
        except RequestError as e:
            refused = messaging_pb2.SendBatchResponse(status=e.status())
            return [refused] * len(requests)
        topics = broker.topics
        configs: dict[str, TopicConfig | None] = {}
        now = broker.clock_ms()
        uniq_key = functools.partial(broker.uniq_key, now)
        max_size = broker.store_config.max_message_size
        taken: list[tuple[int, list[Message]]] = []
        for i, request in enumerate(requests):
            topic = request.topic
            config = configs.get(topic, False)
            if config is False:
                config = configs[topic] = (topics.get(topic) if send_topic_problem(topic) is None
                                           else None)
            encoded = request.encoded_messages  # each read of a bytes field copies it
            if config is None or not encoded or request.messages:
                continue
            try:
                self._check_writeable(config)
                host = parse_born_host(request.born_host) if request.born_host else born_host
                msgs = decode_messages(encoded, topic=topic,
                                       queue_id=self._queue_id(config, request.queue_id),
                                       born_host=host,
                                       born_timestamp=request.born_timestamp or now,
                                       uniq_key=uniq_key)
                if len(encoded) > max_size:  # the bodies are less than their encoding
                    self._check_batch_size(sum(len(m.body) for m in msgs))
                taken.append((i, msgs))
            except RequestError as e:
                responses[i] = messaging_pb2.SendBatchResponse(status=e.status())
            except Exception as e:
                log.exception("%s failed", SEVERAL)
                responses[i] = messaging_pb2.SendBatchResponse(status=unexpected(SEVERAL, e))
        stored: list[tuple[int, list[Message]]] = []
        groups: list[list[Message]] = []
        for i, msgs in taken:  # the store's messages: delayed / prepared ones moved
            try:
                groups.append(self._scheduled(msgs))
                stored.append((i, msgs))
            except RequestError as e:
                responses[i] = messaging_pb2.SendBatchResponse(status=e.status())
        results = await broker.putter.put_message_groups(groups) if groups else []
        for (i, msgs), result in zip(stored, results, strict=True):
            responses[i] = self._encoded_answer(msgs, *_outcome(result, msgs[0]))
        broker.stats.send_latency.observe(time.perf_counter() - started,
                                          len(responses) - responses.count(None))
        return responses

    async def _send_encoded(self, request: messaging_pb2.SendBatchRequest,
                            born_host: tuple[str, int]) -> messaging_pb2.SendBatchResponse:
        """A batch in RocketMQ's MessageBatch encoding; answered with packed offsets."""
        if request.messages:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               "a batch has messages or encoded_messages, not both")
        host = parse_born_host(request.born_host) if request.born_host else None
        topic = request.topic

        def build(queue_id: int, now: int, uniq_key: Callable[[], str]) -> list[Message]:
            msgs = decode_messages(request.encoded_messages, topic=topic, queue_id=queue_id,
                                   born_host=host or born_host,
                                   born_timestamp=request.born_timestamp or now,
                                   uniq_key=uniq_key)
            self._check_batch_size(sum(len(m.body) for m in msgs))
            return msgs

        put, msgs, append = await self._put(topic, request.queue_id,
                                            request.default_topic_queue_nums, build)
        return self._encoded_answer(msgs, put, append)

    def _encoded_answer(self, msgs: list[Message], put: common_pb2.Status,
                        append: AppendResult | None) -> messaging_pb2.SendBatchResponse:
        """The answer to a batch in MessageBatch encoding: packed offsets when stored."""
        if append is None:
            return messaging_pb2.SendBatchResponse(status=put)
        return messaging_pb2.SendBatchResponse(
            status=put, queue_id=msgs[0].queue_id, first_queue_offset=append.queue_offsets[0],
            commit_log_offsets=append.commit_log_offsets,
            offset_msg_id_host=_offset_msg_id_host(self.broker.store_host))

    async def send_back(self, request: messaging_pb2.ConsumerSendMsgBackRequest, *,
                        subscribed_only: bool = True) -> common_pb2.Status:
        """A message the group failed to consume (RocketMQ's consumerSendMsgBack): again to
        `%RETRY%{group}` after a growing delay, or to `%DLQ%{group}` once it was consumed
        max reconsume times (or the consumer asks, delay_level < 0).

        The message is the one at the commitlog offset the client names, so it is checked
        (unlike RocketMQ, which copies whatever is there into a topic the group may read):
        the request's account needs SUB on its topic and, `subscribed_only`, it must be of a
        topic the group's consumers here subscribe to or the group's retry topic (with no
        subscription known, the account's right decides). The proxy's dead-letter forwarding, of a
        message it delivered to the group itself, passes False."""
        broker = self.broker
        self._check_broker()
        group = request.consumer_group
        problem = topic_problem(RETRY_GROUP_TOPIC_PREFIX + group) if group else "it is empty"
        if problem is not None:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"consumer group {group!r} is not usable: {problem}")
        ext = broker.store.look_message_by_offset(request.commit_log_offset)
        if ext is None:
            raise RequestError(common_pb2.SYSTEM_ERROR,
                               f"look message by offset failed, {request.commit_log_offset}")
        self._check_send_back(group, ext, subscribed_only)
        props = dict(ext.properties)
        props.setdefault(PROPERTY_RETRY_TOPIC, ext.topic)
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, request.origin_message_id or ext.msg_id)
        props.pop(MessageProperty.DELAY, None)
        # Unset or negative: the default. 0 is a limit like any other: the first failure
        # goes to the DLQ (RocketMQ's maxReconsumeTimes).
        max_times = (request.max_reconsume_times
                     if request.HasField("max_reconsume_times")
                     and request.max_reconsume_times >= 0 else MAX_RECONSUME_TIMES)
        delay_level = request.delay_level
        if ext.reconsume_times >= max_times or delay_level < 0:
            topic = DLQ_GROUP_TOPIC_PREFIX + group
            config = await self._send_back_topic(topic, DLQ_QUEUE_NUMS, PERM_WRITE)
            log.info("message %s of %s consumed %d times by %s: to %s",
                     props.get(MessageProperty.UNIQ_KEY), props[PROPERTY_RETRY_TOPIC],
                     ext.reconsume_times, group, topic)
        else:
            topic = RETRY_GROUP_TOPIC_PREFIX + group
            config = await self._send_back_topic(topic, RETRY_QUEUE_NUMS, PERM_READ_WRITE)
            props[MessageProperty.DELAY] = str(
                delay_level or RETRY_FIRST_DELAY_LEVEL + ext.reconsume_times)
        msg = message_from_ext(ext, topic=topic,
                               queue_id=random.randrange(config.write_queue_nums),
                               properties=props)
        msg.reconsume_times = ext.reconsume_times + 1
        msg.born_timestamp = broker.clock_ms()
        result = await broker.putter.put_messages(self._scheduled([msg]))
        if result.status not in STORED_STATUSES:
            detail = result.append.error if result.append is not None else ""
            return put_status(result.status, detail)
        return ok()

    def _check_send_back(self, group: str, ext: MessageExt, subscribed_only: bool) -> None:
        """Raises RequestError(NO_PERMISSION) when `group` may not send `ext` back."""
        where = (f"the message at commitlog offset {ext.commit_log_offset} is of topic "
                 f"{ext.topic}")
        try:
            authorize_found(SEND_BACK, {STORED_TOPIC: (ext.topic,)}, "ConsumerSendMsgBack")
        except Denied as e:
            raise RequestError(common_pb2.NO_PERMISSION, f"{e} ({where})") from None
        retry = RETRY_GROUP_TOPIC_PREFIX + group
        if not subscribed_only or ext.topic == retry:
            return
        subscribed = self.broker.clients.subscribed_topics(group)
        if subscribed and ext.topic not in subscribed:
            raise RequestError(common_pb2.NO_PERMISSION, (
                f"ConsumerSendMsgBack of group {group} refused: {where}, which the group's "
                f"consumers here do not subscribe to ({', '.join(sorted(subscribed))}); a "
                f"group sends back messages of its subscriptions and of {retry} only"))

    async def ensure_retry_topic(self, group: str) -> None:
        """A clustering consumer's retry topic exists on masters from its first heartbeat,
        so its route is there before any message fails (as RocketMQ's heartbeat does)."""
        broker = self.broker
        topic = RETRY_GROUP_TOPIC_PREFIX + group
        if (broker.topics.get(topic) is None and not broker.config.is_slave
                and broker.config.broker_permission & PERM_WRITE
                and topic_problem(topic) is None):
            await self._send_back_topic(topic, RETRY_QUEUE_NUMS, PERM_READ_WRITE)

    async def _send_back_topic(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        topics = self.broker.topics
        config = topics.get(topic)
        if config is None:
            config = topics.create_in_send_back(topic, queue_nums, perm)
            await self.broker.topics_changed()
        if not config.writeable or config.write_queue_nums <= 0:
            raise RequestError(common_pb2.NO_PERMISSION,
                               f"the topic[{topic}] sending message is forbidden")
        return config

    @staticmethod
    def _check_writeable(config: TopicConfig) -> None:
        if not config.writeable:
            raise RequestError(common_pb2.NO_PERMISSION,
                               f"the topic[{config.topic_name}] sending message is forbidden")

    def _check_batch_size(self, total: int) -> None:
        limit = self.broker.store_config.max_message_size
        if total > limit:
            raise RequestError(common_pb2.MESSAGE_ILLEGAL,
                               f"batch bodies total {total} bytes, over maxMessageSize {limit}")

    async def _send(self, topic: str, queue_id: int, pbs: Sequence[messaging_pb2.Message],
                    requested_queue_nums: int, born_host: tuple[str, int], *,
                    producer_group: str = "", batch: bool = False
                    ) -> tuple[common_pb2.Status, list[messaging_pb2.SendResultEntry]]:
        # A prepared message is stored as a half message (broker/transaction).
        halves = self.half_messages
        group = None
        if halves is None:
            for pb in pbs:
                self._check_supported(pb)
        else:
            group = halves.producer_group(pbs, producer_group, batch=batch)
            if group is not None:
                await halves.before_put()

        def build(queue_id: int, now: int, uniq_key: Callable[[], str]) -> list[Message]:
            msgs = [message_from_proto(pb, topic=topic, queue_id=queue_id, born_host=born_host,
                                       now_ms=now, uniq_key=uniq_key) for pb in pbs]
            if halves is not None and group is not None:
                msgs = [halves.mark(m, group, pb) for m, pb in zip(msgs, pbs, strict=True)]
            return msgs

        put, msgs, append = await self._put(topic, queue_id, requested_queue_nums, build)
        if append is None:
            return put, []
        return put, self._results(msgs, append.commit_log_offsets, append.queue_offsets)

    async def _put(self, topic: str, queue_id: int, requested_queue_nums: int,
                   build: Callable[[int, int, Callable[[], str]], list[Message]]
                   ) -> tuple[common_pb2.Status, list[Message], AppendResult | None]:
        """Checks, builds the store messages (`build(queue_id, now_ms, uniq_key)`), puts them
        in one append and waits for the flush / slave the role asks; the append is None
        when nothing was stored."""
        broker = self.broker
        self._check_broker()
        config = await self._topic_config(topic, requested_queue_nums, queue_id)
        queue_id = self._queue_id(config, queue_id)
        now = broker.clock_ms()
        msgs = build(queue_id, now, functools.partial(broker.uniq_key, now))
        put, append = _outcome(await broker.putter.put_messages(self._scheduled(msgs)), msgs[0])
        return put, msgs, append

    def _scheduled(self, msgs: list[Message]) -> list[Message]:
        """What the store gets: delayed messages moved to their level's schedule queue, a
        prepared message to the half queue (the answer still names their real queue). A
        batch's messages share one level."""
        halves = self.half_messages
        if halves is not None and halves.is_prepared(msgs[0]):
            return halves.stored(msgs)
        delay = msgs[0].properties.get(MessageProperty.DELAY)
        if delay is None and (len(msgs) == 1 or not any(
                MessageProperty.DELAY in m.properties for m in msgs)):
            return msgs
        if any(m.properties.get(MessageProperty.DELAY) != delay for m in msgs):
            raise RequestError(common_pb2.MESSAGE_ILLEGAL,
                               "the messages of a batch need one delay level")
        if not delay.isdigit():
            raise RequestError(common_pb2.MESSAGE_ILLEGAL, f"DELAY {delay!r} is not a level")
        levels = len(self.broker.store_config.delay_levels_ms)
        return [to_schedule_topic(m, levels) for m in msgs]

    def _results(self, msgs: list[Message], phys: list[int], queue_offsets: list[int]
                 ) -> list[messaging_pb2.SendResultEntry]:
        host_hex = _offset_msg_id_host(self.broker.store_host)
        entry = messaging_pb2.SendResultEntry
        return [
            entry(message_id=m.properties["UNIQ_KEY"], offset_msg_id=f"{host_hex}{p:016X}",
                  queue_id=m.queue_id, queue_offset=q, commit_log_offset=p,
                  # RocketMQ's transaction id is the UNIQ_KEY of the half message.
                  transaction_id=m.properties["UNIQ_KEY"]
                  if m.properties.get(MessageProperty.TRAN_MSG) == "true" else "")
            for m, p, q in zip(msgs, phys, queue_offsets, strict=True)
        ]

    def _check_broker(self) -> None:
        broker = self.broker
        if not broker.config.broker_permission & PERM_WRITE:
            raise RequestError(common_pb2.NO_PERMISSION,
                               f"the broker[{broker.config.broker_name}] sending message is "
                               "forbidden")
        if broker.config.is_slave:
            # The remark without the code: clients print "CODE: remark".
            raise RequestError(common_pb2.SERVICE_NOT_AVAILABLE,
                               "this broker is a slave and refuses writes; send to the "
                               "master of its group")

    async def _topic_config(self, topic: str, requested_queue_nums: int,
                            queue_id: int = -1) -> TopicConfig:
        problem = send_topic_problem(topic)
        if problem is not None:
            raise RequestError(common_pb2.MESSAGE_ILLEGAL, problem)
        topics = self.broker.topics
        config = topics.get(topic)
        if config is None and topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            # Created write-only by send_back when a message failed max times, never by a
            # send (auto-create would make it read-write with the default queue count).
            raise RequestError(common_pb2.TOPIC_NOT_EXIST,
                               f"topic[{topic}] not exist: a dead-letter topic is created by "
                               "the broker when a message of its group fails for good")
        if config is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            # As RocketMQ: a retry topic has its group's retry queue count, auto-create or not.
            config = await self._send_back_topic(topic, RETRY_QUEUE_NUMS, PERM_READ_WRITE)
        if config is None:
            queue_nums = topics.auto_created_queue_nums(requested_queue_nums)
            if queue_id >= queue_nums:  # refused: nothing is created for it
                raise RequestError(common_pb2.INVALID_PARAMETER,
                                   f"queueId[{queue_id}] is illegal: topic {topic} does not "
                                   f"exist here and a send would create it with {queue_nums} "
                                   "queues (it was not created)")
            config = topics.create_in_send(topic, requested_queue_nums)
            if config is None:
                raise RequestError(common_pb2.TOPIC_NOT_EXIST,
                                   f"topic[{topic}] not exist, apply first please! "
                                   "(autoCreateTopicEnable is false)")
            await self.broker.topics_changed()
        self._check_writeable(config)
        return config

    @staticmethod
    def _queue_id(config: TopicConfig, queue_id: int) -> int:
        if queue_id < 0:  # the producer lets the broker choose
            return random.randrange(max(1, config.write_queue_nums))
        if queue_id >= config.queue_nums:
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               f"queueId[{queue_id}] is illegal, topic {config.topic_name} has "
                               f"{config.write_queue_nums} write queues "
                               f"({config.read_queue_nums} read queues) on this broker")
        return queue_id

    @staticmethod
    def _check_supported(pb: messaging_pb2.Message) -> None:
        if pb.system_properties.transaction_type != messaging_pb2.TRANSACTION_NOT_TYPE:
            raise RequestError(common_pb2.REQUEST_CODE_NOT_SUPPORTED,
                               "transactional messages are not served by this broker")
