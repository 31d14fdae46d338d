"""Pure builders of the messages of a transaction (RocketMQ's TransactionalMessageBridge and
EndTransactionProcessor): no store, no I/O."""

from __future__ import annotations

import dataclasses
import enum

from common.codec import MessageExt
from common.constants import (
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    TRANSACTION_TYPE_MASK,
    MessageProperty,
    SysFlag,
)
from store.message import Message

# TransactionalMessageUtil: the system consumer group whose offsets on the half and op
# topics are the check service's progress, and the tag of op records.
CID_RMQ_SYS_TRANS = "CID_RMQ_SYS_TRANS"
REMOVE_TAG = "d"
HALF_QUEUE_ID = 0
# MessageConst names.
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
TRAN_MSG_TRUE = "true"


class LocalTransactionState(enum.Enum):
    """A producer's answer (EndTransaction commit_or_rollback): NOT_TYPE means unknown."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


def immunity_seconds(text: str) -> int:
    """CHECK_IMMUNITY_TIME_IN_SECONDS as sent; ValueError when it is not a count of seconds."""
    if not text.isdigit() or int(text) > 10**9:
        raise ValueError(f"{PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS} {text!r} is not a "
                         "number of seconds")
    return int(text)


def to_half_message(msg: Message, producer_group: str) -> Message:
    """A prepared message as it is stored (parseHalfMessageInner): under the half topic,
    queue 0, its real topic and queue in REAL_TOPIC / REAL_QID, TRAN_MSG and PGROUP set and
    the transaction bits of its SYSFLAG clear, so that the half queue indexes it."""
    props = dict(msg.properties)
    props[MessageProperty.TRAN_MSG] = TRAN_MSG_TRUE
    props[MessageProperty.PGROUP] = producer_group
    props[MessageProperty.REAL_TOPIC] = msg.topic
    props[MessageProperty.REAL_QID] = str(msg.queue_id)
    return dataclasses.replace(msg, topic=RMQ_SYS_TRANS_HALF_TOPIC, queue_id=HALF_QUEUE_ID,
                               properties=props,
                               sys_flag=msg.sys_flag & ~TRANSACTION_TYPE_MASK)


def _copy(ext: MessageExt, *, topic: str, queue_id: int, properties: dict[str, str],
          sys_flag: int, prepared_transaction_offset: int) -> Message:
    return Message(
        topic=topic, body=ext.body, properties=properties, queue_id=queue_id, flag=ext.flag,
        # The host-kind bits are the store's to set for the new record.
        sys_flag=sys_flag & ~int(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6),
        born_timestamp=ext.born_timestamp, born_host=ext.born_host,
        reconsume_times=ext.reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset)


def check_times(ext: MessageExt) -> int:
    text = ext.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0")
    return int(text) if text.isdigit() else 0


def renewed_half(ext: MessageExt, times: int) -> Message:
    """The copy a check puts at the end of the half queue (renewHalfMessageInner), with the
    number of checks so far; born time kept, so a half is checked every interval from then."""
    props = dict(ext.properties)
    props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times)
    return _copy(ext, topic=ext.topic, queue_id=ext.queue_id, properties=props,
                 sys_flag=ext.sys_flag, prepared_transaction_offset=0)


def real_topic_and_queue(ext: MessageExt) -> tuple[str, int]:
    """ValueError when the half has no usable REAL_TOPIC / REAL_QID."""
    topic = ext.properties.get(MessageProperty.REAL_TOPIC, "")
    qid = ext.properties.get(MessageProperty.REAL_QID, "")
    if not topic or not qid.isdigit():
        raise ValueError(f"half message at {ext.commit_log_offset} has no real topic / queue")
    return topic, int(qid)


def final_message(ext: MessageExt) -> Message:
    """What a committed half becomes (endMessageTransaction): its real topic and queue, its
    properties but REAL_TOPIC / REAL_QID / TRAN_MSG (UNIQ_KEY kept: the same msgId), SYSFLAG
    COMMIT and the half's commitlog offset as PREPARED TRANSACTION OFFSET."""
    topic, queue_id = real_topic_and_queue(ext)
    props = dict(ext.properties)
    for name in (MessageProperty.REAL_TOPIC, MessageProperty.REAL_QID,
                 MessageProperty.TRAN_MSG):
        props.pop(name, None)
    sys_flag = (ext.sys_flag & ~TRANSACTION_TYPE_MASK) | int(SysFlag.TRANSACTION_COMMIT)
    return _copy(ext, topic=topic, queue_id=queue_id, properties=props, sys_flag=sys_flag,
                 prepared_transaction_offset=ext.commit_log_offset)


def op_message(half_queue_offset: int, now_ms: int, store_host: tuple[str, int]) -> Message:
    """The op record of an ended half: tag "d", body its half-queue offset in decimal."""
    return Message(topic=RMQ_SYS_TRANS_OP_HALF_TOPIC, body=str(half_queue_offset).encode(),
                   properties={MessageProperty.TAGS: REMOVE_TAG}, queue_id=HALF_QUEUE_ID,
                   born_timestamp=now_ms, born_host=store_host)


def op_half_offsets(body: bytes) -> list[int]:
    """The half-queue offsets an op record names (RocketMQ 5 may join several with ',');
    ValueError when the body is not that."""
    text = body.decode("ascii", errors="replace")
    offsets = [int(part) for part in text.split(",") if part.strip()]
    if not offsets:
        raise ValueError(f"op record body {text!r} names no half offset")
    return offsets


def is_committed_final(ext: MessageExt, transaction_id: str) -> bool:
    """A message of a real topic that a commit of `transaction_id` put there."""
    return (ext.sys_flag & TRANSACTION_TYPE_MASK == int(SysFlag.TRANSACTION_COMMIT)
            and ext.uniq_key == transaction_id)
