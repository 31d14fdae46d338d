"""Pure codecs of the store: commitlog records (SPEC §2.2), properties, hosts, message ids.

Everything here works on bytes / memoryview and touches no file.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import re
import struct
from typing import Any

import crc32c

from store.constants import (
    BLANK_MAGIC_CODE,
    DELAY_LEVELS_MS,
    MESSAGE_MAGIC_CODE,
    SCHEDULE_TOPIC,
    TOPIC_PATTERN,
)

PROPERTY_SEPARATOR = "\x01"  # between name and value
PROPERTIES_SEPARATOR = "\x02"  # after each pair

# TOTALSIZE .. BODY length, by (born host v6, store host v6).
_HEADER_FORMAT = ">iiiiiqqiq{born}sq{store}siqi"
HEADER_STRUCTS = {
    (born6, store6): struct.Struct(
        _HEADER_FORMAT.format(born=20 if born6 else 8, store=20 if store6 else 8)
    )
    for born6 in (False, True)
    for store6 in (False, True)
}
HEADER_V4 = HEADER_STRUCTS[(False, False)]
# Keyed by sys_flag & 0x30 (born host v6 0x10, store host v6 0x20): plain ints on hot paths.
_HEADER_BY_FLAGS = {
    0x00: HEADER_STRUCTS[(False, False)],
    0x10: HEADER_STRUCTS[(True, False)],
    0x20: HEADER_STRUCTS[(False, True)],
    0x30: HEADER_STRUCTS[(True, True)],
}
# TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP
PREFIX = struct.Struct(">iiiiiqqiq")
SIZE_MAGIC = struct.Struct(">ii")
INT = struct.Struct(">i")
LONG = struct.Struct(">q")
SHORT = struct.Struct(">h")


# A record's first bytes up to its STORETIMESTAMP, with an IPv6 born host (the longest).
STORE_TIMESTAMP_HEAD = PREFIX.size + 20 + LONG.size


def record_store_timestamp(head: bytes | memoryview, phy_offset: int | None = None
                           ) -> int | None:
    """STORETIMESTAMP of the message record starting `head` (its first
    STORE_TIMESTAMP_HEAD bytes, or fewer when the born host is IPv4); None when `head` is
    not a message record (an end-of-file blank, zeros, a torn head) or, given `phy_offset`,
    not the record stored there."""
    if len(head) < PREFIX.size:
        return None
    _, magic, _, _, _, _, physical_offset, sys_flag, _ = PREFIX.unpack_from(head)
    if magic != MESSAGE_MAGIC_CODE or phy_offset not in (None, physical_offset):
        return None
    pos = PREFIX.size + (20 if sys_flag & 0x10 else 8)
    if len(head) < pos + LONG.size:
        return None
    return int(LONG.unpack_from(head, pos)[0])


class CorruptRecord(ValueError):
    """The bytes at an offset are not a valid record (bad magic, size or CRC)."""


def body_crc(body: bytes | memoryview) -> int:
    return crc32c.crc32c(body) & 0x7FFFFFFF


def java_string_hash(s: str) -> int:
    """Java's String.hashCode() (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """Consume-queue tags code: the tag's Java hashCode sign-extended, 0 when there is no tag."""
    if not tags:
        return 0
    return java_string_hash(tags)


def encode_properties(properties: dict[str, str]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items()).encode()


def decode_properties(data: bytes | memoryview) -> dict[str, str]:
    if not data:
        return {}
    out: dict[str, str] = {}
    for pair in bytes(data).decode().split(PROPERTIES_SEPARATOR):
        if pair:
            name, _, value = pair.partition(PROPERTY_SEPARATOR)
            out[name] = value
    return out


@functools.lru_cache(maxsize=1024)
def encode_host(host: str, port: int) -> bytes:
    """IPv4 4 + port 4, or IPv6 16 + port 4. Host names resolve to 127.0.0.1's form only if IP."""
    addr = ipaddress.ip_address(host)
    return addr.packed + port.to_bytes(4, "big")


def decode_host(data: bytes | memoryview) -> tuple[str, int]:
    data = bytes(data)
    return str(ipaddress.ip_address(data[:-4])), int.from_bytes(data[-4:], "big")


def header_struct(sys_flag: int) -> struct.Struct:
    return _HEADER_BY_FLAGS[sys_flag & 0x30]


_SYS_FLAG_AT = 36  # TOTALSIZE .. PHYSICALOFFSET come first


def record_properties(record: bytes | memoryview) -> bytes:
    """The encoded PROPERTIES field (`name\\x01value\\x02...`) of one whole record, without
    decoding the rest; b"" when the record is too short to hold it."""
    if len(record) < PREFIX.size:
        return b""
    p = _HEADER_BY_FLAGS[int.from_bytes(record[_SYS_FLAG_AT:_SYS_FLAG_AT + 4]) & 0x30].size
    p += int.from_bytes(record[p - 4:p], signed=True)  # BODY
    if not 0 < p < len(record):
        return b""
    p += 1 + record[p]  # TOPIC
    end = p + 2 + int.from_bytes(record[p:p + 2])
    return bytes(record[p + 2:end]) if end <= len(record) else b""


