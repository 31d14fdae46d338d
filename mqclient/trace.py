"""Message trace (RocketMQ's client/trace): what producers and consumers did with each
message, written as messages to the trace topic (RMQ_SYS_TRACE_TOPIC unless named) in
RocketMQ's text format, so tools that read RocketMQ traces read these.

A trace record is one line of TraceDataEncoder's format: fields separated by
CONTENT_SPLITOR (\\x01), each record ended by FIELD_SPLITOR (\\x02):

    Pub            timestamp region group topic msgId tags keys storeHost bodyLength
                   costTime msgType offsetMsgId success
    SubBefore      timestamp region group requestId msgId retryTimes keys
    SubAfter       requestId msgId costTime success keys contextCode timestamp group
    EndTransaction timestamp region group topic msgId tags keys storeHost msgType
                   transactionId transactionState fromTransactionCheck

(Java's `null` strings are written `null`, booleans `true` / `false`.) A trace message
holds the records of up to `batch_num` contexts of one traced topic; its KEYS are the
message ids and keys of every record in it, so the broker's index finds a message's trace
by its id (`queryMsgTraceById`) or key without a scan.

Records go to the trace topic through a `TraceDispatcher` (mqclient/trace_dispatcher.py,
RocketMQ's AsyncTraceDispatcher), off the send and consume paths.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

CONTENT_SPLITOR = "\x01"  # TraceConstants.CONTENT_SPLITOR: between the fields of a record
FIELD_SPLITOR = "\x02"  # TraceConstants.FIELD_SPLITOR: after each record
RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"  # TopicValidator.RMQ_SYS_TRACE_TOPIC
DEFAULT_TRACE_REGION_ID = "DefaultRegion"  # MixAll.DEFAULT_TRACE_REGION_ID
PROPERTY_MSG_REGION = "MSG_REGION"  # MessageConst.PROPERTY_MSG_REGION
TRACE_GROUP_NAME_PREFIX = "_INNER_TRACE_PRODUCER"  # TraceConstants.GROUP_NAME_PREFIX
KEY_SEPARATOR = " "


class TraceType(enum.Enum):
    Pub = "Pub"
    Recall = "Recall"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class MessageType(enum.IntEnum):
    """common.message.MessageType: written by its ordinal."""

    Normal_Msg = 0
    Trans_Msg_Half = 1
    Trans_msg_Commit = 2
    Delay_Msg = 3
    Order_Msg = 4


class ConsumeReturnType(enum.IntEnum):
    """ConsumeReturnType: a SubAfter's contextCode is its ordinal."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@dataclasses.dataclass(slots=True)
class TraceBean:
    """TraceBean: one message of a trace context. None strings are written `null`."""

    topic: str | None = ""
    msg_id: str | None = ""
    offset_msg_id: str | None = ""
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = ""
    body_length: int = 0
    msg_type: int = MessageType.Normal_Msg
    retry_times: int = 0
    transaction_id: str | None = None
    transaction_state: str = "UNKNOW"  # LocalTransactionState's name
    from_transaction_check: bool = False
    client_host: str = ""


@dataclasses.dataclass(slots=True)
class TraceContext:
    """TraceContext: one event (a send, a listener call, an end of transaction)."""

    trace_type: TraceType
    timestamp: int  # ms
    region_id: str = DEFAULT_TRACE_REGION_ID
    group: str = ""
    cost_time: int = 0
    success: bool = True
    request_id: str = ""
    context_code: int = 0
    beans: list[TraceBean] = dataclasses.field(default_factory=list)


