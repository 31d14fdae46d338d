"""The producer (RocketMQ's DefaultMQProducer).

    producer = Producer("PG", "127.0.0.1:9876"); producer.start()
    result = producer.send(Message("TopicA", b"hi", tags="TagA", keys=["order-1"]))
    future = producer.send_async(msg, callback=lambda result, error: ...)  # or: await future
    producer.send_oneway(msg)
    producer.send_batch([msg1, msg2])              # one queue, one call
    producer.send_orderly(msg, sharding_key="order-1")   # same key -> same queue
    producer.shutdown()

Bodies of at least `compress_msg_body_over_howmuch` bytes (4 KiB) are sent compressed
(`compress_type` zlib, zstd or lz4 at `compress_level`), marked in the message's sysflag as
RocketMQ 5 marks them (common/compression.py); consumers decompress them.

Sync sends run on the caller's thread; async and one-way sends are gathered into batches
(accumulator.py) and sent on the client loop. Failed sends are retried twice on another
broker within the send timeout; brokers that failed or answered slowly are avoided for a
while (fault.py), but a master the name servers list again after losing it (restarted) is
sent to at once, over fresh connections.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from common.compression import (
    COMPRESS_LEVEL,
    COMPRESS_MSG_BODY_OVER_HOWMUCH,
    BodyCompressor,
    CompressionType,
)
from mqclient.accumulator import Batch, BatchAccumulator
from mqclient.constants import (
    BATCH_LINGER_S,
    BATCH_MAX_BYTES,
    BATCH_MAX_COUNT,
    DEFAULT_TOPIC_QUEUE_NUMS,
    MAX_INFLIGHT_BATCHES_PER_TOPIC,
    MAX_MESSAGE_SIZE,
    POLL_NAME_SERVER_INTERVAL_S,
    RETRY_TIMES_WHEN_SEND_FAILED,
    SEND_MSG_TIMEOUT_S,
)
from mqclient.fault import ClockMs, LatencyFaultTolerance, QueueSelector, monotonic_ms
from mqclient.instance import ClientInstance
from mqclient.loop import ACCESS_REFUSED, ClientLoop
from mqclient.message import (
    _BODY_TYPES,
    SEND_STATUS_BY_CODE,
    Message,
    MessageIdFactory,
    MessageQueue,
    MQClientError,
    SendFuture,
    SendResult,
    SendStatus,
    code_name,
    encode_messages,
)
from mqclient.route import TopicRoute
from mqclient.send_channel import SendChannelClosed
from mqclient.trace import MessageType, TraceBean, TraceContext, TraceType, now_ms
from mqclient.trace_dispatcher import TraceDispatcher, new_trace_dispatcher
from mqproto import common_pb2, messaging_pb2
from remoting.framing import KIND_SEND_BATCH, KIND_SEND_BATCHES, SendBatchesWriter

log = logging.getLogger(__name__)

# Broker answers after which a send is retried on another broker (DefaultMQProducerImpl's
# retryResponseCodes); any other failure is the message's fault and is raised at once.
RETRY_RESPONSE_CODES = frozenset({
    common_pb2.TOPIC_NOT_EXIST, common_pb2.SERVICE_NOT_AVAILABLE, common_pb2.SYSTEM_ERROR,
    common_pb2.SYSTEM_BUSY, common_pb2.NO_PERMISSION, common_pb2.OS_PAGECACHE_BUSY,
    common_pb2.CREATE_MAPPED_FILE_FAILED, common_pb2.UNKNOWN_ERROR,
})
# Batches of many topics for one broker go in SEND_BATCHES requests of at most this size.
MAX_SEND_BATCHES_BYTES = 1024 * 1024
MAX_SEND_TIMEOUT_S = 86_400  # a day: longer is a mistake, not a timeout
STICKY_QUEUE_MS = 1000  # an async batch's queue is kept at most this long (_sticky_queue)
STICKY_SLACK = 1024  # sticky queues kept beyond the cached routes before they are dropped
SendCallback = Callable[[SendResult | None, BaseException | None], None]
Outcome = list[SendResult] | BaseException
QueueSelectorFn = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


def select_by_hash(queues: Sequence[MessageQueue], msg: Message, key: Any) -> MessageQueue:
    """SelectMessageQueueByHash with a hash stable across processes (CRC32 of the key)."""
    return queues[zlib.crc32(str(key).encode()) % len(queues)]


# How a broker's NO_PERMISSION remark starts when access control refused the send (the send
# channel's answers): no retry on another broker helps, unlike a topic not writable there.
_ACCESS_REFUSED_REMARKS = tuple(f"{c.name}:" for c in ACCESS_REFUSED)


class _Attempts:
    """Bookkeeping of one send and its retries: deadline, last broker, errors."""

    def __init__(self, producer: Producer, timeout_s: float,
                 deadline: float | None = None) -> None:
        self.producer = producer
        self.deadline = deadline if deadline is not None else time.monotonic() + timeout_s
        self.timeout_s = timeout_s
        self.last_broker: str | None = None
        self.errors: tuple[str, ...] = ()  # no container per send (see SendFuture)

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def remaining(self) -> float:
        """The time left; TIMEOUT when none."""
        remaining = self.time_left()
        if remaining <= 0:
            raise MQClientError("TIMEOUT", f"send not done within {self.timeout_s} s"
                                + (f" ({'; '.join(self.errors)})" if self.errors else ""))
        return remaining

    def failed(self, mq: MessageQueue, started: float, why: str) -> None:
        self.producer.fault.update(mq.broker_name, (time.monotonic() - started) * 1000, True)
        self.last_broker = mq.broker_name
        self.errors += (f"{mq.broker_name}: {why}",)

    def unreachable(self, mq: MessageQueue, addr: str, started: float, error: BaseException,
                    timeout: float) -> None:
        """The attempt got no answer: SendChannelClosed, a gRPC error or TimeoutError.
        Refused credentials or permission (access control) raise at once: no retry helps."""
        if isinstance(error, grpc.RpcError) and error.code() in ACCESS_REFUSED:  # type: ignore[attr-defined]
            raise MQClientError("NO_PERMISSION", f"{mq.broker_name}: "  # type: ignore[attr-defined]
                                f"{error.code().name}: {error.details()}")
        if isinstance(error, TimeoutError):  # the broker may be slow: keep its channel
            why = f"no answer within {timeout:.3f} s"
            # ... or paused, and replaced by another master (controller mode): the route is
            # refreshed soon (once, unless it lost a master).
            self.producer.instance.watch.suspect(mq.topic)
        else:  # it may have restarted elsewhere: ask it again where its channel is
            self.producer.instance.channels.forget_send_address(addr)
            # and it may be gone: the name servers tell (its route is watched meanwhile)
            self.producer.instance.watch.suspect(mq.topic)
            if isinstance(error, SendChannelClosed):  # gRPC meanwhile (it may be full)
                self.producer.instance.channels.send_channel_failed(addr)
            why = (str(error.code().name)  # type: ignore[attr-defined]
                   if isinstance(error, grpc.RpcError) else str(error))
        self.failed(mq, started, why)

    def answered(self, mq: MessageQueue, started: float, status: common_pb2.Status) -> bool:
        """True when stored; False when worth a retry; raises when not."""
        latency_ms = (time.monotonic() - started) * 1000
        if status.code in SEND_STATUS_BY_CODE:
            self.producer.fault.update(mq.broker_name, latency_ms, False)
            return True
        if status.code == common_pb2.NO_PERMISSION and status.remark.startswith(
                _ACCESS_REFUSED_REMARKS):
            raise MQClientError("NO_PERMISSION", f"{mq.broker_name}: {status.remark}")
        if status.code in RETRY_RESPONSE_CODES:
            self.failed(mq, started, f"{code_name(status.code)} {status.remark}")
            return False
        raise MQClientError(code_name(status.code), status.remark)

    def give_up(self) -> MQClientError:
        return MQClientError("SEND_FAILED", f"send failed after {len(self.errors)} attempts: "
                             + "; ".join(self.errors))

    def next_target(self, route: TopicRoute, mq: MessageQueue | None
                     ) -> tuple[MessageQueue, str, float]:
        """The queue of the next attempt (`mq` when given, else another broker than the
        last), its master's address and the time left."""
        target = mq or self.producer.selector.select(route.publish_queues, self.last_broker)
        return target, _master_addr(route, target), self.remaining()


