"""Transactional messages (RocketMQ's TransactionMQProducer and TransactionListener).

    class Listener:
        def execute_local_transaction(self, msg, arg):  # after the half message is stored
            return LocalTransactionState.COMMIT           # or ROLLBACK, or UNKNOWN
        def check_local_transaction(self, msg):         # the broker asks about an UNKNOWN
            return LocalTransactionState.COMMIT

    producer = TransactionProducer("PG", "127.0.0.1:9876", Listener()).start()
    result = producer.send(Message("TopicA", b"order 1", tags="TagA"), arg=order)
    result.local_transaction_state, result.send_result.msg_id
    producer.shutdown()

`send` stores a half message (invisible to consumers), runs `execute_local_transaction` on
the caller's thread and tells the broker the outcome; UNKNOWN (or an exception) leaves the
half to the broker's check, which asks any live producer of the group over the check stream
each one keeps open to every master (`check_local_transaction` runs on a small thread
pool). A transactional message cannot be delayed or batched.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

import grpc

from mqclient.constants import ADMIN_CALL_TIMEOUT_S, WATCH_RECONNECT_DELAY_S
from mqclient.loop import cancel_and_wait
from mqclient.message import (
    SEND_STATUS_BY_CODE,
    Message,
    MessageExt,
    MessageQueue,
    MQClientError,
    SendResult,
    SendStatus,
)
from mqclient.producer import Producer, _Attempts
from mqclient.trace import MessageType, TraceBean, TraceContext, TraceType, now_ms
from mqproto import common_pb2, messaging_pb2, namesrv_pb2

log = logging.getLogger(__name__)

# The property that delays a half's first check (seconds; RocketMQ's MessageConst name).
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
CHECK_THREADS = 2
# How often the producer looks for masters to keep a check stream open to.
CHECK_STREAM_REFRESH_S = 5.0
END_TRANSACTION_TIMEOUT_S = 3.0


class LocalTransactionState(enum.Enum):
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


# LocalTransactionState's names in RocketMQ's Java client (trace records).
_TRACE_STATE = {
    LocalTransactionState.COMMIT: "COMMIT_MESSAGE",
    LocalTransactionState.ROLLBACK: "ROLLBACK_MESSAGE",
    LocalTransactionState.UNKNOWN: "UNKNOW",
}
_WIRE_STATE = {
    LocalTransactionState.COMMIT: messaging_pb2.TRANSACTION_COMMIT_TYPE,
    LocalTransactionState.ROLLBACK: messaging_pb2.TRANSACTION_ROLLBACK_TYPE,
    LocalTransactionState.UNKNOWN: messaging_pb2.TRANSACTION_NOT_TYPE,
}


class TransactionListener(Protocol):
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState: ...

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState: ...


@dataclasses.dataclass(frozen=True)
class TransactionSendResult:
    """The half message's send result and what the local transaction answered."""

    send_result: SendResult
    local_transaction_state: LocalTransactionState
    transaction_id: str

    @property
    def status(self) -> SendStatus:
        return self.send_result.status

    @property
    def msg_id(self) -> str:
        return self.send_result.msg_id


def message_from_check(pb: messaging_pb2.Message, broker_name: str = "") -> MessageExt:
    """The half message a check asks about, as the listener sees it (its real topic)."""
    sp = pb.system_properties
    properties = {**dict(sp.reserved_properties), **dict(pb.user_properties)}
    if pb.tag:
        properties["TAGS"] = pb.tag
    if pb.keys:
        properties["KEYS"] = " ".join(pb.keys)
    if sp.producer_group:
        properties["PGROUP"] = sp.producer_group
    properties["UNIQ_KEY"] = sp.message_id
    return MessageExt(
        topic=pb.topic, body=pb.body, tags=pb.tag, keys=list(pb.keys), properties=properties,
        msg_id=sp.message_id, offset_msg_id=sp.offset_msg_id, broker_name=broker_name,
        queue_id=sp.queue_id, queue_offset=sp.queue_offset,
        commit_log_offset=sp.commit_log_offset, born_timestamp=sp.born_timestamp,
        store_timestamp=sp.store_timestamp, born_host=sp.born_host, store_host=sp.store_host,
        reconsume_times=sp.reconsume_times, flag=pb.flag)


