"""The push consumer (RocketMQ's DefaultMQPushConsumer).

    consumer = PushConsumer("CG", "127.0.0.1:9876")
    consumer.subscribe("TopicA", "TagA || TagB")
    consumer.register_listener_concurrently(lambda msgs: ConsumeStatus.CONSUME_SUCCESS)
    consumer.start()   # pulls in the background until shutdown()
    consumer.shutdown()

Clustering consumers of a group share the queues (allocate.py), rebalancing every
`rebalance_interval_s` and at once when a broker reports a membership change; broadcasting
consumers each read every queue and keep offsets in a local file.

A clustering consumer also consumes its group's retry topic `%RETRY%{group}`: messages its
listener failed are sent back to their broker, come again there after a growing delay
(10 s, 30 s, 1 m, ... by the broker's delay levels) and, after `max_reconsume_times`
(default 16), go to `%DLQ%{group}`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from mqclient.allocate import AllocateAveragely, AllocateStrategy
from mqclient.constants import (
    CONSUME_MESSAGE_BATCH_MAX_SIZE,
    CONSUME_THREAD_NUMS,
    LOCK_LOST_RETRY_S,
    MAX_RECONSUME_TIMES,
    OFFSETS_FILE_NAME,
    PERSIST_CONSUMER_OFFSET_INTERVAL_S,
    POLL_NAME_SERVER_INTERVAL_S,
    PULL_BATCH_SIZE,
    PULL_THRESHOLD_FOR_QUEUE,
    PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
    REBALANCE_INTERVAL_S,
    REBALANCE_LOCK_INTERVAL_S,
    RETRY_GROUP_TOPIC_PREFIX,
    SEND_BACK_TIMEOUT_S,
    SUSPEND_CURRENT_QUEUE_TIME_S,
    WATCH_RECONNECT_DELAY_S,
)
from mqclient.consume_service import (
    ConcurrentConsumeService,
    ConsumeStatus,
    Listener,
    OrderlyConsumeService,
)
from mqclient.instance import ClientInstance
from mqclient.loop import ClientLoop, cancel_and_wait
from mqclient.message import MessageExt, MessageQueue, MQClientError, code_name
from mqclient.offset_store import LocalFileOffsetStore, OffsetStore, RemoteBrokerOffsetStore
from mqclient.process_queue import ProcessQueue
from mqclient.producer import Producer
from mqclient.puller import PullService
from mqclient.rebalance import ConsumeFromWhere, MessageModel, Rebalancer
from mqclient.route import TopicRoute
from mqclient.selector import EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG, MessageSelector
from mqclient.trace_dispatcher import TraceDispatcher, new_trace_dispatcher, traced_listener
from mqproto import common_pb2, messaging_pb2

log = logging.getLogger(__name__)
# A queue lock older than this is not trusted for orderly consumption (client side).
LOCK_TRUSTED_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0  # how long shutdown waits for the listener calls in progress
SHUTDOWN_STEP_S = 3.0  # each other step of a shutdown (tasks ending, commits) at most
FINAL_COMMIT_S_PER_QUEUE = 0.005  # added to the final commit's bound per queue owned
RETRY_ROUTE_ATTEMPTS = 30
# Heartbeat answers that mean "this consumer's subscriptions cannot be served here".
_SUBSCRIPTION_REFUSALS = frozenset({common_pb2.SUBSCRIPTION_PARSE_FAILED,
                                    common_pb2.REQUEST_CODE_NOT_SUPPORTED,
                                    common_pb2.NO_PERMISSION})  # access control

__all__ = ["ConsumeFromWhere", "ConsumeStatus", "MessageModel", "MessageSelector",
           "PushConsumer"]


class PushConsumer:
    def __init__(self, group: str, namesrv_addr: str | list[str], *,
                 message_model: MessageModel = MessageModel.CLUSTERING,
                 consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET,
                 consume_timestamp_ms: int | None = None,
                 allocate_strategy: AllocateStrategy | None = None,
                 rebalance_interval_s: float = REBALANCE_INTERVAL_S,
                 persist_offset_interval_s: float = PERSIST_CONSUMER_OFFSET_INTERVAL_S,
                 poll_name_server_interval_s: float = POLL_NAME_SERVER_INTERVAL_S,
                 pull_batch_size: int = PULL_BATCH_SIZE,
                 consume_message_batch_max_size: int = CONSUME_MESSAGE_BATCH_MAX_SIZE,
                 consume_thread_nums: int = CONSUME_THREAD_NUMS,
                 pull_threshold_for_queue: int = PULL_THRESHOLD_FOR_QUEUE,
                 pull_threshold_size_for_queue: int = PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB,
                 pull_threshold_for_topic: int = -1,
                 pull_threshold_size_for_topic: int = -1,
                 offsets_dir: str | Path | None = None,
                 max_reconsume_times: int = -1,
                 shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
                 loop: ClientLoop | None = None, access_key: str | None = None,
                 secret_key: str | None = None, tls_ca: str | None = None,
                 clock: Callable[[], float] = time.monotonic, enable_msg_trace: bool = False,
                 trace_topic: str | None = None) -> None:
        """`enable_msg_trace`: each listener call's trace (RocketMQ's SubBefore and
        SubAfter records) goes to `trace_topic` (default RMQ_SYS_TRACE_TOPIC) in the
        background (mqclient/trace.py). Flow control: pulling a queue pauses while it buffers
        `pull_threshold_for_queue` messages or `pull_threshold_size_for_queue` MiB of
        bodies; the `*_for_topic` thresholds (-1: none) are shared by the queues of the
        topic this consumer owns. `max_reconsume_times`: -1 = RocketMQ's default, 16 for
        concurrent listeners and no limit (the queue waits) for orderly ones; 0 = a
        failed message goes to the dead-letter queue at once. `shutdown_timeout_s`: how
        long shutdown() waits for the listener calls in progress before it commits and
        leaves. `clock`: monotonic seconds of the queue-lock and pull-address timing (tests
        pass a clock they move)."""
        if not group:
            raise MQClientError("ILLEGAL_ARGUMENT", "a consumer needs a group")
        if pull_batch_size <= 0 or consume_message_batch_max_size <= 0:
            raise MQClientError("ILLEGAL_ARGUMENT", "batch sizes must be > 0")
        self.group = group
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        # RocketMQ's default consumeTimestamp: half an hour ago.
        self.consume_timestamp_ms = (consume_timestamp_ms if consume_timestamp_ms is not None
                                     else int(time.time() * 1000) - 30 * 60 * 1000)
        self.allocate_strategy = allocate_strategy or AllocateAveragely()
        self.rebalance_interval_s = rebalance_interval_s
        self.persist_offset_interval_s = persist_offset_interval_s
        self.pull_batch_size = pull_batch_size
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue
        self.pull_threshold_for_topic = pull_threshold_for_topic
        self.pull_threshold_size_for_topic = pull_threshold_size_for_topic
        self.max_reconsume_times = max_reconsume_times
        self.shutdown_timeout_s = shutdown_timeout_s
        self.instance = ClientInstance(namesrv_addr, consumer_group=group, loop=loop,
                                       poll_name_server_interval_s=poll_name_server_interval_s,
                                       access_key=access_key, secret_key=secret_key,
                                       tls_ca=tls_ca, clock=clock)
        self.loop = self.instance.loop
        self.executor = ThreadPoolExecutor(consume_thread_nums,
                                           thread_name_prefix=f"consume-{group}")
        if message_model is MessageModel.BROADCASTING:
            base = Path(offsets_dir) if offsets_dir else (
                Path.home() / ".rocketmq_offsets" / f"{self.instance.client_id.split('@')[0]}")
            self.offset_store: OffsetStore = LocalFileOffsetStore(
                base / group / OFFSETS_FILE_NAME)
        else:
            self.offset_store = RemoteBrokerOffsetStore(self.instance, group)
        self._listener: Listener | None = None
        self._orderly = False
        self._rebalance_now: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._committing: asyncio.Task[None] | None = None
        self._resets: set[asyncio.Task[None]] = set()
        self.rebalancer: Rebalancer | None = None
        self.trace: TraceDispatcher | None = None
        if enable_msg_trace:
            self.trace = new_trace_dispatcher(
                group, namesrv_addr, trace_topic, Producer, loop=self.loop,
                poll_name_server_interval_s=poll_name_server_interval_s,
                client_ip=self.instance.client_ip, access_key=access_key,
                secret_key=secret_key, tls_ca=tls_ca)
        self.started = False

    # -- configuration -------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> PushConsumer:
        """Tag expression: "*" for all, else "TagA || TagB"; or a MessageSelector, e.g.
        MessageSelector.by_sql("a > 5 AND TAGS IN ('x', 'y')") (the broker needs
        enablePropertyFilter=true; start() fails with its reason when it refuses)."""
        if self.started:
            raise MQClientError("ILLEGAL_STATE", "subscribe before start()")
        if not topic:
            raise MQClientError("ILLEGAL_ARGUMENT", "subscribe needs a topic")
        if isinstance(expression, MessageSelector):
            if expression.expression_type not in (EXPRESSION_TYPE_TAG, EXPRESSION_TYPE_SQL92):
                raise MQClientError("ILLEGAL_ARGUMENT", "unknown expression type "
                                    f"{expression.expression_type!r}")
            if expression.is_sql:
                self.instance.subscriptions[topic] = expression.expression
                self.instance.expression_types[topic] = EXPRESSION_TYPE_SQL92
                return self
            expression = expression.expression
        self.instance.subscriptions[topic] = expression or "*"
        self.instance.expression_types.pop(topic, None)
        return self

    def register_listener_concurrently(self, listener: Listener) -> PushConsumer:
        """`listener(msgs) -> ConsumeStatus | None`, called in parallel; at most
        `consume_message_batch_max_size` messages per call."""
        self._listener, self._orderly = listener, False
        return self

    def register_listener_orderly(self, listener: Listener) -> PushConsumer:
        """`listener(msgs) -> ConsumeStatus | None`: one queue is consumed by one call at a
        time, in queue order; SUSPEND_CURRENT_QUEUE_A_MOMENT (or raising) pauses the queue
        and the same messages come again."""
        self._listener, self._orderly = listener, True
        return self

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> PushConsumer:
        if self.started:
            return self
        if self._listener is None:
            raise MQClientError("ILLEGAL_STATE", "register a listener before start()")
        if not self.instance.subscriptions:
            raise MQClientError("ILLEGAL_STATE", "subscribe to a topic before start()")
        if self.trace is not None:
            self.trace.start()
        try:
            self.loop.run(self._start())
        except BaseException:
            self.offset_store.close()
            if self.trace is not None:
                self.trace.shutdown()
            raise
        self.started = True
        return self

    def shutdown(self) -> None:
        """Stops pulling and consuming, finishes the listener calls in progress (up to
        `shutdown_timeout_s`), commits offsets, then leaves the group. Messages buffered
        and not started are not consumed: the next owner gets them from the commit."""
        if not self.started:
            return
        self.started = False
        # Every step of _shutdown has its own bound; this one is the last resort (len() of
        # the loop's dict from this thread: a size, read once).
        queues = len(self.rebalancer.process_queues) if self.rebalancer is not None else 0
        future = self.loop.submit(self._shutdown())
        try:
            future.result(self.shutdown_timeout_s + 8 * SHUTDOWN_STEP_S + 10
                          + FINAL_COMMIT_S_PER_QUEUE * queues)
        except concurrent.futures.TimeoutError:
            future.cancel()
            log.error("shutdown of consumer %s did not finish in time; abandoned",
                      self.client_id)
        # Work queued and not started is dropped (its offsets were not committed: it comes
        # again to the next owner); a listener call still running is not waited for.
        self.executor.shutdown(wait=False, cancel_futures=True)
        if self.trace is not None:  # the records of the calls made, then its producer
            self.trace.shutdown()

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def retry_topic(self) -> str:
        return RETRY_GROUP_TOPIC_PREFIX + self.group

    async def _start(self) -> None:
        assert self._listener is not None
        listener = self._listener
        if self.trace is not None:
            listener = traced_listener(listener, self.trace, self.group)
        clustering = self.message_model is MessageModel.CLUSTERING
        send_back = self._send_back if clustering else None
        if self._orderly:
            self.consume_service: ConcurrentConsumeService | OrderlyConsumeService = (
                OrderlyConsumeService(listener, self.executor,
                                      self.consume_message_batch_max_size, self._consumed,
                                      SUSPEND_CURRENT_QUEUE_TIME_S, self._may_consume,
                                      send_back=send_back,
                                      max_reconsume_times=self.max_reconsume_times))
        else:
            self.consume_service = ConcurrentConsumeService(
                listener, self.executor, self.consume_message_batch_max_size,
                self._consumed, send_back=send_back,
                max_reconsume_times=(MAX_RECONSUME_TIMES if self.max_reconsume_times < 0
                                     else self.max_reconsume_times))
        if clustering:  # the broker creates the retry topic when it sees it in a heartbeat
            self.instance.subscriptions.setdefault(self.retry_topic, "*")
        self.pull_service = PullService(
            self.instance, self.group, self.offset_store, batch_size=self.pull_batch_size,
            threshold=self.pull_threshold_for_queue,
            threshold_size_mib=self.pull_threshold_size_for_queue,
            topic_threshold=self.pull_threshold_for_topic,
            topic_threshold_size_mib=self.pull_threshold_size_for_topic,
            commit_on_pull=clustering,
            may_pull=self._may_consume, on_messages=self.consume_service.submit)
        self.rebalancer = Rebalancer(
            self.instance, self.group, self.message_model, self.allocate_strategy,
            self.offset_store, self.consume_from_where, self.consume_timestamp_ms,
            orderly=self._orderly, start_pull=self.pull_service.start,
            stop_pull=self.pull_service.stop)
        self._rebalance_now = asyncio.Event()
        self.instance.route_listeners.append(self._route_changed)
        await self.offset_store.load()
        await self.instance.start()
        for topic in self.instance.subscriptions:
            try:
                await self.instance.update_route(topic)
            except MQClientError as e:
                if topic != self.retry_topic:
                    log.warning("route of %s not found at start: %s", topic, e)
        await self.instance.heartbeat_all()
        await self._check_subscriptions()
        if clustering:
            self._sync_watches()
        self._tasks = [asyncio.create_task(self._rebalance_loop()),
                       asyncio.create_task(self._persist_loop())]
        if clustering and self.retry_topic not in self.instance.routes:
            self._tasks.append(asyncio.create_task(self._find_retry_route()))
        if self.rebalancer.locks_queues:
            self._tasks.append(asyncio.create_task(self._lock_loop()))

    async def _check_subscriptions(self) -> None:
        """RocketMQ's checkClientInBroker: a broker that refused this consumer's
        subscriptions at the first heartbeat (a SQL92 expression that does not parse, a
        broker without enablePropertyFilter, or access control: no SUB on the group or a
        topic) fails start() with its reason."""
        refused = {addr: s for addr, s in self.instance.heartbeat_refusals.items()
                   if s.code in _SUBSCRIPTION_REFUSALS}
        if not refused:
            return
        addr, reason = sorted(refused.items())[0]
        await self.instance.shutdown()
        raise MQClientError(code_name(reason.code), f"broker {addr}: {reason.remark}")

    async def _shutdown(self) -> None:
        """RocketMQ's order: stop rebalancing, pulling and starting listener calls; wait
        for the calls in progress (at most `shutdown_timeout_s`); commit; only then leave
        the group (end the membership watches, unregister), so that no other consumer takes
        these queues before their final offsets are committed. Every step is bounded."""
        assert self.rebalancer is not None
        name = f"consumer {self.client_id}"
        committing = [self._committing] if self._committing is not None else []
        await cancel_and_wait([*self._tasks, *self._resets, *committing], SHUTDOWN_STEP_S,
                              name)
        await self.pull_service.stop_all()
        started = time.monotonic()
        await self.consume_service.wait_idle(self.shutdown_timeout_s)
        if self.consume_service.tasks:
            log.error("%s: %d listener calls still running after %.1f s; their messages are "
                      "not committed and will be consumed again", name,
                      len(self.consume_service.tasks), time.monotonic() - started)
        # Queues being given up are committed and unlocked here if their release did not
        # get to it (a cancelled release forgets them).
        releasing = dict(self.rebalancer.releasing)
        await cancel_and_wait(list(self.rebalancer.release_tasks), SHUTDOWN_STEP_S, name)
        mqs = sorted({*self.rebalancer.process_queues, *releasing})
        for pq in [*self.rebalancer.process_queues.values(), *releasing.values()]:
            pq.dropped = True  # a call ending late commits nothing any more
            pq.draining = False
        # One call a queue: thousands of queues need more than one step's time (a consumer
        # of 1,600 queues left some uncommitted within 6 s on a loaded machine).
        await self._bounded(self.offset_store.persist(mqs), "final commit",
                            SHUTDOWN_STEP_S * 2 + FINAL_COMMIT_S_PER_QUEUE * len(mqs))
        if self.rebalancer.locks_queues and mqs:
            await self._bounded(self.rebalancer.unlock(mqs), "unlock")
        self.offset_store.close()
        await cancel_and_wait([*self._watches.values()], SHUTDOWN_STEP_S, name)
        self._watches.clear()
        await self.instance.shutdown()

    async def _bounded(self, coro: Coroutine[Any, Any, None], what: str,
                       bound_s: float = SHUTDOWN_STEP_S * 2) -> None:
        try:
            async with asyncio.timeout(bound_s):
                await coro
        except TimeoutError:
            log.error("consumer %s: %s did not finish within %.1f s; abandoned",
                      self.client_id, what, bound_s)

    # -- loop side -----------------------------------------------------------------------------
    def _consumed(self, pq: ProcessQueue, offset: int) -> None:
        self.offset_store.update(pq.mq, offset, True)

    async def _send_back(self, msg: MessageExt, delay_level: int) -> bool:
        """ConsumerSendMsgBack to the master of the message's broker group."""
        addr = self.instance.master_addr(msg.broker_name)
        if addr is None:
            log.warning("message %s failed; broker group %s has no live master to take it "
                        "back", msg.msg_id, msg.broker_name)
            return False
        request = messaging_pb2.ConsumerSendMsgBackRequest(
            consumer_group=self.group, commit_log_offset=msg.commit_log_offset,
            origin_message_id=msg.msg_id, origin_topic=msg.topic, delay_level=delay_level,
            max_reconsume_times=(MAX_RECONSUME_TIMES if self.max_reconsume_times < 0
                                 else self.max_reconsume_times))  # 0: to the DLQ at once
        try:
            r = await self.instance.channels.messaging(addr).ConsumerSendMsgBack(
                request, timeout=SEND_BACK_TIMEOUT_S)
        except grpc.RpcError as e:
            log.warning("sending message %s back to %s failed: %s", msg.msg_id, addr,
                        e.code())  # type: ignore[attr-defined]
            return False
        if r.status.code != common_pb2.SUCCESS:
            log.warning("%s did not take message %s back: %s", addr, msg.msg_id,
                        r.status.remark)
            return False
        return True

    async def _find_retry_route(self) -> None:
        """The retry topic appears once a broker saw this group's heartbeat and registered
        it: look for its route every second for a while (then the periodic poll does)."""
        for _ in range(RETRY_ROUTE_ATTEMPTS):
            await asyncio.sleep(1.0)
            try:
                if await self.instance.update_route(self.retry_topic) is not None:
                    return
            except MQClientError:
                pass

    def _may_consume(self, pq: ProcessQueue) -> bool:
        """Orderly: only under a fresh broker lock (concurrent listeners lock their queues
        for handovers only)."""
        if self.rebalancer is None or not self.rebalancer.locks_queues or not self._orderly:
            return True
        return pq.locked and self.instance.clock() - pq.last_lock_time < LOCK_TRUSTED_S

    def _route_changed(self, topic: str, route: TopicRoute) -> None:
        if topic in self.instance.subscriptions and self._rebalance_now is not None:
            self._rebalance_now.set()
            if self.message_model is MessageModel.CLUSTERING:
                self._sync_watches()

    def rebalance_immediately(self) -> None:
        if self._rebalance_now is not None:
            self._rebalance_now.set()

    async def _rebalance_loop(self) -> None:
        assert self.rebalancer is not None and self._rebalance_now is not None
        while True:
            try:
                await self.rebalancer.do_rebalance()
            except Exception:
                log.exception("rebalance of group %s failed", self.group)
            # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that arrives
            # in the loop iteration in which the event is set (a membership change as
            # shutdown starts), and this loop then never ended (issue 17, item 3).
            # Sooner while a wanted queue waits for its lock (its previous owner commits).
            delay = self.rebalance_interval_s
            if self.rebalancer.lock_retry_s is not None:
                delay = min(delay, self.rebalancer.lock_retry_s)
            timer = asyncio.get_running_loop().call_later(delay, self._rebalance_now.set)
            try:
                await self._rebalance_now.wait()
            finally:
                timer.cancel()
            self._rebalance_now.clear()

    async def _persist_loop(self) -> None:
        assert self.rebalancer is not None
        while True:
            await asyncio.sleep(self.persist_offset_interval_s)
            try:
                await self.offset_store.persist(sorted(self.rebalancer.process_queues))
            except Exception:
                log.exception("offsets of group %s not persisted", self.group)

    async def _lock_loop(self) -> None:
        while True:
            lost = self._orderly and self.rebalancer is not None and any(
                not pq.locked and not pq.dropped
                for pq in self.rebalancer.process_queues.values())
            await asyncio.sleep(LOCK_LOST_RETRY_S if lost else REBALANCE_LOCK_INTERVAL_S)
            await self._renew_locks()

    async def _renew_locks(self) -> None:
        assert self.rebalancer is not None
        try:
            for pq in await self.rebalancer.lock_all():
                if pq.messages and self._orderly:
                    self.consume_service.submit(pq, [])
        except Exception:
            log.exception("queue locks of group %s not renewed", self.group)

    # -- membership watches ----------------------------------------------------------------------
    def _sync_watches(self) -> None:
        """One watch stream per broker of the subscribed topics."""
        addrs = self.instance.broker_addrs()
        for addr in list(self._watches):
            if addr not in addrs:
                self._watches.pop(addr).cancel()
        for addr in addrs - set(self._watches):
            self._watches[addr] = asyncio.get_running_loop().create_task(self._watch(addr))

    async def _watch(self, addr: str) -> None:
        request = messaging_pb2.WatchConsumerGroupRequest(consumer_group=self.group,
                                                          client_id=self.instance.client_id)
        last: list[str] | None = None
        while True:
            try:
                async for event in self.instance.channels.messaging(addr).WatchConsumerGroup(
                        request):
                    if event.HasField("reset"):
                        self._reset(event.reset)
                    ids = list(event.consumer_id_list)
                    if last is not None and ids != last:
                        self._commit_now()
                        self.rebalance_immediately()
                    last = ids
            except grpc.RpcError as e:
                log.debug("membership watch at %s ended: %s", addr,
                          e.code())  # type: ignore[attr-defined]
            await asyncio.sleep(WATCH_RECONNECT_DELAY_S)
            # The broker dropped this client when the stream ended, and its queue locks
            # there: register again, and lock the queues again (orderly ones whose lock
            # another consumer took meanwhile pause).
            await self.instance.heartbeat(addr)
            if self.rebalancer is not None and self.rebalancer.locks_queues:
                await self._renew_locks()

    def _reset(self, notice: messaging_pb2.ResetOffsetNotice) -> None:
        """An admin reset the group's offsets on a topic while it was online (RocketMQ's
        resetOffset in the client): the queues concerned drop what they buffered and the
        results of calls in progress, and pull again from the new offsets."""
        if self.rebalancer is None or notice.topic not in self.instance.subscriptions:
            return
        offsets = {MessageQueue(notice.topic, notice.broker_name, q): o
                   for q, o in notice.offsets.items()}
        log.warning("group %s: offsets of %s on %s reset by an admin: %s", self.group,
                    notice.topic, notice.broker_name, dict(notice.offsets))
        task = asyncio.get_running_loop().create_task(self.rebalancer.reset_offsets(offsets))
        self._resets.add(task)
        task.add_done_callback(self._resets.discard)

    def _commit_now(self) -> None:
        """The group's membership changed: commit every owned queue's offset at once. A
        joining consumer reads the committed offsets of the queues it gets, often before
        this one's rebalance drops them (and commits): without this it would start from
        the last periodic commit, up to `persist_offset_interval_s` behind."""
        if self.rebalancer is None or self._committing is not None:
            return
        mqs = sorted(self.rebalancer.process_queues)

        async def commit() -> None:
            try:
                await self.offset_store.persist(mqs)
            except Exception:
                log.exception("offsets of group %s not committed", self.group)
            finally:
                self._committing = None

        self._committing = asyncio.get_running_loop().create_task(commit())

    # -- introspection -------------------------------------------------------------------------
    def assigned_queues(self, topic: str | None = None) -> set[MessageQueue]:
        """The queues (of `topic`, else of every topic, the retry topic too) this consumer
        owns now (any thread)."""
        rebalancer = self.rebalancer
        if rebalancer is None:
            return set()

        def snapshot() -> set[MessageQueue]:
            return {mq for mq in rebalancer.process_queues if topic in (None, mq.topic)}

        async def on_loop() -> set[MessageQueue]:
            return snapshot()

        return snapshot() if self.loop.in_loop_thread() else self.loop.run(on_loop())

    @property
    def client_id(self) -> str:
        return self.instance.client_id


def consume_all(msgs: list[MessageExt]) -> ConsumeStatus:
    """A listener that acknowledges everything (tools and benchmarks)."""
    return ConsumeStatus.CONSUME_SUCCESS
