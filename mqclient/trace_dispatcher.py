"""The trace dispatcher (RocketMQ's AsyncTraceDispatcher) and the listener wrapper that
writes consumers' records: what mqclient/trace.py's records go through on their way to
the trace topic. `append` / `append_send` only put an event in a bounded buffer (a full
one drops it and counts `dropped`); a background thread makes and encodes the records
and sends the trace messages with async sends of an inner producer. Nothing on the send
or consume path waits for a trace, and no trace failure fails a send.
"""

from __future__ import annotations

import collections
import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from common.codec import decode_offset_msg_id
from mqclient.message import Message, MessageIdFactory, SendStatus
from mqclient.trace import (
    DEFAULT_TRACE_REGION_ID,
    KEY_SEPARATOR,
    PROPERTY_MSG_REGION,
    RMQ_SYS_TRACE_TOPIC,
    TRACE_GROUP_NAME_PREFIX,
    ConsumeReturnType,
    TraceBean,
    TraceContext,
    TraceType,
    encode_context,
    java_str,
    now_ms,
)

if TYPE_CHECKING:
    from mqclient.producer import Producer

log = logging.getLogger(__name__)

# AsyncTraceDispatcher: 2048 contexts buffered, up to 20 per flush, 128,000 bytes per trace
# message. A Python producer buffers more: a flush of its thread every TRACE_FLUSH_S.
TRACE_BUFFER_SIZE = 20_000
TRACE_BATCH_NUM = 400
# The KEYS of a trace message stay under this many bytes (properties hold at most 32,767).
MAX_KEYS_BYTES = 24_000
TRACE_MAX_MSG_SIZE = 128_000
TRACE_FLUSH_S = 0.01
TRACE_SEND_TIMEOUT_S = 5.0  # AsyncTraceDispatcher sends with a 5 s timeout
YIELD_EVERY = 256  # records the dispatcher thread encodes between letting the GIL go
_SEND_OK = SendStatus.SEND_OK


