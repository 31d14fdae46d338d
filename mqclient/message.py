"""What the client sends and receives: Message, MessageExt, MessageQueue, SendResult, and the
errors it raises."""

from __future__ import annotations

import asyncio
import calendar
import concurrent.futures
import dataclasses
import enum
import itertools
import os
import random
import struct
import time
from collections.abc import Generator, Sequence
from typing import Any

from mqproto import common_pb2, messaging_pb2

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
    `tags` the one tag consumers filter on, `properties` user properties."""

    topic: str
    body: bytes
    tags: str = ""
    keys: Sequence[str] | str = ()
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    flag: int = 0

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
        for name in self.properties:
            if name in RESERVED_PROPERTY_NAMES:
                raise MQClientError("ILLEGAL_ARGUMENT",
                                    f"user property {name} is a reserved system property")

    def to_proto(self, message_id: str = "") -> messaging_pb2.Message:
        # Only the fields that are set: empty repeated / map arguments cost time per message.
        pb = messaging_pb2.Message(topic=self.topic, body=bytes(self.body))
        if self.flag:
            pb.flag = self.flag
        if self.tags:
            pb.tag = self.tags
        if self.keys:
            pb.keys.extend(self.key_list())
        if self.properties:
            pb.user_properties.update(self.properties)
        if message_id:
            pb.system_properties.message_id = message_id
        return pb


@dataclasses.dataclass(slots=True)
class MessageExt:
    """A received message. `msg_id` is the producer's UNIQ_KEY, `offset_msg_id` the
    broker's store-host + commitlog-offset id."""

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


@dataclasses.dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    message_queue: MessageQueue
    queue_offset: int

    @classmethod
    def from_entry(cls, status: SendStatus, entry: messaging_pb2.SendResultEntry,
                   mq: MessageQueue) -> SendResult:
        if entry.queue_id != mq.queue_id:  # the broker chose the queue
            mq = MessageQueue(mq.topic, mq.broker_name, entry.queue_id)
        return cls(status, entry.message_id, entry.offset_msg_id, mq, entry.queue_offset)


class SendFuture(concurrent.futures.Future[Any]):
    """The result of an async send: `.result(timeout)` from a thread, or `await` it on any
    event loop."""

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

    def __call__(self) -> str:
        diff = (int(time.time() * 1000) - self._month_start_ms) & 0xFFFFFFFF
        return self._prefix + f"{diff:08X}{next(self._counter) & 0xFFFF:04X}"
