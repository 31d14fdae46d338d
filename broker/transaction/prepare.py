"""The send path's part of transactions: which sends are prepared (half) messages, the
checks RocketMQ makes on them, and the system topics they need."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker.status import RequestError
from broker.transaction.messages import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    TRAN_MSG_TRUE,
    immunity_seconds,
    to_half_message,
)
from common.constants import (
    PERM_READ_WRITE,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
    MessageProperty,
)
from mqproto import common_pb2, messaging_pb2
from store.message import Message

if TYPE_CHECKING:
    from broker.context import BrokerContext

SYSTEM_TOPIC_QUEUE_NUMS = 1  # the half and op topics have queue 0 only
MAX_GROUP_LENGTH = 255  # Validators.CHARACTER_MAX_LENGTH
_SENT_TYPES = frozenset({messaging_pb2.TRANSACTION_NOT_TYPE,
                         messaging_pb2.TRANSACTION_PREPARED_TYPE})


def _illegal(remark: str) -> RequestError:
    return RequestError(common_pb2.MESSAGE_ILLEGAL, remark)


def prepared_group(pbs: Sequence[messaging_pb2.Message], request_group: str, *,
                   batch: bool) -> str | None:
    """The producer group of a prepared send, None when the send is not transactional.
    RequestError (nothing stored) for a transactional batch or delayed message, or one
    without a producer group."""
    # One pass over the send's messages (every send comes here, most have none prepared).
    kinds = {pb.system_properties.transaction_type for pb in pbs}
    if not kinds <= _SENT_TYPES:
        raise _illegal("a producer sends prepared or plain messages; commit and rollback "
                       "are EndTransaction's")
    if messaging_pb2.TRANSACTION_PREPARED_TYPE not in kinds:
        return None
    if batch:
        raise _illegal("a transactional message cannot be batched: send it alone")
    [pb] = pbs
    sp = pb.system_properties
    if sp.delay_time_level > 0:
        raise _illegal("a transactional message cannot be delayed (delay_time_level "
                       f"{sp.delay_time_level})")
    group = request_group or sp.producer_group
    if not group:
        raise _illegal("a transactional message needs its producer group (the check asks it)")
    if len(group) > MAX_GROUP_LENGTH or any(c in group for c in "\x01\x02"):
        raise _illegal(f"producer group {group[:40]!r} is longer than {MAX_GROUP_LENGTH} "
                       "characters or holds a \\x01 / \\x02 separator")
    if sp.producer_group and request_group and sp.producer_group != request_group:
        raise _illegal(f"producer group {sp.producer_group!r} of the message is not the "
                       f"sender's {request_group!r}")
    text = sp.reserved_properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
    if text is not None:
        try:
            immunity_seconds(text)
        except ValueError as e:
            raise _illegal(str(e)) from None
    return group


def mark_prepared(msg: Message, group: str, pb: messaging_pb2.Message) -> Message:
    """TRAN_MSG and PGROUP (and CHECK_IMMUNITY_TIME_IN_SECONDS when sent) on the message:
    the send path stores it as a half message (messages.to_half_message)."""
    msg.properties[MessageProperty.TRAN_MSG] = TRAN_MSG_TRUE
    msg.properties[MessageProperty.PGROUP] = group
    text = pb.system_properties.reserved_properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
    if text is not None:
        msg.properties[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = text
    return msg


def is_prepared(msg: Message) -> bool:
    return msg.properties.get(MessageProperty.TRAN_MSG) == TRAN_MSG_TRUE


async def ensure_system_topics(broker: BrokerContext) -> None:
    """The half and op topics exist from the first half message on (one queue each, as
    RocketMQ creates them)."""
    created = False
    for topic in (RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC):
        if broker.topics.get(topic) is None:
            broker.topics.create_system_topic(topic, SYSTEM_TOPIC_QUEUE_NUMS, PERM_READ_WRITE)
            created = True
    if created:
        await broker.topics_changed()


class HalfMessages:
    """The send path's hook for prepared messages (SendProcessor.half_messages, set by the
    controller): which sends are halves, and what the store gets for them."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def producer_group(self, pbs: Sequence[messaging_pb2.Message], request_group: str, *,
                       batch: bool) -> str | None:
        return prepared_group(pbs, request_group, batch=batch)

    async def before_put(self) -> None:
        await ensure_system_topics(self.broker)

    @staticmethod
    def mark(msg: Message, group: str, pb: messaging_pb2.Message) -> Message:
        return mark_prepared(msg, group, pb)

    @staticmethod
    def is_prepared(msg: Message) -> bool:
        return is_prepared(msg)

    @staticmethod
    def stored(msgs: list[Message]) -> list[Message]:
        """Prepared messages as the store keeps them: in the half queue."""
        return [to_half_message(m, m.properties[MessageProperty.PGROUP]) for m in msgs]