class TraceDispatcher:
    """AsyncTraceDispatcher: contexts appended from any thread go, encoded by a
    background thread, to `trace_topic` through `producer` (an inner producer of this
    client's loop, started and shut down with the dispatcher)."""

    def __init__(self, producer: Producer, trace_topic: str = RMQ_SYS_TRACE_TOPIC, *,
                 buffer_size: int = TRACE_BUFFER_SIZE, batch_num: int = TRACE_BATCH_NUM,
                 max_msg_size: int = TRACE_MAX_MSG_SIZE, flush_s: float = TRACE_FLUSH_S
                 ) -> None:
        self.producer = producer
        self.trace_topic = trace_topic or RMQ_SYS_TRACE_TOPIC
        self.buffer_size = buffer_size
        self.batch_num = max(1, batch_num)
        self.max_msg_size = max_msg_size
        self.flush_s = flush_s
        self._buffer: collections.deque[TraceContext] = collections.deque()
        # Async sends not yet done: (start ms, message, future); their Pub records are made
        # here once done (a callback per future would cost the send path a lock per
        # future, and the client loop the record).
        self._sends: collections.deque[tuple[int, Any, Any]] = collections.deque()
        self.group = ""  # the producer group of the Pub records of async sends
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._drop_lock = threading.Lock()
        self._dispatch_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.dropped = 0  # contexts not traced: the buffer was full
        self.sent = 0  # trace messages handed to the producer
        self.failed = 0  # trace messages the producer could not send
        self.request_ids = MessageIdFactory(producer.instance.client_ip)
        self._hosts: dict[str, str] = {}  # offsetMsgId host hex -> ip:port

    # -- any thread ----------------------------------------------------------------------
    def append(self, ctx: TraceContext) -> bool:
        """Buffers `ctx` (never blocks); False, counted in `dropped`, when it is full."""
        buffer = self._buffer
        if len(buffer) >= self.buffer_size:
            with self._drop_lock:
                self.dropped += 1
            return False
        buffer.append(ctx)
        if len(buffer) >= self.batch_num * 8:
            self._wake.set()
        return True

    def append_send(self, started_ms: int, msg: Any, future: Any) -> bool:
        """An async send in flight (a Message and its SendFuture): its Pub record is made
        by the dispatcher once `future` is done (none when it failed); its cost time is
        then known to within the dispatcher's tick (TRACE_FLUSH_S). False, counted in
        `dropped`, when the buffer is full."""
        sends = self._sends
        if len(sends) + len(self._buffer) >= self.buffer_size:
            with self._drop_lock:
                self.dropped += 1
            return False
        sends.append((started_ms, msg, future))
        return True

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> TraceDispatcher:
        if self._thread is None:
            self.producer.start()
            self._thread = threading.Thread(target=self._run, name="trace-dispatcher",
                                            daemon=True)
            self._thread.start()
        return self

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Sends what is buffered (within `timeout_s`), then stops the inner producer."""
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout_s)
        self._thread = None
        self.producer.shutdown()

    def flush(self, timeout_s: float = 10.0) -> None:
        """Sends what is buffered now (and the records of the async sends done within
        `timeout_s`) and waits until the inner producer sent it."""
        deadline = time.monotonic() + timeout_s
        while self._sends and not self._sends[-1][2].done() and time.monotonic() < deadline:
            time.sleep(0.005)
        self._dispatch()
        self.producer.flush()

    def _dispatch(self) -> None:
        with self._dispatch_lock:  # the thread's and flush()'s: one takes at a time
            self._send(self._take_all())

    # -- background thread ---------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_s)
            self._wake.clear()
            try:
                self._dispatch()
            except Exception:  # never let a bug end tracing silently
                log.exception("trace dispatch failed")
        try:
            self._dispatch()
        except Exception:
            log.exception("trace dispatch failed")

    def _take_all(self) -> dict[str, tuple[list[str], list[str]]]:
        """The records buffered and those of the async sends done, encoded, by traced
        topic: (record texts, their trace message keys). The thread lets the GIL go every
        YIELD_EVERY records: held for a switch interval (5 ms) it would stall the client
        loop's sends each time."""
        by_topic: dict[str, tuple[list[str], list[str]]] = {}
        buffer = self._buffer
        for i in range(len(buffer)):
            ctx = buffer.popleft()
            if not ctx.beans:
                continue
            if ctx.trace_type is TraceType.Pub:
                bean = ctx.beans[0]
                if not bean.store_host and bean.offset_msg_id:
                    bean.store_host = self.store_host(bean.offset_msg_id)
            text, keys = encode_context(ctx)
            records, all_keys = by_topic.setdefault(java_str(ctx.beans[0].topic), ([], []))
            records.append(text)
            all_keys.append(" ".join(keys))
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                time.sleep(0)
        sends = self._sends
        done = []
        while sends and sends[0][2].done():  # in send order, mostly done in order
            done.append(sends.popleft())
        for i in range(0, len(done), YIELD_EVERY):
            self._pub_records(done[i:i + YIELD_EVERY], by_topic)
            time.sleep(0)
        return by_topic

    def _pub_records(self, done: list[tuple[int, Any, Any]],
                     by_topic: dict[str, tuple[list[str], list[str]]]) -> None:
        """The Pub records of async sends done (SendMessageTraceHookImpl's fields; those
        that failed have none, those to the trace topic neither), in bulk, into
        `by_topic`: a record costs a microsecond or two."""
        done_ms = now_ms()
        group = self.group
        trace_topic = self.trace_topic
        hosts = self._hosts
        store_host = self.store_host
        topic = None
        records: list[str] = []
        keys: list[str] = []
        for started_ms, m, f in done:
            if f.exception() is not None or m.topic == trace_topic:
                continue
            r = f.result()
            if m.topic != topic:
                topic = m.topic
                records, keys = by_topic.setdefault(topic, ([], []))
            k = m.keys
            key_text = k if k.__class__ is str else " ".join(k)
            offset_id = r.offset_msg_id
            msg_id = r.msg_id
            records.append(
                f"Pub\x01{started_ms}\x01{DEFAULT_TRACE_REGION_ID}\x01{group}\x01{topic}"
                f"\x01{msg_id}\x01{m.tags or 'null'}\x01{key_text or 'null'}"
                f"\x01{hosts.get(offset_id[:-16]) or store_host(offset_id)}"
                f"\x01{len(m.body)}\x01{done_ms - started_ms}"
                f"\x01{3 if m.delay_level else 0}\x01{offset_id}"
                f"\x01{'true' if r.status is _SEND_OK else 'false'}\x02")
            keys.append(f"{msg_id} {key_text}" if key_text else msg_id)

    def _send(self, by_topic: dict[str, tuple[list[str], list[str]]]) -> None:
        """Trace messages of encoded records, per traced topic: up to batch_num contexts
        and max_msg_size bytes each (AsyncTraceDispatcher.sendTraceData / flushData);
        their keys are the records' ids and keys (`keys`: one text per context)."""
        for records, keys in by_topic.values():
            start = size = key_size = 0
            for i, (record, key_text) in enumerate(zip(records, keys, strict=True)):
                size += len(record)
                key_size += len(key_text) + 1
                if (i + 1 - start >= self.batch_num or size >= self.max_msg_size
                        or key_size >= MAX_KEYS_BYTES):
                    self._send_one("".join(records[start:i + 1]),
                                   " ".join(keys[start:i + 1]).split())
                    start, size, key_size = i + 1, 0, 0
                    time.sleep(0)
            if start < len(records):
                self._send_one("".join(records[start:]), " ".join(keys[start:]).split())

    def store_host(self, offset_msg_id: str) -> str:
        """The broker's address in an offsetMsgId (its store host), cached by its hex."""
        head = offset_msg_id[:-16]
        host = self._hosts.get(head)
        if host is None:
            try:
                (ip, port), _ = decode_offset_msg_id(offset_msg_id)
                host = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
            except ValueError:
                host = ""
            if len(self._hosts) < 1024:
                self._hosts[head] = host
        return host

    def _send_one(self, data: str, keys: list[str]) -> None:
        msg = Message(self.trace_topic, data.encode(),
                      keys=[k for k in dict.fromkeys(keys)
                            if "\x01" not in k and "\x02" not in k])
        try:
            future = self.producer.send_async(msg, timeout_s=TRACE_SEND_TIMEOUT_S)
        except Exception as e:  # shut down, no room, ...: the trace is lost
            self._failed(e)
            return
        self.sent += 1
        future.add_done_callback(self._done)

    def _done(self, future: Any) -> None:
        error = future.exception()
        if error is not None:
            self._failed(error)

    def _failed(self, error: BaseException) -> None:
        self.failed += 1
        if self.failed == 1 or self.failed % 1000 == 0:
            log.error("trace data to %s not sent (%d so far): %s", self.trace_topic,
                      self.failed, error)


