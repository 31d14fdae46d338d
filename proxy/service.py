"""apache.rocketmq.v2.MessagingService: the RPC handlers.

Every reply carries a v2 Status; a refused request never becomes a gRPC error (as
RocketMQ's proxy answers). Sends go through the broker's own send path (SendProcessor), so
a v2 send is stored, replicated and counted as an mqclient send is.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from broker.constants import CHANNEL_EXPIRED_TIMEOUT_MS
from broker.convert import peer_host
from broker.status import RequestError
from broker.topic_config import send_topic_problem
from broker.transaction.messages import LocalTransactionState
from mqproto import messaging_pb2
from mqproto.v2 import definition_pb2 as D
from mqproto.v2 import service_pb2 as S
from mqproto.v2 import service_pb2_grpc
from proxy.consume import PopService, polling_wait_s
from proxy.convert import (
    ACCEPTED_MESSAGE_TYPES,
    PROPERTY_TIMER_DELIVER_MS,
    V2Error,
    decode_transaction_id,
    duration_ms,
    encode_transaction_id,
    endpoints_of,
    message_from_v2,
    ok,
    proto_message_to_v2,
    to_duration,
    to_timestamp,
    v2_status,
)
from proxy.peers import PeerBrokers
from proxy.pop import PopLogUnwritable
from proxy.route import RouteService, permission
from proxy.timer import TimerService

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from broker.send import SendProcessor

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext
R = TypeVar("R")

CLIENT_ID_HEADER = "x-mq-client-id"
# What the proxy answers in the settings (RocketMQ's ProxyConfig defaults).
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1000
PRODUCER_BACKOFF_MULTIPLIER = 2.0
CONSUMER_RECEIVE_BATCH_SIZE = 32
CONSUMER_LONG_POLLING_MS = 20_000
SETTINGS_PRUNE_INTERVAL_S = 60.0
_RESOLUTIONS = {D.COMMIT: LocalTransactionState.COMMIT,
                D.ROLLBACK: LocalTransactionState.ROLLBACK}


def error_status(name: str, e: Exception) -> D.Status:
    """The reply status of handler `name` that raised `e`: a V2Error's (or the broker's
    RequestError's) own, anything unexpected INTERNAL_ERROR, logged."""
    if isinstance(e, V2Error):
        return e.status()
    if isinstance(e, RequestError):
        return v2_status(e.status())
    if isinstance(e, PopLogUnwritable):  # logged where it failed (once while the disk is full)
        return D.Status(code=D.INTERNAL_SERVER_ERROR, message=str(e))
    log.exception("v2 %s failed", name)
    return D.Status(code=D.INTERNAL_ERROR, message=f"{name} failed: {e!r}")


