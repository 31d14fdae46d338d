"""The message record format (SPEC §2.2) as the store keeps it and a pull returns it:
records, properties, hosts, message ids, tag hash codes. Shared by the store, the broker and
the clients; everything here works on bytes / memoryview and touches no file."""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import struct

import crc32c

from common.constants import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
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
HEADER_BY_FLAGS = {
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
    return HEADER_BY_FLAGS[sys_flag & 0x30]


_SYS_FLAG_AT = 36  # TOTALSIZE .. PHYSICALOFFSET come first


def record_properties(record: bytes | memoryview) -> bytes:
    """The encoded PROPERTIES field (`name\\x01value\\x02...`) of one whole record, without
    decoding the rest; b"" when the record is too short to hold it."""
    if len(record) < PREFIX.size:
        return b""
    p = HEADER_BY_FLAGS[int.from_bytes(record[_SYS_FLAG_AT:_SYS_FLAG_AT + 4]) & 0x30].size
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
