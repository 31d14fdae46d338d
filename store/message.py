"""The message a producer hands the store, and the checks it must pass (SPEC §2.2)."""

from __future__ import annotations

import dataclasses
import re

from common.constants import (
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TOPIC_PATTERN,
    MessageProperty,
)
from store.constants import PutMessageStatus

_TOPIC_RE = re.compile(TOPIC_PATTERN)


@dataclasses.dataclass(slots=True)
class Message:
    topic: str
    body: bytes
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    queue_id: int = 0
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageProperty.TAGS)

    @property
    def keys(self) -> list[str]:
        return self.properties.get(MessageProperty.KEYS, "").split()


class IllegalMessage(ValueError):
    """A message the store refuses; `status` is MESSAGE_ILLEGAL or PROPERTIES_SIZE_EXCEEDED."""

    def __init__(self, status: PutMessageStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def topic_problem(topic: str) -> str | None:
    """Why a topic name is not valid, or None."""
    if not topic:
        return "topic is empty"
    if len(topic.encode()) > MAX_TOPIC_LENGTH:
        return f"topic longer than {MAX_TOPIC_LENGTH} bytes"
    if not _TOPIC_RE.match(topic):
        return f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


def is_system_topic(topic: str) -> bool:
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def check_sizes(topic: bytes, properties: bytes, body_len: int, max_message_size: int) -> None:
    if len(topic) > MAX_TOPIC_LENGTH:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                             f"topic longer than {MAX_TOPIC_LENGTH} bytes")
    if len(properties) > MAX_PROPERTIES_LENGTH:
        raise IllegalMessage(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                             f"properties of {len(properties)} bytes exceed "
                             f"{MAX_PROPERTIES_LENGTH}")
    if body_len > max_message_size:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                             f"body of {body_len} bytes exceeds maxMessageSize {max_message_size}")
