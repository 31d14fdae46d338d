"""Store constants and status names, as RocketMQ names them (SPEC §2)."""

from __future__ import annotations

import enum

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8  # TOTALSIZE + MAGICCODE of the end-of-file blank
CQ_STORE_UNIT_SIZE = 20  # commitlog offset (8) | size (4) | tags code (8)
CQ_ENTRIES_PER_FILE = 300_000

MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32_767
TOPIC_PATTERN = r"^[%|a-zA-Z0-9_-]+\Z"  # \Z: "$" also matches before a final newline

# Reserved system topics: only the broker itself writes to them.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
SYSTEM_TOPICS = frozenset({SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC})

# Delay levels 1..18 (SPEC §7): RocketMQ's default messageDelayLevel.
MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """`messageDelayLevel` ("1s 5s ... 2h", units s m h d) -> milliseconds per level."""
    levels = []
    for item in text.split():
        unit = _DELAY_UNITS_MS.get(item[-1:])
        if unit is None or not item[:-1].isdigit() or int(item[:-1]) == 0:
            raise ValueError(f"bad delay level {item!r} in messageDelayLevel {text!r} "
                             "(want a positive number and a unit of s, m, h or d)")
        levels.append(int(item[:-1]) * unit)
    if not levels:
        raise ValueError("messageDelayLevel has no levels")
    return tuple(levels)


DELAY_LEVELS_MS = parse_delay_levels(MESSAGE_DELAY_LEVEL)


class SysFlag(enum.IntFlag):
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20


TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0


class MessageProperty:
    TAGS = "TAGS"
    KEYS = "KEYS"
    UNIQ_KEY = "UNIQ_KEY"
    DELAY = "DELAY"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    KEY_SEPARATOR = " "


class PutMessageStatus(enum.Enum):
    # Enum's own __hash__ is Python code (hash of the name): every set or dict lookup of a
    # put's status ran it, four times a batch on the broker's send path. Members are
    # singletons compared by identity, so identity's hash (C) agrees with equality.
    __hash__ = object.__hash__

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class FlushDiskType(enum.Enum):
    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class BrokerRole(enum.Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"
