"""What the client sends and receives: Message, MessageExt, MessageQueue, SendResult, and the
errors it raises."""

from __future__ import annotations

import asyncio
import calendar
import concurrent.futures
import concurrent.futures._base as cf_base
import dataclasses
import enum
import itertools
import os
import random
import struct
import threading
import time
from collections.abc import Generator, Sequence
from typing import Any

from common import native
from mqproto import common_pb2
from remoting.framing import MAX_PROPERTIES_BYTES, encode_batch_message

# Properties the broker owns; a user property by one of these names is refused.
RESERVED_PROPERTY_NAMES = frozenset({
    "TAGS", "KEYS", "UNIQ_KEY", "DELAY", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP",
    "WAIT", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "MAX_RECONSUME_TIMES", "__transactionId__",
    "SHARDING_KEY", "MIN_OFFSET", "MAX_OFFSET",
})

_BODY_TYPES = (bytes, bytearray, memoryview)


class MQClientError(Exception):
    """A send, pull or query that could not be done. `code` is a ResponseCode name of
    common.proto when a broker or name server answered one (e.g. "MESSAGE_ILLEGAL"),
    else a client-side reason ("NO_ROUTE", "TIMEOUT", "UNAVAILABLE", "ILLEGAL_ARGUMENT")."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def code_name(code: int) -> str:
    try:
        return common_pb2.ResponseCode.Name(code)
    except ValueError:
        return f"RESPONSE_CODE_{code}"


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}-{self.queue_id}"


@dataclasses.dataclass(slots=True)
class Message:
    """A message to send. `keys` are the business keys (queryable; no blanks inside a key),
    `tags` the one tag consumers filter on, `properties` user properties. A message with a
    `delay_level` (1-18: 1s 5s 10s 30s 1m ... 2h by default) is delivered that much later."""

    topic: str
    body: bytes
    tags: str = ""
    keys: Sequence[str] | str = ()
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0

    def key_list(self) -> list[str]:
        return self.keys.split() if isinstance(self.keys, str) else list(self.keys)

    def check(self, max_size: int) -> None:
        """MQClientError(ILLEGAL_ARGUMENT) for what no broker would store (Validators)."""
        if not self.topic:
            raise MQClientError("ILLEGAL_ARGUMENT", "the message has no topic")
        if not isinstance(self.body, _BODY_TYPES):
            raise MQClientError("ILLEGAL_ARGUMENT",
                                f"the body must be bytes, not {type(self.body).__name__}")
        if len(self.body) == 0:
            raise MQClientError("ILLEGAL_ARGUMENT", "the message body is empty")
        if len(self.body) > max_size:
            raise MQClientError("ILLEGAL_ARGUMENT",
                                f"the message body is {len(self.body)} bytes, over the "
                                f"maximum {max_size}")
        if self.tags:
            _check_text("the tag", self.tags)
        if not isinstance(self.delay_level, int) or self.delay_level < 0:
            raise MQClientError("ILLEGAL_ARGUMENT",
                                f"delay_level {self.delay_level!r} is not a delay level")
        for key in self.key_list() if self.keys else ():
            if not key or key != "".join(key.split()):
                raise MQClientError("ILLEGAL_ARGUMENT", f"key {key!r} is empty or has blanks")
            _check_text("a key", key)
        for name, value in self.properties.items():
            if name in RESERVED_PROPERTY_NAMES:
                raise MQClientError("ILLEGAL_ARGUMENT",
                                    f"user property {name} is a reserved system property")
            if not name:
                raise MQClientError("ILLEGAL_ARGUMENT", "a user property has an empty name")
            _check_text("user property name", name)
            _check_text(f"user property {name}", value)

    def encode(self, message_id: str, sharding_key: str = "") -> bytes:
        """This message as a MessageBatch element (remoting/framing.py), with its UNIQ_KEY
        (and SHARDING_KEY); MQClientError when its properties are too long."""
        parts = [f"UNIQ_KEY\x01{message_id}\x02"]
        if self.tags:
            parts.append(f"TAGS\x01{self.tags}\x02")
        if self.keys:
            parts.append(f"KEYS\x01{' '.join(self.key_list())}\x02")
        if sharding_key:
            _check_text("the sharding key", sharding_key)
            parts.append(f"SHARDING_KEY\x01{sharding_key}\x02")
        if self.delay_level:
            parts.append(f"DELAY\x01{self.delay_level}\x02")
        for name, value in self.properties.items():
            parts.append(f"{name}\x01{value}\x02")
        properties = "".join(parts).encode()
        if len(properties) > MAX_PROPERTIES_BYTES:
            raise MQClientError("ILLEGAL_ARGUMENT",
                                f"the message properties are {len(properties)} bytes encoded, "
                                f"over the maximum {MAX_PROPERTIES_BYTES}")
        return encode_batch_message(self.flag, bytes(self.body), properties)


def encode_messages(msgs: list[Message], ids: list[str], max_size: int,
                    sharding_key: str = "") -> bytes:
    """Each message checked (Message.check) and encoded with its id (Message.encode), the
    MessageBatch elements joined. The store's C twin (common/_native.c client_elements) does
    the common case and hands anything it would not take to the loop below."""
    lib = native.lib
    if lib is not None:
        data = lib.client_elements(msgs, ids, sharding_key, max_size, MAX_PROPERTIES_BYTES,
                                   RESERVED_PROPERTY_NAMES)
        if data is not None:
            return data
    parts = []
    for msg, message_id in zip(msgs, ids, strict=True):
        msg.check(max_size)
        parts.append(msg.encode(message_id, sharding_key))
    return b"".join(parts)


def _check_text(what: str, value: str) -> None:
    if "\x01" in value or "\x02" in value:
        raise MQClientError("ILLEGAL_ARGUMENT",
                            f"{what} {value!r} holds a \\x01 or \\x02 (the separators of "
                            "properties)")


@dataclasses.dataclass(slots=True)
class MessageExt:
    """A received message. `msg_id` is the producer's UNIQ_KEY, `offset_msg_id` the
    broker's store-host + commitlog-offset id. `sys_flag` is the stored message's, less
    COMPRESSED once its body was decompressed; `body_error` says why a body marked
    compressed could not be (then `body` is the stored bytes and COMPRESSED stays set)."""

    topic: str
    body: bytes
    tags: str
    keys: list[str]
    properties: dict[str, str]
    msg_id: str
    offset_msg_id: str
    broker_name: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    born_timestamp: int
    store_timestamp: int
    born_host: str
    store_host: str
    reconsume_times: int
    flag: int = 0
    sys_flag: int = 0
    body_error: str = ""

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


class SendStatus(enum.Enum):
    """SEND_OK, or stored without the durability asked for (the other three)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