def v2_rpc(response: type[R]) -> Callable[[Callable[..., Awaitable[R]]],
                                          Callable[..., Awaitable[R]]]:
    """A handler that raises answers with a reply carrying its error_status."""

    def decorate(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
        @functools.wraps(fn)
        async def wrapper(self: Any, request: Any, context: Context) -> R:
            try:
                return await fn(self, request, context)
            except Exception as e:
                return response(status=error_status(fn.__name__, e))  # type: ignore[call-arg]

        return wrapper

    return decorate


def overall_status(statuses: list[D.Status], mixed: str) -> D.Status:
    """A multi-entry reply's status: the entries' one when they agree, else
    MULTIPLE_RESULTS saying `mixed`."""
    if len({s.code for s in statuses}) == 1:
        return statuses[0]
    return D.Status(code=D.MULTIPLE_RESULTS, message=mixed)


_PULL_NOT_SERVED = "offset-based (pull) consumption is not served"


def _not_served(response: type[R], message: str) -> Callable[..., Awaitable[R]]:
    """A handler of an RPC this broker does not serve: NOT_IMPLEMENTED, saying `message`."""

    async def handler(self: Any, request: Any, context: Context) -> R:
        return response(status=D.Status(code=D.NOT_IMPLEMENTED,  # type: ignore[call-arg]
                                         message=message))

    return handler


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def client_id_of(context: Context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_HEADER:
            return str(value)
    return ""


def _check_topic_name(name: str) -> None:
    if not name:
        raise V2Error(D.ILLEGAL_TOPIC, "the topic is empty")
    problem = send_topic_problem(name)
    if problem is not None:
        raise V2Error(D.ILLEGAL_TOPIC, problem)


def _forwarded_metadata(context: Context) -> tuple[tuple[str, str], ...]:
    """What a call forwarded to another broker carries of the client's: its id."""
    client_id = client_id_of(context)
    return ((CLIENT_ID_HEADER, client_id),) if client_id else ()


_ENDING: set[asyncio.Task[None]] = set()


class _CheckSubscriptions:
    """A v2 producer's subscriptions to the broker's transaction checks: one per topic it
    publishes to (a v2 half's producer group is its topic), forwarded into `outbox`."""

    def __init__(self, broker: BrokerContext, client_id: str) -> None:
        self.broker = broker
        self.client_id = client_id
        self.outbox: asyncio.Queue[messaging_pb2.CheckTransactionStateRequest] = (
            asyncio.Queue())
        self._subs: dict[str, tuple[asyncio.Queue[Any], asyncio.Task[None]]] = {}

    def update(self, groups: set[str]) -> None:
        for group in groups - set(self._subs):
            queue = self.broker.check_streams.subscribe(group, self.client_id)
            task = asyncio.create_task(self._forward(queue), name=f"v2checks-{group}")
            self._subs[group] = (queue, task)
            self.broker.clients.heartbeat(self.client_id, group, "", {})

    async def _forward(self, queue: asyncio.Queue[Any]) -> None:
        while True:
            self.outbox.put_nowait(await queue.get())

    def close(self) -> None:
        for group, (queue, task) in self._subs.items():
            task.cancel()
            _ENDING.add(task)  # kept until its cancellation ran
            task.add_done_callback(_ENDING.discard)
            if self.broker.check_streams.unsubscribe(group, self.client_id, queue):
                self.broker.clients.unregister(self.client_id, group, "")
        self._subs.clear()


class MessagingServiceV2(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, broker: BrokerContext, sender: SendProcessor, route: RouteService,
                 pop: PopService, timer: TimerService) -> None:
        self.broker = broker
        self.sender = sender
        self.route = route
        self.pop = pop
        self.timer = timer
        self.peers = PeerBrokers(broker.config.broker_name, route)
        self.settings: dict[str, D.Settings] = {}  # client id -> its last settings
        self._seen: dict[str, float] = {}  # client id -> when it last spoke (monotonic)
        self._next_prune = 0.0
        self.closed = asyncio.Event()

    # -- route -----------------------------------------------------------------------------
    def _queues(self, topic: D.Resource, broker_queues: Any, *, assignment: bool
                ) -> list[D.MessageQueue]:
        out = []
        for bq in broker_queues:
            broker = D.Broker(name=bq.broker_name, id=0, endpoints=endpoints_of(bq.v2_addr))
            if assignment:
                if bq.read_queue_nums > 0:
                    out.append(D.MessageQueue(
                        topic=topic, id=-1, permission=permission(bq.perm, True, True),
                        broker=broker, accept_message_types=ACCEPTED_MESSAGE_TYPES))
                continue
            for i in range(max(bq.read_queue_nums, bq.write_queue_nums)):
                out.append(D.MessageQueue(
                    topic=topic, id=i,
                    permission=permission(bq.perm, i < bq.read_queue_nums,
                                          i < bq.write_queue_nums),
                    broker=broker, accept_message_types=ACCEPTED_MESSAGE_TYPES))
        return out

    @v2_rpc(S.QueryRouteResponse)
    async def QueryRoute(self, request: S.QueryRouteRequest, context: Context) -> Any:
        _check_topic_name(request.topic.name)
        route = await self.route.topic_route(request.topic.name)
        return S.QueryRouteResponse(status=ok(), message_queues=self._queues(
            request.topic, route, assignment=False))

    @v2_rpc(S.QueryAssignmentResponse)
    async def QueryAssignment(self, request: S.QueryAssignmentRequest, context: Context) -> Any:
        _check_topic_name(request.topic.name)
        route = await self.route.topic_route(request.topic.name)
        return S.QueryAssignmentResponse(status=ok(), assignments=[
            D.Assignment(message_queue=q)
            for q in self._queues(request.topic, route, assignment=True)])

    # -- clients ---------------------------------------------------------------------------
    def _register(self, client_id: str, group: str) -> None:
        settings = self.settings.get(client_id)
        subscriptions: dict[str, str] = {}
        if settings is not None and settings.HasField("subscription"):
            subscriptions = {e.topic.name: e.expression.expression or "*"
                             for e in settings.subscription.subscriptions}
        self.broker.clients.heartbeat(client_id, "", group, subscriptions)

    def _seen_now(self, client_id: str) -> None:
        """Notes a client alive; forgets the settings of clients silent for 120 s (gone
        without NotifyClientTermination)."""
        now = time.monotonic()
        self._seen[client_id] = now
        if now < self._next_prune:
            return
        self._next_prune = now + SETTINGS_PRUNE_INTERVAL_S
        expired = now - CHANNEL_EXPIRED_TIMEOUT_MS / 1000
        for cid in [c for c, t in self._seen.items() if t < expired]:
            self._seen.pop(cid, None)
            self.settings.pop(cid, None)

    @v2_rpc(S.HeartbeatResponse)
    async def Heartbeat(self, request: S.HeartbeatRequest, context: Context) -> Any:
        client_id = client_id_of(context)
        if not client_id:
            raise V2Error(D.CLIENT_ID_REQUIRED, f"the {CLIENT_ID_HEADER} header is missing")
        self._seen_now(client_id)
        if request.HasField("group") and request.group.name and request.client_type in (
                D.PUSH_CONSUMER, D.SIMPLE_CONSUMER):
            self._register(client_id, request.group.name)
        return S.HeartbeatResponse(status=ok())

    @v2_rpc(S.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request: S.NotifyClientTerminationRequest,
                                      context: Context) -> Any:
        client_id = client_id_of(context)
        self.settings.pop(client_id, None)
        self._seen.pop(client_id, None)
        if request.HasField("group") and request.group.name:
            self.broker.clients.unregister(client_id, "", request.group.name)
        return S.NotifyClientTerminationResponse(status=ok())

    def answer_settings(self, settings: D.Settings) -> D.Settings:
        """The client's settings with what the broker decides (RocketMQ's
        GrpcClientSettingsManager)."""
        out = D.Settings()
        out.CopyFrom(settings)
        out.metric.CopyFrom(D.Metric(on=False))
        if settings.HasField("publishing"):
            out.publishing.max_body_size = self.broker.store_config.max_message_size
            out.publishing.validate_message_type = True
            policy = out.backoff_policy
            policy.max_attempts = PRODUCER_MAX_ATTEMPTS
            policy.exponential_backoff.CopyFrom(D.ExponentialBackoff(
                initial=to_duration(PRODUCER_BACKOFF_INITIAL_MS),
                max=to_duration(PRODUCER_BACKOFF_MAX_MS),
                multiplier=PRODUCER_BACKOFF_MULTIPLIER))
        elif settings.HasField("subscription"):
            sub = out.subscription
            sub.fifo = False
            sub.receive_batch_size = CONSUMER_RECEIVE_BATCH_SIZE
            if not sub.HasField("long_polling_timeout"):
                sub.long_polling_timeout.CopyFrom(to_duration(CONSUMER_LONG_POLLING_MS))
            # RocketMQ's default group retry policy: the delay levels, one per attempt.
            policy = out.backoff_policy
            policy.max_attempts = self.pop.max_attempts
            policy.customized_backoff.CopyFrom(D.CustomizedBackoff(next=[
                to_duration(ms) for ms in self.broker.store_config.delay_levels_ms]))
        return out

    async def Telemetry(self, request_iterator: AsyncIterator[D.TelemetryCommand],
                        context: Context) -> AsyncIterator[D.TelemetryCommand]:
        """Settings exchange: every settings command is answered with the settings the
        client must use (max body size, retry policy, ...). A producer's stream also
        carries the broker's transaction checks of its topics' half messages
        (RecoverOrphanedTransactionCommand). The stream stays open until the client or the
        broker ends it."""
        client_id = client_id_of(context)
        reader = request_iterator.__aiter__()
        closed = asyncio.ensure_future(self.closed.wait())
        next_command: asyncio.Future[D.TelemetryCommand] | None = None
        next_check: asyncio.Future[Any] | None = None
        checks = _CheckSubscriptions(self.broker, client_id)
        try:
            next_command = asyncio.ensure_future(reader.__anext__())
            while True:
                next_check = asyncio.ensure_future(checks.outbox.get())
                await asyncio.wait({next_command, closed, next_check},
                                   return_when=asyncio.FIRST_COMPLETED)
                if not next_check.done():
                    next_check.cancel()
                else:
                    check = next_check.result()
                    yield S.TelemetryCommand(
                        recover_orphaned_transaction_command=S.RecoverOrphanedTransactionCommand(
                            message=proto_message_to_v2(check.message),
                            transaction_id=encode_transaction_id(
                                check.commit_log_offset, check.tran_state_table_offset)))
                    continue
                if closed.done():
                    return
                try:
                    command = next_command.result()
                except StopAsyncIteration:
                    return
                next_command = asyncio.ensure_future(reader.__anext__())
                if command.HasField("settings"):
                    if not client_id:
                        yield S.TelemetryCommand(status=D.Status(
                            code=D.CLIENT_ID_REQUIRED,
                            message=f"the {CLIENT_ID_HEADER} header is missing"))
                        continue
                    settings = command.settings
                    self.settings[client_id] = settings
                    self._seen_now(client_id)
                    if settings.HasField("subscription") and settings.subscription.group.name:
                        self._register(client_id, settings.subscription.group.name)
                    if settings.HasField("publishing"):
                        checks.update({t.name for t in settings.publishing.topics})
                    yield S.TelemetryCommand(status=ok(),
                                             settings=self.answer_settings(settings))
                # thread stack traces and verify results answer nothing
        finally:
            closed.cancel()
            if next_check is not None:  # the client left while it waited ("destroyed")
                next_check.cancel()
                next_check.add_done_callback(_retrieve)
            checks.close()
            if next_command is not None:
                # The client went away: its pending read ends with an error nobody awaits.
                next_command.cancel()
                next_command.add_done_callback(_retrieve)

    # -- send ------------------------------------------------------------------------------
    @v2_rpc(S.SendMessageResponse)
    async def SendMessage(self, request: S.SendMessageRequest, context: Context) -> Any:
        if not request.messages:
            raise V2Error(D.BAD_REQUEST, "a send needs at least one message")
        born_host = peer_host(context.peer())
        limit = self.broker.store_config.max_message_size
        entries = []
        for pb in request.messages:
            try:
                _check_topic_name(pb.topic.name)
                if len(pb.body) > limit:
                    raise V2Error(D.MESSAGE_BODY_TOO_LARGE,
                                  f"the message body is {len(pb.body)} bytes, over the "
                                  f"broker's maxMessageSize {limit}")
                message = message_from_v2(pb, now_ms=self.broker.clock_ms())
                deliver = message.user_properties.get(PROPERTY_TIMER_DELIVER_MS)
                if deliver is not None:
                    message_id, offset = await self.timer.send(message, int(deliver), born_host)
                    entries.append(S.SendResultEntry(status=ok(), message_id=message_id,
                                                     offset=offset))
                    continue
                queue_id = self._queue_for(message)
                answer = await self.sender.send_message(messaging_pb2.SendMessageRequest(
                    producer_group=message.system_properties.producer_group,
                    message=message, queue_id=queue_id), born_host)
                status = v2_status(answer.status)
                entry = S.SendResultEntry(status=status, message_id=answer.result.message_id,
                                          offset=answer.result.queue_offset)
                if message.system_properties.transaction_type:  # a half message
                    entry.transaction_id = encode_transaction_id(
                        answer.result.commit_log_offset, answer.result.queue_offset)
                entries.append(entry)
            except (V2Error, RequestError) as e:
                entries.append(S.SendResultEntry(status=error_status("SendMessage", e),
                                                 message_id=pb.system_properties.message_id))
        return S.SendMessageResponse(entries=entries, status=overall_status(
            [e.status for e in entries], "the messages had different results: see each entry"))

    def _queue_for(self, message: messaging_pb2.Message) -> int:
        """FIFO messages of one group go to one queue (by a stable hash of the group); the
        broker picks the others' queue."""
        group = message.system_properties.message_group
        if not group:
            return -1
        config = self.broker.topics.get(message.topic)
        if config is None or config.write_queue_nums <= 0:
            return -1
        return zlib.crc32(group.encode()) % config.write_queue_nums

    # -- consume ---------------------------------------------------------------------------
    async def ReceiveMessage(self, request: S.ReceiveMessageRequest, context: Context
                             ) -> AsyncIterator[S.ReceiveMessageResponse]:
        try:
            expression, sql = "*", False
            if request.HasField("filter_expression"):
                f = request.filter_expression
                sql = f.type == D.SQL
                expression = f.expression or ("TRUE" if sql else "*")
            topic = request.message_queue.topic.name
            _check_topic_name(topic)
            invisible_ms = (duration_ms(request.invisible_duration)
                            if request.HasField("invisible_duration") else 0)
            polling_ms = (duration_ms(request.long_polling_timeout)
                          if request.HasField("long_polling_timeout")
                          else CONSUMER_LONG_POLLING_MS)
            wait_s = polling_wait_s(polling_ms, context.time_remaining())
            elsewhere = None
            if request.message_queue.id >= 0:  # a SimpleConsumer's: see proxy/peers.py
                elsewhere = functools.partial(self.peers.receive, request,
                                              metadata=_forwarded_metadata(context))
            messages = await self.pop.receive(request.group.name, topic,
                                              request.message_queue.id, expression,
                                              request.batch_size, invisible_ms, wait_s,
                                              sql=sql, elsewhere=elsewhere)
        except Exception as e:
            yield S.ReceiveMessageResponse(status=error_status("ReceiveMessage", e))
            return
        if not messages:
            yield S.ReceiveMessageResponse(status=D.Status(
                code=D.MESSAGE_NOT_FOUND, message="no new message"))
            return
        yield S.ReceiveMessageResponse(status=ok())
        yield S.ReceiveMessageResponse(delivery_timestamp=to_timestamp(self.broker.clock_ms()))
        for message in messages:
            yield S.ReceiveMessageResponse(message=message)

    @v2_rpc(S.AckMessageResponse)
    async def AckMessage(self, request: S.AckMessageRequest, context: Context) -> Any:
        group, topic = request.group.name, request.topic.name
        # Messages received here from other brokers: acked there (proxy/peers.py).
        results = await self.peers.ack(request, _forwarded_metadata(context))
        with self.pop.state.batch():  # one log write for the request's acks
            for entry in request.entries:
                if self.peers.served(entry.receipt_handle):
                    continue
                try:
                    self.pop.ack(group, topic, entry.receipt_handle)
                    status = ok()
                except V2Error as e:
                    status = e.status()
                results.append(S.AckMessageResultEntry(
                    message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                    status=status))
        if not results:
            overall = D.Status(code=D.BAD_REQUEST, message="an ack needs at least one entry")
        else:
            overall = overall_status([r.status for r in results],
                                     "the entries had different results: see each")
        return S.AckMessageResponse(status=overall, entries=results)

    @v2_rpc(S.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request: S.ChangeInvisibleDurationRequest,
                                      context: Context) -> Any:
        if self.peers.served(request.receipt_handle):
            return await self.peers.forward("ChangeInvisibleDuration", request,
                                            _forwarded_metadata(context))
        handle = self.pop.change_invisible(request.group.name, request.topic.name,
                                           request.receipt_handle,
                                           duration_ms(request.invisible_duration))
        return S.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle)

    @v2_rpc(S.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(
            self, request: S.ForwardMessageToDeadLetterQueueRequest, context: Context) -> Any:
        if self.peers.served(request.receipt_handle):
            return await self.peers.forward("ForwardMessageToDeadLetterQueue", request,
                                            _forwarded_metadata(context))
        await self.pop.forward_to_dlq(request.group.name, request.topic.name,
                                      request.receipt_handle)
        return S.ForwardMessageToDeadLetterQueueResponse(status=ok())

    # -- transactions ----------------------------------------------------------------------
    @v2_rpc(S.EndTransactionResponse)
    async def EndTransaction(self, request: S.EndTransactionRequest, context: Context) -> Any:
        """A producer's (or a check's) outcome of a half message: the broker's transaction
        service commits or rolls it back (its producer group is the topic)."""
        _check_topic_name(request.topic.name)
        commit_log_offset, queue_offset = decode_transaction_id(request.transaction_id)
        state = _RESOLUTIONS.get(request.resolution)
        if state is None:
            raise V2Error(D.BAD_REQUEST, "resolution must be COMMIT or ROLLBACK")
        service = self.broker.transactions
        if service is None:
            raise V2Error(D.FORBIDDEN, "transactions are ended on the master, this broker "
                                       "is a slave")
        status = await service.end_transaction(
            request.topic.name, request.message_id, commit_log_offset, queue_offset, state,
            from_check=request.source == D.SOURCE_SERVER_CHECK)
        return S.EndTransactionResponse(status=v2_status(status))

    # -- not served ------------------------------------------------------------------------
    RecallMessage = _not_served(S.RecallMessageResponse,
                                "recalling delayed messages is not served")
    UpdateOffset = _not_served(S.UpdateOffsetResponse, _PULL_NOT_SERVED)
    GetOffset = _not_served(S.GetOffsetResponse, _PULL_NOT_SERVED)
    QueryOffset = _not_served(S.QueryOffsetResponse, _PULL_NOT_SERVED)
    SyncLiteSubscription = _not_served(S.SyncLiteSubscriptionResponse,
                                       "lite topics are not served by this broker")

    async def PullMessage(self, request: S.PullMessageRequest, context: Context
                          ) -> AsyncIterator[S.PullMessageResponse]:
        yield S.PullMessageResponse(status=D.Status(code=D.NOT_IMPLEMENTED,
                                                    message=_PULL_NOT_SERVED))