def property_values(properties: bytes, names: tuple[bytes, ...]) -> tuple[bytes | None, ...]:
    """The values of `names` (UTF-8) in encoded properties, None for a missing one."""
    data = b"\x02" + properties
    out: list[bytes | None] = []
    for name in names:
        s = data.find(b"\x02" + name + b"\x01")
        if s < 0:
            out.append(None)
            continue
        s += len(name) + 2
        e = data.find(b"\x02", s)
        out.append(data[s:] if e < 0 else data[s:e])
    return tuple(out)


def record_property_values(record: bytes | memoryview, names: tuple[bytes, ...]
                           ) -> tuple[bytes | None, ...]:
    """property_values of a whole record's PROPERTIES field (the filter of a SQL92 pull)."""
    return property_values(record_properties(record), names)


def encode_tail(topic: bytes, properties: bytes) -> bytes:
    """TOPIC length + topic + PROPERTIES length + properties (fields 16-17)."""
    return b"".join((bytes((len(topic),)), topic, SHORT.pack(len(properties)), properties))


def encode_record(
    *,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes,
    topic: bytes,
    properties: bytes,
) -> bytes:
    """One whole commitlog record. The append path uses the same layout with parts pre-encoded."""
    header = header_struct(sys_flag)
    tail = encode_tail(topic, properties)
    total = header.size + len(body) + len(tail)
    return b"".join(
        (
            header.pack(
                total,
                MESSAGE_MAGIC_CODE,
                body_crc(body),
                queue_id,
                flag,
                queue_offset,
                physical_offset,
                sys_flag,
                born_timestamp,
                born_host,
                store_timestamp,
                store_host,
                reconsume_times,
                prepared_transaction_offset,
                len(body),
            ),
            body,
            tail,
        )
    )


def encode_blank(space_left: int) -> bytes:
    """End-of-file blank: TOTALSIZE = space left, MAGICCODE = BLANK_MAGIC_CODE."""
    return SIZE_MAGIC.pack(space_left, BLANK_MAGIC_CODE)


@dataclasses.dataclass(slots=True)
class MessageExt:
    """A decoded commitlog record."""

    store_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        return self.properties.get("KEYS", "").split()

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")

    @property
    def msg_id(self) -> str:
        """offsetMsgId: store host + commitlog offset as upper-case hex."""
        return encode_offset_msg_id(self.store_host, self.commit_log_offset)


def decode_record(buf: bytes | memoryview, pos: int = 0, check_crc: bool = True) -> MessageExt:
    """Decodes the record at `pos`; raises CorruptRecord when it does not check out."""
    limit = len(buf)
    if pos + PREFIX.size > limit:
        raise CorruptRecord(f"truncated header at {pos}")
    total, magic, crc, queue_id, flag, qoff, phys, sys_flag, born_ts = PREFIX.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE:
        raise CorruptRecord(f"bad magic code {magic:#x} at {pos}")
    header = header_struct(sys_flag)
    if total < header.size + 1 + 2 or pos + total > limit:
        raise CorruptRecord(f"bad total size {total} at {pos}")
    fields = header.unpack_from(buf, pos)
    born_host, store_ts, store_host, reconsume, prepared, body_len = fields[9:15]
    p = pos + header.size
    if body_len < 0 or p + body_len + 3 > pos + total:
        raise CorruptRecord(f"bad body length {body_len} at {pos}")
    body = bytes(buf[p : p + body_len])
    p += body_len
    if check_crc and body_crc(body) != crc:
        raise CorruptRecord(f"body CRC mismatch at {pos}")
    topic_len = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode()
    p += 1 + topic_len
    (props_len,) = SHORT.unpack_from(buf, p)
    p += 2
    if props_len < 0 or p + props_len != pos + total:
        raise CorruptRecord(f"bad properties length {props_len} at {pos}")
    return MessageExt(
        store_size=total,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=qoff,
        commit_log_offset=phys,
        sys_flag=sys_flag,
        born_timestamp=born_ts,
        born_host=decode_host(born_host),
        store_timestamp=store_ts,
        store_host=decode_host(store_host),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body=body,
        topic=topic,
        properties=decode_properties(buf[p : p + props_len]),
    )


def encode_offset_msg_id(store_host: tuple[str, int], commit_log_offset: int) -> str:
    return (encode_host(*store_host) + LONG.pack(commit_log_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """offsetMsgId -> ((host, port), commitlog offset); ValueError when it is not one."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as e:
        raise ValueError(f"not an offsetMsgId: {msg_id!r}") from e
    if len(raw) not in (16, 28):
        raise ValueError(f"not an offsetMsgId (length {len(msg_id)}): {msg_id!r}")
    return decode_host(raw[:-8]), LONG.unpack(raw[-8:])[0]


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
    header = _HEADER_BY_FLAGS[flags]
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
