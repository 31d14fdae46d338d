"""Constants of the message format and of the processes' contract, shared by the store,
the broker, the name server and the clients (SPEC §2, as RocketMQ names them)."""

from __future__ import annotations

import enum

MASTER_ID = 0  # MixAll.MASTER_ID: brokerId 0 is a group's master

# Permission bits of brokers, topics and queues (PermName).
PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1
PERM_READ_WRITE = PERM_READ | PERM_WRITE

# TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC: producers of an unknown topic route by its
# queues when the brokers auto-create topics; nobody may send to it.
AUTO_CREATE_TOPIC_KEY_TOPIC = "TBW102"

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194

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


# Printed on stdout once a process serves; mqcluster, tests and scripts wait for them.
BROKER_BOOT_SUCCESS_PREFIX = "The broker["
NAMESRV_BOOT_SUCCESS_MESSAGE = "The Name Server boot success."
CONSOLE_READY_PREFIX = "mqconsole listening on"  # then the console's URL (`mqconsole`)