class Producer:
    def __init__(self, group: str, namesrv_addr: str | list[str], *,
                 send_timeout_s: float = SEND_MSG_TIMEOUT_S,
                 retry_times_when_send_failed: int = RETRY_TIMES_WHEN_SEND_FAILED,
                 default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS,
                 max_message_size: int = MAX_MESSAGE_SIZE,
                 batch_linger_s: float = BATCH_LINGER_S, batch_max_count: int = BATCH_MAX_COUNT,
                 batch_max_bytes: int = BATCH_MAX_BYTES,
                 max_inflight_batches: int = MAX_INFLIGHT_BATCHES_PER_TOPIC,
                 poll_name_server_interval_s: float = POLL_NAME_SERVER_INTERVAL_S,
                 clock_ms: ClockMs = monotonic_ms, loop: ClientLoop | None = None,
                 client_ip: str = "", access_key: str | None = None,
                 secret_key: str | None = None, tls_ca: str | None = None,
                 compress_msg_body_over_howmuch: int = COMPRESS_MSG_BODY_OVER_HOWMUCH,
                 compress_type: CompressionType | str = CompressionType.ZLIB,
                 compress_level: int = COMPRESS_LEVEL, enable_msg_trace: bool = False,
                 trace_topic: str | None = None) -> None:
        """`enable_msg_trace`: each send's trace (RocketMQ's Pub record) goes to
        `trace_topic` (default RMQ_SYS_TRACE_TOPIC) in the background (mqclient/trace.py).
        `compress_msg_body_over_howmuch`, `compress_type` (zlib, zstd, lz4),
        `compress_level`: bodies of at least that many bytes are sent compressed (as
        RocketMQ's DefaultMQProducer; 0 compresses all, a size over max_message_size none).
        `client_ip`: the address in the client id and message ids (RocketMQ's clientIP);
        default $MQCLIENT_IP, else the local address towards the name servers.
        `access_key`/`secret_key`: the account of a broker with aclEnable (default
        $MQ_ACCESS_KEY / $MQ_SECRET_KEY); each request is signed, the secret never sent.
        `tls_ca`: the CA of TLS servers (default $MQ_TLS_CA; none: plaintext)."""
        if not group:
            raise MQClientError("ILLEGAL_ARGUMENT", "a producer needs a group")
        self.group = group
        try:
            self.compressor = BodyCompressor(compress_type, compress_level,
                                             compress_msg_body_over_howmuch)
        except ValueError as e:
            raise MQClientError("ILLEGAL_ARGUMENT", str(e)) from None
        self.send_timeout_s = check_timeout(send_timeout_s)
        self.retry_times = retry_times_when_send_failed
        self.default_topic_queue_nums = default_topic_queue_nums
        self.max_message_size = max_message_size
        self.instance = ClientInstance(namesrv_addr, producer_group=group, loop=loop,
                                       poll_name_server_interval_s=poll_name_server_interval_s,
                                       client_ip=client_ip, access_key=access_key,
                                       secret_key=secret_key, tls_ca=tls_ca)
        self.instance.default_topic_queue_nums = default_topic_queue_nums
        self.instance.watch.master_listeners.append(self._master_returned)
        self.loop = self.instance.loop
        self.fault = LatencyFaultTolerance(clock_ms)
        self.clock_ms = clock_ms
        self.selector = QueueSelector(self.fault)
        # Async batches: by topic, the route the queue was chosen from, the queue, when it
        # was chosen (clock_ms) and the bytes sent to it since (_sticky_queue).
        self._sticky: dict[str, tuple[TopicRoute, MessageQueue, float, int]] = {}
        self.new_message_id = MessageIdFactory(self.instance.client_ip)
        self.accumulator = BatchAccumulator(
            self.loop, self._send_batch_async, linger_s=batch_linger_s,
            max_count=batch_max_count, max_bytes=batch_max_bytes,
            max_inflight=max_inflight_batches, multi_sender=self._send_batches_async)
        self.trace: TraceDispatcher | None = None
        if enable_msg_trace:
            self.trace = new_trace_dispatcher(
                group, namesrv_addr, trace_topic, Producer, loop=self.loop,
                poll_name_server_interval_s=poll_name_server_interval_s,
                client_ip=self.instance.client_ip, access_key=access_key,
                secret_key=secret_key, tls_ca=tls_ca)
            self.trace.group = group
        self.started = False

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Producer:
        if not self.started:
            self.loop.run(self.instance.start())
            if self.trace is not None:
                self.trace.start()
            self.started = True
        return self

    def shutdown(self) -> None:
        """Sends what async sends still wait for, then leaves the cluster."""
        if not self.started:
            return
        self.started = False

        async def stop() -> None:
            await self.accumulator.close()
            await self.instance.shutdown()

        if self.trace is not None:  # the traces of every send, then its producer
            self.loop.run(self.accumulator.flush())
            self.trace.shutdown()
        self.loop.run(stop())

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- routes --------------------------------------------------------------------------------
    def _master_returned(self, broker_name: str, addr: str) -> None:
        """A master the routes had lost is listed again (loop): it restarted. Its failures
        while it was gone no longer avoid it, and its connections start afresh (not after
        the reconnect backoff of a channel that failed meanwhile)."""
        self.fault.clear(broker_name)
        self.instance.channels.reset(addr)

    def _check_started(self) -> None:
        if not self.started:
            raise MQClientError("SHUTDOWN", "the producer is not started")

    def send_timeout(self, timeout_s: object) -> float:
        """A send's timeout: the producer's when None, else check_timeout's."""
        if timeout_s is None:
            return self.send_timeout_s
        return check_timeout(timeout_s)

    def publish_route(self, topic: str, timeout_s: float | None = None) -> TopicRoute:
        """The cached route of `topic`, fetched now when there is none (any thread); one
        whose master is gone (route_watch.py) waited for within `timeout_s`."""
        route = self._cached_route(topic)
        if route is not None:
            return route
        timeout_s = timeout_s or self.send_timeout_s
        instance = self.instance
        cached = instance.routes.get(topic)
        if instance.watch.watching(topic):  # its master is gone: the send waits for it
            route = self.loop.run(instance.watch.wait_publish_route(topic, timeout_s))
        elif cached is not None and instance.watch.fresh(topic):
            route = cached  # just fetched, without a master: not asked again
        else:
            try:
                route = self.loop.run(instance.fetch_route(topic), timeout_s)
            except TimeoutError:
                raise _no_route_within(topic, timeout_s) from None
        return self._check_route(topic, route)

    async def publish_route_async(self, topic: str, timeout_s: float | None = None
                                  ) -> TopicRoute:
        route = self._cached_route(topic)
        if route is not None:
            return route
        timeout_s = timeout_s or self.send_timeout_s
        watch = self.instance.watch
        cached = self.instance.routes.get(topic)
        if watch.watching(topic):  # its master is gone: the send waits for it
            route = await watch.wait_publish_route(topic, timeout_s)
        elif cached is not None and watch.fresh(topic):
            route = cached  # just fetched, without a master: not asked again
        else:
            try:
                async with asyncio.timeout(timeout_s):  # the fetch itself goes on (shared)
                    route = await self.instance.fetch_route(topic)
            except TimeoutError:
                raise _no_route_within(topic, timeout_s) from None
        return self._check_route(topic, route)

    def _cached_route(self, topic: str) -> TopicRoute | None:
        """The cached route of `topic` if it has queues to publish to; either way the
        route counts as in use (ClientInstance.route_used)."""
        instance = self.instance
        instance.route_used(topic)
        route = instance.routes.get(topic)
        return route if route is not None and route.publish_queues else None

    @staticmethod
    def _check_route(topic: str, route: TopicRoute | None) -> TopicRoute:
        if route is None or not route.publish_queues:
            raise MQClientError("NO_ROUTE", f"no route info of topic {topic}: no broker group "
                                "with a live master serves it (and none auto-creates it)")
        return route

    def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        self._check_started()
        return list(self.publish_route(topic).publish_queues)

    def _prepare(self, msgs: list[Message], sharding_key: str = ""
                 ) -> tuple[list[str], bytes, list[int]]:
        """The messages' new UNIQ_KEYs, their MessageBatch elements joined, and their
        sysflag bits (empty when none is compressed). A body of at least
        compress_msg_body_over_howmuch bytes goes compressed (its size checked before)."""
        self._check_started()
        ids = self.new_message_id.take(len(msgs))
        over = self.compressor.over
        flags: list[int] = []
        if any(len(m.body) >= over for m in msgs if isinstance(m.body, _BODY_TYPES)):
            sent = []
            for m in msgs:
                m.check(self.max_message_size)  # the body as given, as RocketMQ's Validators
                body, flag = self.compressor.compress(m.body)
                sent.append(dataclasses.replace(m, body=body) if flag else m)
                flags.append(flag)
            msgs = sent
        return ids, encode_messages(msgs, ids, self.max_message_size, sharding_key), flags

    # -- sync sends (any thread but the client loop's) -----------------------------------------
    def send(self, msg: Message, timeout_s: float | None = None) -> SendResult:
        """Sends one message, retrying on another broker; MQClientError when not stored."""
        started_ms = self._trace_start()
        ids, encoded, flags = self._prepare([msg])
        return self._traced([msg], self._send_sync(
            msg.topic, ids, encoded, None, timeout_s, self.retry_times, flags), started_ms)[0]

    def send_to_queue(self, msg: Message, mq: MessageQueue,
                      timeout_s: float | None = None) -> SendResult:
        """Sends to one given queue (no retry elsewhere)."""
        started_ms = self._trace_start()
        ids, encoded, flags = self._prepare([msg])
        return self._traced([msg], self._send_sync(msg.topic, ids, encoded, mq, timeout_s, 0,
                                                   flags), started_ms)[0]

    def send_orderly(self, msg: Message, sharding_key: Any,
                     selector: QueueSelectorFn = select_by_hash,
                     timeout_s: float | None = None) -> SendResult:
        """Ordered send: `selector(queues, msg, sharding_key)` picks the queue (by default
        the key's hash), so messages of one key stay in one queue in send order. The queues
        include those of a group whose master is away (a send there fails until it is
        back): a key does not move to another queue meanwhile."""
        started_ms = self._trace_start()
        ids, encoded, flags = self._prepare([msg], str(sharding_key))
        route = self.publish_route(msg.topic)
        mq = selector(route.ordered_queues or route.publish_queues, msg, sharding_key)
        return self._traced([msg], self._send_sync(msg.topic, ids, encoded, mq, timeout_s, 0,
                                                   flags), started_ms)[0]

    def send_batch(self, msgs: Sequence[Message], timeout_s: float | None = None
                   ) -> list[SendResult]:
        """Messages of one topic stored together in one queue (all or none)."""
        if not msgs:
            raise MQClientError("ILLEGAL_ARGUMENT", "a batch needs at least one message")
        topic, level = msgs[0].topic, msgs[0].delay_level
        if any(m.topic != topic or m.delay_level != level for m in msgs):
            raise MQClientError("ILLEGAL_ARGUMENT",
                                "the messages of a batch need one topic and one delay level")
        started_ms = self._trace_start()
        ids, encoded, flags = self._prepare(list(msgs))
        total = sum(len(m.body) for m in msgs)
        if total > self.max_message_size:
            raise MQClientError("ILLEGAL_ARGUMENT", f"the batch bodies total {total} bytes, "
                                f"over the maximum {self.max_message_size}; split it")
        return self._traced(msgs, self._send_sync(
            topic, ids, encoded, None, timeout_s, self.retry_times, flags), started_ms)

    def _trace_start(self) -> int:
        """When a traced send starts (0 untraced: no clock read on that path)."""
        return now_ms() if self.trace is not None else 0

    def _traced(self, msgs: Sequence[Message], results: list[SendResult], started_ms: int
                ) -> list[SendResult]:
        """`results`, after a Pub record per message when tracing."""
        if self.trace is not None:
            for m, result in zip(msgs, results, strict=True):
                self.trace_pub(m, result, started_ms)
        return results

    def _send_sync(self, topic: str, ids: list[str], encoded: bytes,
                   mq: MessageQueue | None, timeout_s: float | None, retries: int,
                   flags: Sequence[int] = ()) -> list[SendResult]:
        """Sends on the caller's thread over a blocking connection (see _send_encoded)."""
        attempts = _Attempts(self, self.send_timeout(timeout_s))
        request = self._request(topic, encoded, flags)
        route = self.publish_route(topic, attempts.remaining())
        channels = self.instance.channels
        refused = ""  # as in _send_encoded
        for _ in range(1 + retries):
            target, addr, remaining = attempts.next_target(route, mq)
            request.queue_id = target.queue_id
            started = time.monotonic()
            try:
                channel = channels.known_send_address(addr)
                if channel is None:
                    channel = self.loop.run(channels.send_channel_address(addr, remaining))
                if channel:
                    r = messaging_pb2.SendBatchResponse.FromString(channels.blocking.request(
                        channel, KIND_SEND_BATCH, request.SerializeToString(), remaining))
                else:  # a broker without one: gRPC
                    if addr == refused and not channels.wait_ready(
                            addr, self._master_moved(topic, target.broker_name, addr),
                            remaining):
                        attempts.failed(target, started, "not connected")
                        route, refused = self._current_route(topic, route), ""
                        continue  # another master is listed (or the time is up)
                    remaining = attempts.remaining()
                    r = channels.sync_messaging(addr).SendBatch(
                        request, timeout=remaining, wait_for_ready=addr == refused)
            except (SendChannelClosed, grpc.RpcError, TimeoutError) as e:
                refused = addr if _refused(e) else ""
                attempts.unreachable(target, addr, started, e, remaining)
                route = self._current_route(topic, route)
                continue
            if attempts.answered(target, started, r.status):
                return _results(r, target, ids)
        raise attempts.give_up()

    def _current_route(self, topic: str, route: TopicRoute) -> TopicRoute:
        """The cached route of `topic` now (a retry after a failure takes a master the
        route watch found meanwhile), else `route`."""
        current = self.instance.routes.get(topic)
        return current if current is not None and current.publish_queues else route

    def _master_moved(self, topic: str, broker_name: str, addr: str) -> Callable[[], bool]:
        """While a retry waits for `addr` to take connections: True once the route names
        another master of `broker_name` (the route is kept refreshed meanwhile)."""
        watch = self.instance.watch

        def moved() -> bool:
            watch.suspect(topic)
            route = self.instance.routes.get(topic)
            group = route.brokers.get(broker_name) if route is not None else None
            master = group.master_addr if group is not None else None
            return master is not None and master != addr
        return moved

    def _request(self, topic: str, encoded: bytes, flags: Sequence[int] = ()
                 ) -> messaging_pb2.SendBatchRequest:
        return messaging_pb2.SendBatchRequest(
            producer_group=self.group, topic=topic, encoded_messages=encoded,
            born_timestamp=int(time.time() * 1000),
            default_topic_queue_nums=self.default_topic_queue_nums, sys_flags=flags)

    # -- async sends (client loop) -------------------------------------------------------------
    def send_async(self, msg: Message, callback: SendCallback | None = None,
                   timeout_s: float | None = None) -> SendFuture:
        """Returns at once; the future (awaitable on any loop) holds the SendResult or the
        MQClientError. `callback(result, error)` runs on the client's I/O thread: keep it
        short, never block in it."""
        timeout_s = self.send_timeout(timeout_s)
        [message_id], element, flags = self._prepare([msg])
        future = SendFuture()
        if self.trace is not None:  # its Pub record once done (no callback: no lock)
            self.trace.append_send(now_ms(), msg, future)
        if callback is not None:
            future.add_done_callback(lambda f: _run_callback(callback, f))
        self.accumulator.append(msg.topic, message_id, element, future, timeout_s,
                                msg.delay_level, flags[0] if flags else 0)
        return future

    # -- trace ---------------------------------------------------------------------------------
    def trace_pub(self, msg: Message, result: SendResult, started_ms: int,
                  msg_type: int = MessageType.Normal_Msg) -> None:
        """A stored send's Pub record to the trace dispatcher (SendMessageTraceHookImpl);
        never raises, never waits."""
        trace = self.trace
        if trace is not None and msg.topic != trace.trace_topic:
            keys = msg.keys
            bean = TraceBean(
                topic=msg.topic, msg_id=result.msg_id, offset_msg_id=result.offset_msg_id,
                tags=msg.tags or None,
                keys=(keys if isinstance(keys, str) else " ".join(keys)) or None,
                body_length=len(msg.body),
                msg_type=MessageType.Delay_Msg if msg.delay_level else msg_type)
            trace.append(TraceContext(TraceType.Pub, started_ms, group=self.group,
                                      cost_time=now_ms() - started_ms,
                                      success=result.status is SendStatus.SEND_OK,
                                      beans=[bean]))

    def send_oneway(self, msg: Message) -> None:
        """Fire and forget: no result, no error reported (it is logged)."""
        [message_id], element, flags = self._prepare([msg])
        self.accumulator.append(msg.topic, message_id, element, None, self.send_timeout_s,
                                msg.delay_level, flags[0] if flags else 0)

    def flush(self) -> None:
        """Waits until every async and one-way send so far is done."""
        self.loop.run(self.accumulator.flush())

    async def _send_batch_async(self, topic: str, ids: list[str], encoded: bytes,
                                deadline: float, timeout_s: float, flags: Sequence[int]
                                ) -> list[SendResult]:
        return await self._send_encoded(topic, ids, encoded, None,
                                        _Attempts(self, timeout_s, deadline),
                                        self.retry_times, sticky=True, flags=flags)

    def _sticky_queue(self, topic: str, route: TopicRoute, size: int) -> MessageQueue:
        """The queue of an async batch's first attempt (Kafka's uniform sticky
        partitioner): a topic's batches go to one queue until batch_max_bytes went there or
        STICKY_QUEUE_MS passed (a slow producer still feeds every queue, so every consumer
        of the topic, within seconds), then to the next the selector gives.
        Spread over 1,000 topics of 8 queues, batches of a few messages each, the broker's
        dispatch then writes ~1,000 queue files in turn rather than 8,000 (each write into
        a file not written a moment ago costs it a close and an open in its fd cache, and
        a page the kernel dirties anew)."""
        kept = self._sticky.get(topic)
        now = self.clock_ms()
        if kept is not None:
            kept_route, mq, since, sent = kept
            if (kept_route is route and sent < self.accumulator.max_bytes
                    and now - since < STICKY_QUEUE_MS
                    and self.fault.is_available(mq.broker_name)):
                self._sticky[topic] = (route, mq, since, sent + size)
                return mq
        elif len(self._sticky) >= len(self.instance.routes) + STICKY_SLACK:
            self._sticky.clear()  # topics no longer in use (their routes left the cache)
        mq = self.selector.select(route.publish_queues)
        self._sticky[topic] = (route, mq, now, size)
        return mq

    async def _send_batches_async(self, batches: list[Batch]) -> list[Outcome]:
        """Batches of any topics: those bound for one broker in one SEND_BATCHES request
        (up to MAX_SEND_BATCHES_BYTES each); a batch whose broker failed or refused it is
        retried on its own, as a batch of one topic would be."""
        outcomes: list[Outcome | None] = [None] * len(batches)
        groups: dict[str, list[list[_Planned]]] = {}
        sizes: dict[str, int] = {}  # bytes in the last chunk of each address
        for i, batch in enumerate(batches):
            attempts = _Attempts(self, batch.timeout_s, batch.deadline)
            try:
                route = self._cached_route(batch.topic)  # in use, so refreshed
                if route is None:
                    route = await self.publish_route_async(batch.topic,
                                                           attempts.remaining())
                target, addr, _ = attempts.next_target(
                    route, self._sticky_queue(batch.topic, route, batch.size))
            except MQClientError as e:
                outcomes[i] = e
                continue
            chunks = groups.setdefault(addr, [[]])
            if chunks[-1] and sizes.get(addr, 0) + batch.size > MAX_SEND_BATCHES_BYTES:
                chunks.append([])
                sizes[addr] = 0
            sizes[addr] = sizes.get(addr, 0) + batch.size
            chunks[-1].append(_Planned(i, batch, target, attempts))
        await asyncio.gather(*(self._send_planned(addr, chunk, outcomes)
                               for addr, chunks in groups.items() for chunk in chunks))
        return [o if o is not None else MQClientError("SYSTEM_ERROR", "batch not sent")
                for o in outcomes]

    async def _send_planned(self, addr: str, planned: list[_Planned],
                            outcomes: list[Outcome | None]) -> None:
        retry: list[_Planned] = planned
        if len(planned) > 1:
            retry = []
            started = time.monotonic()
            channels = self.instance.channels
            # The frame waits as long as its batch with the most time left may (each batch
            # fails at its own deadline: the retry after a timeout finds none left).
            remaining = max(p.attempts.time_left() for p in planned)
            try:
                if remaining <= 0:
                    raise TimeoutError
                channel = await channels.send_channel(addr, remaining)
                if channel is not None:
                    writer = SendBatchesWriter(self.group, self.default_topic_queue_nums)
                    born_ms = int(time.time() * 1000)
                    for p in planned:
                        writer.add(p.batch.topic, p.target.queue_id, p.batch.elements,
                                   p.batch.size, born_ms, p.batch.flags)
                    answer = messaging_pb2.SendBatchesResponse.FromString(await channel.request(
                        KIND_SEND_BATCHES, writer.parts(), remaining))
                    responses = list(answer.responses)
                else:  # a broker without a send channel: one gRPC call per batch
                    responses = []
            except (SendChannelClosed, TimeoutError, MQClientError) as e:
                for p in planned:
                    if isinstance(e, MQClientError):
                        outcomes[p.index] = e
                    else:
                        p.attempts.unreachable(p.target, addr, started, e, max(remaining, 0.0))
                        retry.append(p)
                responses = None
            if responses is not None and len(responses) != len(planned):
                retry = planned  # no answer per batch (an old broker): one by one
            elif responses is not None:
                stored_by: set[str] = set()  # brokers: the frame's latency counted once
                for p, r in zip(planned, responses, strict=True):
                    try:
                        if r.status.code in SEND_STATUS_BY_CODE:
                            stored_by.add(p.target.broker_name)
                            outcomes[p.index] = _results(r, p.target, p.batch.ids)
                        elif not p.attempts.answered(p.target, started, r.status):
                            retry.append(p)
                    except MQClientError as e:
                        outcomes[p.index] = e
                latency_ms = (time.monotonic() - started) * 1000
                for broker_name in stored_by:
                    self.fault.update(broker_name, latency_ms, False)
        retries = self.retry_times if retry is planned else self.retry_times - 1

        async def one(p: _Planned) -> None:
            try:
                outcomes[p.index] = await self._send_encoded(
                    p.batch.topic, p.batch.ids, b"".join(p.batch.elements), None, p.attempts,
                    max(retries, 0), flags=p.batch.flags or ())
            except MQClientError as e:
                outcomes[p.index] = e

        if retry:
            await asyncio.gather(*(one(p) for p in retry))

    # -- requests (client loop) ----------------------------------------------------------------
    async def _send_encoded(self, topic: str, ids: list[str], encoded: bytes,
                            mq: MessageQueue | None, attempts: _Attempts, retries: int,
                            *, sticky: bool = False, flags: Sequence[int] = ()
                            ) -> list[SendResult]:
        """Sends MessageBatch elements to `mq` or a queue chosen per attempt (`sticky`: the
        first attempt to the topic's sticky queue); `ids` are their UNIQ_KEYs, `flags` their
        sysflag bits (empty: none)."""
        route = await self.publish_route_async(topic, attempts.remaining())
        request = self._request(topic, encoded, flags)
        channels = self.instance.channels
        first = self._sticky_queue(topic, route, len(encoded)) if sticky else mq
        refused = ""  # the broker whose gRPC channel refused the last attempt
        for _ in range(1 + retries):
            target, addr, remaining = attempts.next_target(route, first)
            first = mq  # a retry: `mq`, or another broker than the last
            request.queue_id = target.queue_id
            started = time.monotonic()
            try:
                channel = await channels.send_channel(addr, remaining)
                if channel is None:  # a broker without one: gRPC
                    # A retry to the broker that refused waits (within the time left) for
                    # its channel to connect: one backing off after the broker restarted
                    # refuses every call at once, and the retries went in one millisecond.
                    # It stops waiting when the route names another master (a failover).
                    if addr == refused and not await channels.wait_ready_async(
                            addr, self._master_moved(topic, target.broker_name, addr),
                            remaining):
                        attempts.failed(target, started, "not connected")
                        route, refused = self._current_route(topic, route), ""
                        continue
                    remaining = attempts.remaining()
                    r = await channels.messaging(addr).SendBatch(
                        request, timeout=remaining, wait_for_ready=addr == refused)
                else:
                    r = messaging_pb2.SendBatchResponse.FromString(await channel.request(
                        KIND_SEND_BATCH, request.SerializeToString(), remaining))
            except (SendChannelClosed, grpc.RpcError, TimeoutError) as e:
                refused = addr if _refused(e) else ""
                attempts.unreachable(target, addr, started, e, remaining)
                route = self._current_route(topic, route)
                continue
            if attempts.answered(target, started, r.status):
                return _results(r, target, ids)
        raise attempts.give_up()