def new_trace_dispatcher(group: str, namesrv_addr: str | list[str], trace_topic: str | None,
                         make_producer: Callable[..., Producer], **producer_kw: Any
                         ) -> TraceDispatcher:
    """A dispatcher with an inner producer of group `_INNER_TRACE_PRODUCER-{group}`
    (its own sends are not traced). Its trace messages go uncompressed: compressing them
    (zlib, 20 KiB each) cost the client more than all the rest of the trace, and any tool
    reads them as text."""
    producer = make_producer(f"{TRACE_GROUP_NAME_PREFIX}-{group}", namesrv_addr,
                             compress_msg_body_over_howmuch=1 << 31, **producer_kw)
    return TraceDispatcher(producer, trace_topic or RMQ_SYS_TRACE_TOPIC)


def traced_listener(listener: Callable[..., Any], dispatcher: TraceDispatcher, group: str
                    ) -> Callable[..., Any]:
    """`listener` with a SubBefore record before each call and a SubAfter record after it
    (ConsumeMessageTraceHookImpl), async when it is. A call that returns None or
    CONSUME_SUCCESS is SUCCESS; one that returns another status FAILED; one that raises
    EXCEPTION (then it raises on)."""
    from mqclient.consume_service import ConsumeStatus

    def before(msgs: list[Any]) -> TraceContext:
        beans = [TraceBean(topic=m.topic, msg_id=m.msg_id, tags=m.tags or None,
                           keys=KEY_SEPARATOR.join(m.keys) or None, store_host=m.store_host,
                           body_length=len(m.body), retry_times=m.reconsume_times)
                 for m in msgs]
        region = msgs[0].properties.get(PROPERTY_MSG_REGION) or DEFAULT_TRACE_REGION_ID
        ctx = TraceContext(TraceType.SubBefore, now_ms(), region, group,
                           request_id=dispatcher.request_ids.take(1)[0], beans=beans)
        dispatcher.append(ctx)
        return ctx

    def after(ctx: TraceContext, code: ConsumeReturnType) -> None:
        now = now_ms()
        dispatcher.append(TraceContext(
            TraceType.SubAfter, now, ctx.region_id, group,
            cost_time=(now - ctx.timestamp) // max(1, len(ctx.beans)),
            success=code is ConsumeReturnType.SUCCESS, request_id=ctx.request_id,
            context_code=int(code), beans=ctx.beans))

    def code_of(status: object) -> ConsumeReturnType:
        return (ConsumeReturnType.SUCCESS if status is None
                or status is ConsumeStatus.CONSUME_SUCCESS else ConsumeReturnType.FAILED)

    if inspect.iscoroutinefunction(listener):
        async def traced_async(msgs: list[Any]) -> Any:
            ctx = before(msgs)
            try:
                status = await listener(msgs)
            except BaseException:
                after(ctx, ConsumeReturnType.EXCEPTION)
                raise
            after(ctx, code_of(status))
            return status
        return traced_async

    def traced(msgs: list[Any]) -> Any:
        ctx = before(msgs)
        try:
            status = listener(msgs)
        except BaseException:
            after(ctx, ConsumeReturnType.EXCEPTION)
            raise
        after(ctx, code_of(status))
        return status
    return traced
