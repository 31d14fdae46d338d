"""v2 (apache.rocketmq.v2) messages, statuses and receipt handles <-> the broker's.

A v2 message sent through the proxy becomes the broker's own send request (mqcluster.v1
Message), so it is stored exactly as an mqclient send: tag -> TAGS, keys -> KEYS, message id
-> UNIQ_KEY, message group -> SHARDING_KEY, user properties as they are. A delivery
timestamp is kept in TIMER_DELIVER_MS (RocketMQ 5's property); proxy/timer.py delivers the
message then. Stored messages go back out as v2 messages with the same fields.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import zlib

from google.protobuf import duration_pb2, timestamp_pb2

from broker.constants import PROPERTY_SHARDING_KEY, RESERVED_PROPERTIES
from broker.convert import format_host
from broker.transaction.messages import PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS
from common.codec import PROPERTIES_SEPARATOR, PROPERTY_SEPARATOR, MessageExt
from common.constants import MessageProperty
from mqproto import common_pb2, messaging_pb2
from mqproto.v2 import definition_pb2 as D

# RocketMQ 5's MessageConst.PROPERTY_TIMER_DELIVER_MS: when a delayed message is due.
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
# Properties never shown to v2 consumers as user properties.
_HIDDEN_PROPERTIES = RESERVED_PROPERTIES | {PROPERTY_TIMER_DELIVER_MS}

# Message types a topic of this cluster accepts (every topic takes every type).
ACCEPTED_MESSAGE_TYPES: tuple[int, ...] = (D.NORMAL, D.FIFO, D.DELAY, D.TRANSACTION)


class V2Error(Exception):
    """A request the proxy refuses: answered with a v2 status `code` and `message`."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> D.Status:
        return D.Status(code=self.code, message=self.message)  # type: ignore[arg-type]


def ok(message: str = "OK") -> D.Status:
    return D.Status(code=D.OK, message=message)


# The broker's ResponseCode -> v2 Code.
_CODES: dict[int, int] = {
    common_pb2.SUCCESS: D.OK,
    common_pb2.FLUSH_DISK_TIMEOUT: D.MASTER_PERSISTENCE_TIMEOUT,
    common_pb2.FLUSH_SLAVE_TIMEOUT: D.SLAVE_PERSISTENCE_TIMEOUT,
    common_pb2.SLAVE_NOT_AVAILABLE: D.HA_NOT_AVAILABLE,
    common_pb2.SERVICE_NOT_AVAILABLE: D.INTERNAL_SERVER_ERROR,
    common_pb2.CREATE_MAPPED_FILE_FAILED: D.INTERNAL_SERVER_ERROR,
    common_pb2.MESSAGE_ILLEGAL: D.BAD_REQUEST,
    common_pb2.PROPERTIES_SIZE_EXCEEDED: D.MESSAGE_PROPERTIES_TOO_LARGE,
    common_pb2.OS_PAGECACHE_BUSY: D.TOO_MANY_REQUESTS,
    common_pb2.SYSTEM_BUSY: D.TOO_MANY_REQUESTS,
    common_pb2.UNKNOWN_ERROR: D.INTERNAL_ERROR,
    common_pb2.SYSTEM_ERROR: D.INTERNAL_ERROR,
    common_pb2.REQUEST_CODE_NOT_SUPPORTED: D.NOT_IMPLEMENTED,
    common_pb2.INVALID_PARAMETER: D.BAD_REQUEST,
    common_pb2.NO_PERMISSION: D.FORBIDDEN,
    common_pb2.TOPIC_NOT_EXIST: D.TOPIC_NOT_FOUND,
    common_pb2.QUERY_NOT_FOUND: D.NOT_FOUND,
    common_pb2.TRANSACTION_FAILED: D.INVALID_TRANSACTION_ID,
}


def v2_code(code: int) -> int:
    return _CODES.get(code, D.INTERNAL_ERROR)


def v2_status(status: common_pb2.Status) -> D.Status:
    """The broker's status as v2's: its code mapped, and its own code's name before the
    remark when v2's name differs (SERVICE_NOT_AVAILABLE is INTERNAL_SERVER_ERROR in v2)."""
    code = v2_code(status.code)
    name = common_pb2.ResponseCode.Name(status.code) if status.code in _CODES else ""
    message = status.remark or D.Code.Name(code)
    if status.remark and name and name != D.Code.Name(code) \
            and not status.remark.startswith(name):
        message = f"{name}: {status.remark}"
    return D.Status(code=code, message=message)  # type: ignore[arg-type]