def java_str(value: object) -> str:
    """A value as Java's StringBuilder.append writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encode_context(ctx: TraceContext) -> tuple[str, list[str]]:
    """TraceDataEncoder.encoderFromContextBean: (the records' text, the keys of the trace
    message: each bean's msgId and its keys)."""
    c = CONTENT_SPLITOR
    t = ctx.trace_type
    parts: list[str] = []
    if t is TraceType.Pub:
        b = ctx.beans[0]
        parts.append(encode_pub(ctx.timestamp, ctx.region_id, ctx.group, b.topic, b.msg_id,
                                b.tags, b.keys, b.store_host, b.body_length, ctx.cost_time,
                                int(b.msg_type), b.offset_msg_id, ctx.success))
    elif t is TraceType.SubBefore:
        for b in ctx.beans:
            parts.append(c.join(map(java_str, (
                t.value, ctx.timestamp, ctx.region_id, ctx.group, ctx.request_id, b.msg_id,
                b.retry_times, b.keys))) + FIELD_SPLITOR)
    elif t is TraceType.SubAfter:
        for b in ctx.beans:  # AccessChannel.LOCAL: with the timestamp and group
            parts.append(c.join(map(java_str, (
                t.value, ctx.request_id, b.msg_id, ctx.cost_time, ctx.success, b.keys,
                ctx.context_code, ctx.timestamp, ctx.group))) + FIELD_SPLITOR)
    elif t is TraceType.EndTransaction:
        b = ctx.beans[0]
        parts.append(c.join(map(java_str, (
            t.value, ctx.timestamp, ctx.region_id, ctx.group, b.topic, b.msg_id, b.tags,
            b.keys, b.store_host, int(b.msg_type), b.transaction_id, b.transaction_state,
            b.from_transaction_check))) + FIELD_SPLITOR)
    elif t is TraceType.Recall:
        b = ctx.beans[0]
        parts.append(c.join(map(java_str, (
            t.value, ctx.timestamp, ctx.region_id, ctx.group, b.topic, b.msg_id,
            ctx.success))) + FIELD_SPLITOR)
    keys: list[str] = []
    for b in ctx.beans:
        keys.append(java_str(b.msg_id))
        if b.keys:
            keys.extend(b.keys.split(KEY_SEPARATOR))
    return "".join(parts), keys


def encode_pub(timestamp: int, region_id: str, group: str, topic: str | None,
               msg_id: str | None, tags: str | None, keys: str | None,
               store_host: str | None, body_length: int, cost_time: int, msg_type: int,
               offset_msg_id: str | None, success: bool) -> str:
    """One Pub record (the fast path of encode_context: one per traced send)."""
    return (f"Pub\x01{timestamp}\x01{region_id}\x01{group}\x01{java_str(topic)}"
            f"\x01{java_str(msg_id)}\x01{java_str(tags)}\x01{java_str(keys)}"
            f"\x01{java_str(store_host)}\x01{body_length}"
            f"\x01{cost_time}\x01{msg_type}\x01{java_str(offset_msg_id)}"
            f"\x01{'true' if success else 'false'}\x02")


def _bool(text: str) -> bool:
    return text.lower() == "true"  # Boolean.parseBoolean


def decode_trace_data(data: str) -> list[TraceContext]:
    """TraceDataEncoder.decoderFromTraceDataString: the contexts of a trace message's body
    (one bean each); ValueError when a record of a known type is malformed."""
    out: list[TraceContext] = []
    for record in data.split(FIELD_SPLITOR):
        line = record.split(CONTENT_SPLITOR)
        kind = line[0]
        if kind == "Pub":
            ctx = TraceContext(TraceType.Pub, int(line[1]), line[2], line[3])
            bean = TraceBean(topic=line[4], msg_id=line[5], tags=line[6], keys=line[7],
                             store_host=line[8], body_length=int(line[9]),
                             msg_type=int(line[11]))
            ctx.cost_time = int(line[10])
            if len(line) == 13:
                ctx.success = _bool(line[12])
            elif len(line) >= 14:
                bean.offset_msg_id = line[12]
                ctx.success = _bool(line[13])
                if len(line) >= 15:
                    bean.client_host = line[14]
        elif kind == "SubBefore":
            ctx = TraceContext(TraceType.SubBefore, int(line[1]), line[2], line[3],
                               request_id=line[4])
            bean = TraceBean(msg_id=line[5], retry_times=int(line[6]), keys=line[7])
        elif kind == "SubAfter":
            ctx = TraceContext(TraceType.SubAfter, 0, request_id=line[1],
                               cost_time=int(line[3]), success=_bool(line[4]))
            bean = TraceBean(msg_id=line[2], keys=line[5])
            if len(line) >= 7:
                ctx.context_code = int(line[6])
            if len(line) >= 9:
                ctx.timestamp, ctx.group = int(line[7]), line[8]
        elif kind == "EndTransaction":
            ctx = TraceContext(TraceType.EndTransaction, int(line[1]), line[2], line[3])
            bean = TraceBean(topic=line[4], msg_id=line[5], tags=line[6], keys=line[7],
                             store_host=line[8], msg_type=int(line[9]),
                             transaction_id=line[10], transaction_state=line[11],
                             from_transaction_check=_bool(line[12]))
        elif kind == "Recall":
            ctx = TraceContext(TraceType.Recall, int(line[1]), line[2], line[3],
                               success=_bool(line[6]))
            bean = TraceBean(topic=line[4], msg_id=line[5])
        else:
            continue
        ctx.beans.append(bean)
        out.append(ctx)
    return out


def now_ms() -> int:
    return int(time.time() * 1000)