def _state(value: object) -> LocalTransactionState:
    if isinstance(value, LocalTransactionState):
        return value
    log.warning("a transaction listener returned %r, not a LocalTransactionState: UNKNOWN",
                value)
    return LocalTransactionState.UNKNOWN


class TransactionProducer:
    """A producer of transactional messages. Keyword arguments go to the Producer it sends
    with (send_timeout_s, retry_times_when_send_failed, ...)."""

    def __init__(self, group: str, namesrv_addr: str | list[str],
                 listener: TransactionListener | None = None, *,
                 check_threads: int = CHECK_THREADS,
                 check_stream_refresh_s: float = CHECK_STREAM_REFRESH_S,
                 **producer_kwargs: Any) -> None:
        """`check_stream_refresh_s`: how often the masters to listen to are looked up."""
        self.producer = Producer(group, namesrv_addr, **producer_kwargs)
        self.group = group
        self.listener = listener
        self.instance = self.producer.instance
        self.loop = self.producer.loop
        self._check_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=check_threads, thread_name_prefix=f"transaction-check-{group}")
        self.check_stream_refresh_s = check_stream_refresh_s
        self._streams: dict[str, asyncio.Task[None]] = {}
        self._keeper: asyncio.Task[None] | None = None
        self.started = False

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> TransactionProducer:
        if self.listener is None:
            raise MQClientError("ILLEGAL_ARGUMENT", "a TransactionProducer needs a listener")
        if not self.started:
            self.producer.start()
            self.loop.run(self._start_streams(), ADMIN_CALL_TIMEOUT_S * 3)
            self.started = True
        return self

    def shutdown(self) -> None:
        if not self.started:
            return
        self.started = False
        self.loop.run(self._stop_streams())
        # A listener call still running finishes on its own; its answer is then dropped.
        self._check_pool.shutdown(wait=False, cancel_futures=True)
        self.producer.shutdown()

    def __enter__(self) -> TransactionProducer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- sending -----------------------------------------------------------------------------
    def send(self, msg: Message, arg: Any = None, timeout_s: float | None = None
             ) -> TransactionSendResult:
        """Stores `msg` as a half message, runs the local transaction, ends it at the broker
        (RocketMQ's sendMessageInTransaction). MQClientError when the half is not stored."""
        if not self.started:
            raise MQClientError("SHUTDOWN", "the producer is not started")
        if isinstance(msg, Sequence) or not isinstance(msg, Message):
            raise MQClientError("ILLEGAL_ARGUMENT", "a transactional message cannot be "
                                "batched: send one Message at a time")
        if msg.delay_level:
            raise MQClientError("ILLEGAL_ARGUMENT", "a transactional message cannot be "
                                f"delayed (delay_level {msg.delay_level})")
        immunity = msg.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
        if immunity is not None and not immunity.isdigit():
            raise MQClientError("ILLEGAL_ARGUMENT", f"{PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS} "
                                f"{immunity!r} is not a number of seconds")
        user = {k: v for k, v in msg.properties.items()
                if k != PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS}
        dataclasses.replace(msg, properties=user).check(self.producer.max_message_size)
        [message_id] = self.producer.new_message_id.take(1)
        started_ms = now_ms()
        result, addr = self._send_half(msg, message_id, user, immunity, timeout_s)
        self.producer.trace_pub(msg, result, started_ms, MessageType.Trans_Msg_Half)
        state = LocalTransactionState.UNKNOWN
        if result.status is SendStatus.SEND_OK:
            try:
                state = _state(self.listener.execute_local_transaction(  # type: ignore[union-attr]
                    msg, arg))
            except Exception:
                log.exception("local transaction of message %s failed: UNKNOWN, the broker "
                              "will check", message_id)
        else:  # stored without the durability asked for: not worth committing
            state = LocalTransactionState.ROLLBACK
        self._end(addr, result.msg_id, result.queue_offset, self._commit_log_offset(result),
                  state, from_check=False)
        self._trace_end(addr, msg.topic, msg.tags, " ".join(msg.key_list()), result.msg_id,
                        state, from_check=False)
        return TransactionSendResult(result, state, message_id)

    send_message_in_transaction = send

    def _send_half(self, msg: Message, message_id: str, user: dict[str, str],
                   immunity: str | None, timeout_s: float | None
                   ) -> tuple[SendResult, str]:
        producer = self.producer
        sp = messaging_pb2.SystemProperties(
            message_id=message_id, born_timestamp=int(time.time() * 1000),
            transaction_type=messaging_pb2.TRANSACTION_PREPARED_TYPE,
            producer_group=self.group)
        if immunity is not None:
            sp.reserved_properties[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = immunity
        request = messaging_pb2.SendMessageRequest(
            producer_group=self.group, default_topic_queue_nums=producer.default_topic_queue_nums,
            message=messaging_pb2.Message(topic=msg.topic, flag=msg.flag, body=bytes(msg.body),
                                          tag=msg.tags, keys=msg.key_list(),
                                          user_properties=user, system_properties=sp))
        attempts = _Attempts(producer, producer.send_timeout(timeout_s))
        route = producer.publish_route(msg.topic, attempts.remaining())
        channels = self.instance.channels
        for _ in range(1 + producer.retry_times):
            target, addr, remaining = attempts.next_target(route, None)
            request.queue_id = target.queue_id
            started = time.monotonic()
            try:
                r = channels.sync_messaging(addr).SendMessage(request, timeout=remaining)
            except grpc.RpcError as e:
                attempts.unreachable(target, addr, started, e, remaining)
                continue
            if attempts.answered(target, started, r.status):
                entry = r.result
                mq = MessageQueue(msg.topic, target.broker_name, entry.queue_id)
                return SendResult(SEND_STATUS_BY_CODE[r.status.code], entry.message_id,
                                  entry.offset_msg_id, mq, entry.queue_offset), addr
        raise attempts.give_up()

    @staticmethod
    def _commit_log_offset(result: SendResult) -> int:
        """The half's commitlog offset: the last 16 hex digits of its offsetMsgId."""
        return int(result.offset_msg_id[-16:], 16)

    def _end(self, addr: str, message_id: str, queue_offset: int, commit_log_offset: int,
             state: LocalTransactionState, *, from_check: bool) -> None:
        """EndTransaction; a failure is logged (the broker's check settles the half)."""
        request = messaging_pb2.EndTransactionRequest(
            producer_group=self.group, message_id=message_id, transaction_id=message_id,
            commit_log_offset=commit_log_offset, tran_state_table_offset=queue_offset,
            commit_or_rollback=_WIRE_STATE[state], from_transaction_check=from_check)
        try:
            r = self.instance.channels.sync_messaging(addr).EndTransaction(
                request, timeout=END_TRANSACTION_TIMEOUT_S)
        except grpc.RpcError as e:
            log.warning("end of transaction %s (%s) at %s failed: %s; the broker will check",
                        message_id, state.value, addr, e.code())  # type: ignore[attr-defined]
            return
        except RuntimeError as e:  # the client is shut down
            log.warning("end of transaction %s not sent: %s", message_id, e)
            return
        if r.status.code != common_pb2.SUCCESS:
            log.warning("end of transaction %s (%s) at %s refused: %s %s", message_id,
                        state.value, addr, common_pb2.ResponseCode.Name(r.status.code),
                        r.status.remark)

    def _trace_end(self, addr: str, topic: str, tags: str, keys: str, message_id: str,
                   state: LocalTransactionState, *, from_check: bool) -> None:
        """The EndTransaction trace record (EndTransactionTraceHookImpl)."""
        trace = self.producer.trace
        if trace is None:
            return
        trace.append(TraceContext(TraceType.EndTransaction, now_ms(), group=self.group, beans=[
            TraceBean(topic=topic, msg_id=message_id, tags=tags or None, keys=keys or None,
                      store_host=addr, msg_type=MessageType.Trans_msg_Commit,
                      transaction_id=message_id, transaction_state=_TRACE_STATE[state],
                      from_transaction_check=from_check)]))

    # -- check streams (client loop) ----------------------------------------------------------
    async def _start_streams(self) -> None:
        await self._sync_streams()
        self._keeper = asyncio.get_running_loop().create_task(self._keep_streams())

    async def _stop_streams(self) -> None:
        tasks = [*self._streams.values(), *([self._keeper] if self._keeper else [])]
        await cancel_and_wait(tasks, ADMIN_CALL_TIMEOUT_S, f"transaction producer {self.group}")
        self._streams.clear()
        self._keeper = None

    async def _keep_streams(self) -> None:
        while True:
            await asyncio.sleep(self.check_stream_refresh_s)
            try:
                await self._sync_streams()
            except Exception:
                log.exception("transaction check streams of %s not refreshed", self.group)

    async def _master_addrs(self) -> tuple[set[str], bool]:
        """Every master the name servers list, and those of the cached routes; False when
        no name server answered (the list is then the routes' only)."""
        addrs = {g.master_addr for route in list(self.instance.routes.values())
                 for g in route.brokers.values() if g.master_addr is not None}
        for namesrv in self.instance.namesrv.addresses:
            try:
                r = await self.instance.channels.namesrv(namesrv).GetClusterInfo(
                    namesrv_pb2.GetClusterInfoRequest(), timeout=ADMIN_CALL_TIMEOUT_S)
            except grpc.RpcError:
                continue
            for data in r.cluster_info.broker_addr_table.values():
                if 0 in data.broker_addrs:
                    addrs.add(data.broker_addrs[0])
            return addrs, True
        return addrs, False

    async def _sync_streams(self) -> None:
        addrs, complete = await self._master_addrs()
        loop = asyncio.get_running_loop()
        for addr in list(self._streams):
            if complete and addr not in addrs:  # a master that left (or restarted elsewhere)
                self._streams.pop(addr).cancel()
        for addr in addrs - set(self._streams):
            self._streams[addr] = loop.create_task(self._check_stream(addr))

    async def _check_stream(self, addr: str) -> None:
        request = messaging_pb2.SubscribeTransactionCheckRequest(
            producer_group=self.group, client_id=self.instance.client_id)
        loop = asyncio.get_running_loop()
        while True:
            try:
                async for check in self.instance.channels.messaging(
                        addr).SubscribeTransactionCheck(request):
                    loop.run_in_executor(self._check_pool, self._check, addr, check)
            except grpc.RpcError as e:
                log.debug("transaction check stream at %s ended: %s", addr,
                          e.code())  # type: ignore[attr-defined]
            await asyncio.sleep(WATCH_RECONNECT_DELAY_S)

    def _check(self, addr: str, check: messaging_pb2.CheckTransactionStateRequest) -> None:
        """On a check thread: ask the listener, answer with EndTransaction."""
        msg = message_from_check(check.message)
        try:
            state = _state(self.listener.check_local_transaction(msg))  # type: ignore[union-attr]
        except Exception:
            log.exception("checking transaction %s failed: UNKNOWN", msg.msg_id)
            state = LocalTransactionState.UNKNOWN
        self._end(addr, msg.msg_id, check.tran_state_table_offset, check.commit_log_offset,
                  state, from_check=True)
        self._trace_end(addr, msg.topic, msg.tags, " ".join(msg.keys), msg.msg_id, state,
                        from_check=True)