# -- time --------------------------------------------------------------------------------
def timestamp_ms(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def to_timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(d: duration_pb2.Duration) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def to_duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


# -- send --------------------------------------------------------------------------------
def _check_name(code: int, what: str, value: str) -> None:
    if PROPERTY_SEPARATOR in value or PROPERTIES_SEPARATOR in value:
        raise V2Error(code, f"{what} {value!r} contains a \\x01 or \\x02 separator")


def message_from_v2(pb: D.Message, *, now_ms: int) -> messaging_pb2.Message:
    """The broker's send message for a v2 one; V2Error with the precise v2 code when it
    cannot be stored."""
    sp = pb.system_properties
    if sp.body_encoding == D.GZIP:
        body = zlib.decompress(pb.body, wbits=31)
    else:
        body = pb.body
    if not body:
        raise V2Error(D.MESSAGE_BODY_EMPTY, "the message body is empty")
    out = messaging_pb2.Message(topic=pb.topic.name, body=body)
    if sp.HasField("tag"):
        tag = sp.tag
        if not tag.strip() or "|" in tag:
            raise V2Error(D.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is blank or contains '|'")
        _check_name(D.ILLEGAL_MESSAGE_TAG, "tag", tag)
        out.tag = tag
    for key in sp.keys:
        if not key or key != "".join(key.split()):
            raise V2Error(D.ILLEGAL_MESSAGE_KEY, f"key {key!r} is empty or contains blanks")
        _check_name(D.ILLEGAL_MESSAGE_KEY, "key", key)
        out.keys.append(key)
    for name, value in pb.user_properties.items():
        if not name or name in _HIDDEN_PROPERTIES:
            raise V2Error(D.ILLEGAL_MESSAGE_PROPERTY_KEY,
                          f"user property {name!r} is empty or a reserved system property")
        _check_name(D.ILLEGAL_MESSAGE_PROPERTY_KEY, "user property", name)
        _check_name(D.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {name} value", value)
        out.user_properties[name] = value
    out_sp = out.system_properties
    if sp.message_id:
        _check_name(D.ILLEGAL_MESSAGE_ID, "message id", sp.message_id)
        out_sp.message_id = sp.message_id
    if sp.HasField("born_timestamp"):
        out_sp.born_timestamp = timestamp_ms(sp.born_timestamp)
    if sp.HasField("message_group"):
        group = sp.message_group
        if not group.strip():
            raise V2Error(D.ILLEGAL_MESSAGE_GROUP, "the message group is blank")
        _check_name(D.ILLEGAL_MESSAGE_GROUP, "message group", group)
        out_sp.message_group = group
    if sp.HasField("delivery_timestamp"):
        if sp.HasField("message_group"):
            raise V2Error(D.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                          "a message has a message group or a delivery timestamp, not both")
        deliver_ms = timestamp_ms(sp.delivery_timestamp)
        if deliver_ms > now_ms:  # proxy/timer.py delivers it then
            out.user_properties[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    if sp.message_type == D.TRANSACTION:
        if sp.HasField("message_group") or sp.HasField("delivery_timestamp"):
            raise V2Error(D.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a transactional message "
                          "has no message group and no delivery timestamp")
        # A half message; its producer group is the topic, as RocketMQ's proxy does (the
        # broker's check asks the producers publishing to the topic).
        out_sp.transaction_type = messaging_pb2.TRANSACTION_PREPARED_TYPE
        out_sp.producer_group = pb.topic.name
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = max(1, duration_ms(sp.orphaned_transaction_recovery_duration) // 1000)
            out_sp.reserved_properties[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)
    if sp.HasField("lite_topic") or sp.HasField("priority"):
        raise V2Error(D.UNSUPPORTED,
                      "lite topics and priority messages are not served by this broker")
    return out


# -- receive -----------------------------------------------------------------------------
def message_type_of(props: dict[str, str]) -> int:
    if props.get(MessageProperty.TRAN_MSG) == "true":
        return D.TRANSACTION
    if PROPERTY_SHARDING_KEY in props:
        return D.FIFO
    if PROPERTY_TIMER_DELIVER_MS in props or MessageProperty.DELAY in props:
        return D.DELAY
    return D.NORMAL


def _body_digest(body: bytes) -> D.Digest:
    return D.Digest(type=D.CRC32, checksum=f"{zlib.crc32(body):08X}")


def _host_text(host: tuple[str, int], with_port: bool) -> str:
    return format_host(host) if with_port else host[0]


def message_to_v2(ext: MessageExt, *, receipt_handle: str, attempt: int,
                  invisible_ms: int) -> D.Message:
    """A stored message as a v2 consumer receives it."""
    props = ext.properties
    sp = D.SystemProperties(
        keys=ext.keys,
        message_id=props.get(MessageProperty.UNIQ_KEY) or ext.msg_id,
        body_digest=_body_digest(ext.body),
        body_encoding=D.IDENTITY,
        message_type=message_type_of(props),  # type: ignore[arg-type]
        born_timestamp=to_timestamp(ext.born_timestamp),
        born_host=_host_text(ext.born_host, with_port=False),
        store_timestamp=to_timestamp(ext.store_timestamp),
        store_host=_host_text(ext.store_host, with_port=True),
        receipt_handle=receipt_handle,
        queue_id=ext.queue_id,
        queue_offset=ext.queue_offset,
        invisible_duration=to_duration(invisible_ms),
        delivery_attempt=attempt,
    )
    tag = props.get(MessageProperty.TAGS)
    if tag:
        sp.tag = tag
    group = props.get(PROPERTY_SHARDING_KEY)
    if group:
        sp.message_group = group
    deliver = props.get(PROPERTY_TIMER_DELIVER_MS, "")
    if deliver.isdigit():
        sp.delivery_timestamp.CopyFrom(to_timestamp(int(deliver)))
    return D.Message(
        topic=D.Resource(name=ext.topic),
        user_properties={k: v for k, v in props.items() if k not in _HIDDEN_PROPERTIES},
        system_properties=sp,
        body=ext.body,
    )


def proto_message_to_v2(pb: messaging_pb2.Message) -> D.Message:
    """A message the broker hands out in its own protocol (a transaction check's half) as
    a v2 message."""
    psp = pb.system_properties
    sp = D.SystemProperties(
        keys=list(pb.keys), message_id=psp.message_id,
        body_digest=_body_digest(pb.body),
        body_encoding=D.IDENTITY, message_type=D.TRANSACTION,
        born_timestamp=to_timestamp(psp.born_timestamp),
        born_host=psp.born_host.rpartition(":")[0].strip("[]") or psp.born_host,
        store_timestamp=to_timestamp(psp.store_timestamp), store_host=psp.store_host,
        queue_id=psp.queue_id, queue_offset=psp.queue_offset)
    if pb.tag:
        sp.tag = pb.tag
    return D.Message(topic=D.Resource(name=pb.topic), user_properties=dict(pb.user_properties),
                     system_properties=sp, body=pb.body)


def encode_transaction_id(commit_log_offset: int, queue_offset: int) -> str:
    """What a v2 producer's EndTransaction names: the half's commitlog and queue offsets."""
    return f"{commit_log_offset:016X}{queue_offset:016X}"


def decode_transaction_id(text: str) -> tuple[int, int]:
    if len(text) != 32:
        raise V2Error(D.INVALID_TRANSACTION_ID,
                      f"transaction id {text[:64]!r} is not one this broker hands out")
    try:
        return int(text[:16], 16), int(text[16:], 16)
    except ValueError:
        raise V2Error(D.INVALID_TRANSACTION_ID,
                      f"transaction id {text[:64]!r} is not one this broker hands out") from None


# -- receipt handles ---------------------------------------------------------------------
HANDLE_VERSION = "v1"


@dataclasses.dataclass(frozen=True)
class ReceiptHandle:
    """Which delivery of which message: the broker, queue and queue offset, the delivery
    attempt it was handed out with, and its deadline then (for the client's eyes only).

    Text form: `v1 BROKER QUEUE_ID OFFSET ATTEMPT DEADLINE_MS` (fields space-separated, as
    RocketMQ's own handles; broker names have no blanks)."""

    broker_name: str
    queue_id: int
    offset: int
    attempt: int
    deadline_ms: int

    def encode(self) -> str:
        return (f"{HANDLE_VERSION} {self.broker_name} {self.queue_id} {self.offset} "
                f"{self.attempt} {self.deadline_ms}")

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        parts = text.split(" ")
        if len(parts) != 6 or parts[0] != HANDLE_VERSION or not all(
                p.isdigit() for p in parts[2:]):
            raise V2Error(D.INVALID_RECEIPT_HANDLE,
                          f"receipt handle {text[:120]!r} is not one this broker hands out")
        return cls(parts[1], int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5]))


# -- endpoints ---------------------------------------------------------------------------
def endpoints_of(addr: str) -> D.Endpoints:
    """`host:port` (or `[v6]:port`) as v2 Endpoints."""
    host, _, port = addr.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        scheme = D.IPv6 if ipaddress.ip_address(host).version == 6 else D.IPv4
    except ValueError:
        scheme = D.DOMAIN_NAME
    return D.Endpoints(scheme=scheme, addresses=[D.Address(host=host, port=int(port))])