SEND_STATUS_BY_CODE = {
    common_pb2.SUCCESS: SendStatus.SEND_OK,
    common_pb2.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    common_pb2.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    common_pb2.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclasses.dataclass(slots=True)  # not frozen: that triples its construction time
class SendResult:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int


# Guards the lazy creation of SendFuture conditions, and completion before there is one.
_condition_lock = threading.Lock()
_FINAL_STATES = frozenset({cf_base.CANCELLED, cf_base.CANCELLED_AND_NOTIFIED, cf_base.FINISHED})


class SendFuture(concurrent.futures.Future[Any]):
    """The result of an async send: `.result(timeout)` from a thread, or `await` it on any
    event loop; a concurrent.futures.Future in every way (wait, as_completed, callbacks).

    A Future makes a Condition (and its RLock) when created: that was a quarter of an async
    send's cost. This one makes it when something first locks the future (a waiter, cancel,
    wait / as_completed); a future completed before that completes without one. Its lists
    of waiters and callbacks too are made when first used: thousands of futures wait at
    once, and every container among them is walked by the garbage collector's young
    collections and, once they survived those, by its full ones (measured: spread over
    1,000 topics, 20 % of the client's CPU)."""

    def __init__(self) -> None:  # Future.__init__ without the Condition and lists
        self._cond: threading.Condition | None = None
        self._state = cf_base.PENDING
        self._result = None
        self._exception: BaseException | None = None
        self._waiter_list: list[Any] | None = None
        self._callback_list: list[Any] | None = None

    @property
    def _waiters(self) -> list[Any]:
        waiters = self._waiter_list
        if waiters is None:
            waiters = self._waiter_list = []
        return waiters

    @property
    def _done_callbacks(self) -> list[Any]:
        callbacks = self._callback_list
        if callbacks is None:
            callbacks = self._callback_list = []
        return callbacks

    def _invoke_callbacks(self) -> None:
        if self._callback_list:
            super()._invoke_callbacks()  # type: ignore[misc]

    @property  # type: ignore[override]
    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _condition_lock:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition()
        return cond

    # Reads of a finished future need no lock (and no Condition): its state is set last.
    def done(self) -> bool:
        return self._state in _FINAL_STATES

    def result(self, timeout: float | None = None) -> Any:
        if self._state == cf_base.FINISHED and self._exception is None:
            return self._result
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == cf_base.FINISHED:
            return self._exception
        return super().exception(timeout)

    def set_result(self, result: Any) -> None:
        if not self._complete(result, None):
            super().set_result(result)

    def set_exception(self, exception: BaseException | None) -> None:
        if not self._complete(None, exception):
            super().set_exception(exception)

    def _complete(self, result: Any, exception: BaseException | None) -> bool:
        """Completes a future no one has locked yet (so no one waits on it); False when
        someone has: then the Future's own way, under its condition."""
        with _condition_lock:
            if self._cond is not None:
                return False
            final = self._state in _FINAL_STATES
            if not final:
                self._result = result
                self._exception = exception
                self._state = cf_base.FINISHED
        if final:  # (its repr takes the lock)
            raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
        self._invoke_callbacks()
        return True

    def __await__(self) -> Generator[Any, None, Any]:
        return asyncio.wrap_future(self).__await__()


class MessageIdFactory:
    """UNIQ_KEYs in the manner of MessageClientIDSetter: ip (4) + pid (2) + random (4) + ms
    since the start of the month (4) + counter (2), as 32 upper-case hex characters."""

    def __init__(self, ip: str) -> None:
        try:
            packed = bytes(int(part) for part in ip.split("."))[-4:]
        except ValueError:
            packed = bytes(4)
        self._prefix = (packed.rjust(4, b"\0") + struct.pack(
            ">HI", os.getpid() & 0xFFFF, random.getrandbits(32))).hex().upper()
        self._counter = itertools.count()
        now = time.gmtime()
        self._month_start_ms = calendar.timegm(
            (now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, 0)) * 1000
        self._last_ms = -1
        self._head = ""

    def take(self, n: int) -> list[str]:
        """`n` new ids (one clock reading for all)."""
        now_ms = int(time.time() * 1000)
        if now_ms != self._last_ms:  # the time part changes at most once per ms
            self._head = f"{self._prefix}{(now_ms - self._month_start_ms) & 0xFFFFFFFF:08X}"
            self._last_ms = now_ms
        head, counter = self._head, self._counter
        return [f"{head}{next(counter) & 0xFFFF:04X}" for _ in range(n)]
