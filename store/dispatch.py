"""What the store's dispatch ("reput") needs of a commitlog record: the record checked as a
stored record (sizes, CRC, a valid topic) and the consume-queue / index fields it yields.
Pure functions over bytes / memoryview, like the record codec (common/codec.py) they build on."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import crc32c

from common.codec import (
    HEADER_BY_FLAGS,
    HEADER_V4,
    SHORT,
    SIZE_MAGIC,
    CorruptRecord,
    decode_properties,
    tags_code,
)
from common.constants import (
    BLANK_MAGIC_CODE,
    DELAY_LEVELS_MS,
    MESSAGE_MAGIC_CODE,
    SCHEDULE_TOPIC,
    TOPIC_PATTERN,
)


@dataclasses.dataclass(slots=True)
class DispatchRequest:
    """What the dispatch ("reput") service needs of one record: consume queue and index."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: str
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int


# Topic bytes of records checked so far -> the topic (valid UTF-8 matching TOPIC_PATTERN).
KNOWN_TOPICS: dict[bytes, str] = {}
_TOPIC_RE = re.compile(TOPIC_PATTERN)


def check_record(
    buf: bytes | memoryview, pos: int, check_crc: bool = True
) -> tuple[int, int, int, int, str, tuple[Any, ...], int] | int:
    """Validates the record at `pos` (magic, sizes, BODYCRC; whether PHYSICALOFFSET equals
    the position is left to the caller) without decoding its properties.

    Returns 0 at the end of data (TOTALSIZE 0, or fewer than 8 bytes left), the blank's size
    for an end-of-file blank, or (total size, queue id, queue offset, physical offset, topic,
    header fields, position of the properties) of a valid record. Raises CorruptRecord.
    """
    limit = len(buf)
    if pos + HEADER_V4.size <= limit:  # one unpack for the common IPv4 header
        fields = HEADER_V4.unpack_from(buf, pos)
        total, magic = fields[0], fields[1]
    elif pos + 8 <= limit:
        total, magic = SIZE_MAGIC.unpack_from(buf, pos)
    else:
        return 0
    if magic != MESSAGE_MAGIC_CODE:
        if magic == BLANK_MAGIC_CODE:
            if total != limit - pos:
                raise CorruptRecord(
                    f"end-of-file blank of {total} bytes at {pos}, {limit - pos} left")
            return total
        if total == 0 and magic == 0:
            return 0
        raise CorruptRecord(f"bad magic code {magic & 0xFFFFFFFF:#x} at {pos}")
    if total < HEADER_V4.size + 3 or pos + total > limit:
        raise CorruptRecord(f"bad total size {total} at {pos}")
    flags = fields[7] & 0x30
    header = HEADER_BY_FLAGS[flags]
    if flags:
        fields = header.unpack_from(buf, pos)
    body_len = fields[14]
    p = pos + header.size
    end = pos + total
    if body_len < 0 or p + body_len + 3 > end:
        raise CorruptRecord(f"bad body length {body_len} at {pos}")
    if check_crc and crc32c.crc32c(buf[p : p + body_len]) & 0x7FFFFFFF != fields[2]:
        raise CorruptRecord(f"body CRC mismatch at {pos}")
    p += body_len
    topic_len = buf[p]
    if p + 1 + topic_len + 2 > end:
        raise CorruptRecord(f"bad topic length {topic_len} at {pos}")
    (props_len,) = SHORT.unpack_from(buf, p + 1 + topic_len)
    if props_len < 0 or p + 3 + topic_len + props_len != end:
        raise CorruptRecord(f"bad properties length {props_len} at {pos}")
    raw_topic = bytes(buf[p + 1 : p + 1 + topic_len])
    topic = KNOWN_TOPICS.get(raw_topic)
    if topic is None:
        try:
            topic = raw_topic.decode()
        except UnicodeDecodeError as e:
            raise CorruptRecord(f"topic is not UTF-8 at {pos}") from e
        if not _TOPIC_RE.match(topic):
            raise CorruptRecord(f"invalid topic {topic!r} at {pos}")
        if len(KNOWN_TOPICS) < 100_000:
            KNOWN_TOPICS[raw_topic] = topic
    props_pos = p + 3 + topic_len
    if props_len:
        # No checksum covers the properties: at least they must end a pair and be UTF-8.
        if buf[end - 1] != 2:
            raise CorruptRecord(f"properties do not end with \\x02 at {pos}")
        try:
            str(buf[props_pos:end], "utf-8")
        except UnicodeDecodeError as e:
            raise CorruptRecord(f"properties are not UTF-8 at {pos}") from e
    if fields[3] < 0 or fields[5] < 0:
        raise CorruptRecord(f"negative queue id or queue offset at {pos}")
    return total, fields[3], fields[5], fields[6], topic, fields, props_pos


def parse_dispatch(
    buf: bytes | memoryview, pos: int, check_crc: bool = True,
    delay_levels: tuple[int, ...] = DELAY_LEVELS_MS,
) -> DispatchRequest | int:
    """check_record, plus what the dispatch service needs: tags code, keys, store time.

    Returns 0 at the end of data, the blank's size for an end-of-file blank, or the request.
    """
    checked = check_record(buf, pos, check_crc)
    if isinstance(checked, int):
        return checked
    total, queue_id, queue_offset, phys, topic, fields, props_pos = checked
    return dispatch_request(topic, queue_id, phys, total, fields[10], queue_offset, fields[7],
                            fields[13], buf[props_pos : pos + total], delay_levels)


def dispatch_request(topic: str, queue_id: int, phys: int, total: int, store_ts: int,
                     queue_offset: int, sys_flag: int, prepared_transaction_offset: int,
                     properties: bytes | memoryview,
                     delay_levels: tuple[int, ...] = DELAY_LEVELS_MS) -> DispatchRequest:
    """The dispatch request of a checked record, from its fields and raw properties."""
    props = decode_properties(properties) if len(properties) else {}
    tags = props.get("TAGS")
    code = tags_code(tags) if tags else 0
    if topic == SCHEDULE_TOPIC and "DELAY" in props:
        code = store_ts + delay_level_ms(int(props["DELAY"]), delay_levels)
    return DispatchRequest(topic, queue_id, phys, total, code, store_ts, queue_offset,
                           props.get("KEYS", ""), props.get("UNIQ_KEY"), sys_flag,
                           prepared_transaction_offset)


def delay_level_ms(level: int, delay_levels: tuple[int, ...] = DELAY_LEVELS_MS) -> int:
    """A delayed message's delay; levels past the table take its last one."""
    return delay_levels[max(1, min(level, len(delay_levels))) - 1]