@dataclasses.dataclass(slots=True)
class _Planned:
    """A batch of an async multi-topic send, its first target and its attempts."""

    index: int
    batch: Batch
    target: MessageQueue
    attempts: _Attempts


def check_timeout(timeout_s: object) -> float:
    """`timeout_s` when an int or float of seconds in (0, MAX_SEND_TIMEOUT_S]; else
    ILLEGAL_ARGUMENT (1e10 s overflowed a socket's timeout)."""
    if (isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float)
            or not 0 < timeout_s <= MAX_SEND_TIMEOUT_S):
        raise MQClientError("ILLEGAL_ARGUMENT", f"a send timeout is an int or float of "
                            f"seconds in (0, {MAX_SEND_TIMEOUT_S}], not {timeout_s!r}")
    return float(timeout_s)


def _no_route_within(topic: str, timeout_s: float) -> MQClientError:
    return MQClientError("TIMEOUT", f"no route of topic {topic} from the name servers "
                         f"within {timeout_s:.3g} s")


def _refused(error: BaseException) -> bool:
    """A gRPC call the channel refused without reaching the broker (not connected)."""
    return (isinstance(error, grpc.RpcError)
            and error.code() == grpc.StatusCode.UNAVAILABLE)  # type: ignore[attr-defined]


def _master_addr(route: TopicRoute, mq: MessageQueue) -> str:
    group = route.brokers.get(mq.broker_name)
    addr = group.master_addr if group is not None else None
    if addr is None:
        raise MQClientError("NO_ROUTE", f"broker group {mq.broker_name} has no live master")
    return addr


def _results(r: messaging_pb2.SendBatchResponse, mq: MessageQueue, ids: list[str]
             ) -> list[SendResult]:
    """One result per message of a stored batch."""
    offsets = r.commit_log_offsets
    if len(offsets) != len(ids):
        raise MQClientError("SYSTEM_ERROR", f"the broker answered {len(offsets)} offsets for "
                            f"{len(ids)} messages")
    status = SEND_STATUS_BY_CODE[r.status.code]
    if r.queue_id != mq.queue_id:  # the broker chose the queue
        mq = MessageQueue(mq.topic, mq.broker_name, r.queue_id)
    host, first = r.offset_msg_id_host, r.first_queue_offset
    return [SendResult(status, message_id, f"{host}{offset:016X}", mq, first + i)
            for i, (message_id, offset) in enumerate(zip(ids, offsets, strict=True))]


def _run_callback(callback: SendCallback, future: SendFuture) -> None:
    try:
        error = future.exception()
        callback(None if error is not None else future.result(), error)
    except Exception:
        log.exception("send callback failed")
