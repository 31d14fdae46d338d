"""Reads of the store (SPEC §2.8): getMessage with every status, lookups, offset for time."""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
from typing import TYPE_CHECKING, Protocol

from common import native
from common.codec import (
    INT,
    STORE_TIMESTAMP_HEAD,
    CorruptRecord,
    MessageExt,
    decode_offset_msg_id,
    decode_record,
    record_property_values,
    record_store_timestamp,
    tags_code,
)
from store.constants import CQ_STORE_UNIT_SIZE, BrokerRole, GetMessageStatus
from store.consume_queue import BLANK_SIZE, ENTRY

if TYPE_CHECKING:
    from store.message_store import DefaultMessageStore

log = logging.getLogger(__name__)

# Consumer lag in bytes (consume stats): summed exactly up to this many entries.
LAG_BYTES_EXACT_MAX = 1024
_ENTRY_SIZE = struct.Struct(">8xi8x")  # a consume-queue entry's size field
# A filtered getMessage scans up to this many consume-queue entries for its matches
# (RocketMQ's maxFilterMessageCount: 16000 bytes of entries).
MAX_FILTER_MESSAGE_COUNT = 800


class MessageFilter(Protocol):
    """What getMessage asks of a subscription (RocketMQ's MessageFilter): first by the
    consume queue's tags code, then by the record itself. `filters` False: takes all.
    `codes`: the tags codes a match must have (None: any)."""

    filters: bool
    codes: frozenset[int] | None

    def matches_record(self, record: bytes) -> bool: ...


class TagFilter:
    """A subscription expression: `*` (everything) or `TagA || TagB`."""

    def __init__(self, expression: str | None) -> None:
        expr = (expression or "*").strip()
        if expr in ("", "*"):
            self.tags: frozenset[bytes] | None = None
            self.codes: frozenset[int] = frozenset()
        else:
            tags = frozenset(t.strip() for t in expr.split("||") if t.strip())
            self.tags = frozenset(t.encode() for t in tags)
            self.codes = frozenset(tags_code(t) for t in tags)
        self.filters = self.tags is not None

    def matches_record(self, record: bytes) -> bool:
        """The exact tag, read from the record's properties (equal codes are not equal tags)."""
        if self.tags is None:
            return True
        return _record_tags(record) in self.tags


_TAGS = (b"TAGS",)


def _record_tags(record: bytes) -> bytes | None:
    """The TAGS property of one record, read without decoding the rest of it."""
    values = native.lib.property_values(record, _TAGS) if native.lib is not None else None
    return (values or record_property_values(record, _TAGS))[0]


@dataclasses.dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[bytes] = dataclasses.field(default_factory=list)  # raw records
    queue_offsets: list[int] = dataclasses.field(default_factory=list)
    suggest_pulling_from_slave: bool = False
    buffer_total_size: int = 0

    def decoded(self) -> list[MessageExt]:
        return [decode_record(m, 0, check_crc=False) for m in self.messages]


_TOTAL_MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _correct(store: DefaultMessageStore, old: int, new: int) -> int:
    # A slave keeps the consumer's offset: it may just be behind its master.
    return old if store.role is BrokerRole.SLAVE else new


def get_message(store: DefaultMessageStore, group: str, topic: str, queue_id: int, offset: int,
                max_msg_nums: int, message_filter: MessageFilter | None = None
                ) -> GetMessageResult:
    store.get_count += 1
    if message_filter is not None and not message_filter.filters:
        message_filter = None
    cq = store.queues.find(topic, queue_id)
    if cq is None:
        return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, _correct(store, offset, 0),
                                0, 0)
    min_offset = cq.min_offset_in_queue
    max_offset = cq.max_offset_in_queue
    S = GetMessageStatus

    def result(status: GetMessageStatus, next_offset: int) -> GetMessageResult:
        return GetMessageResult(status, next_offset, min_offset, max_offset)

    if max_offset == 0:
        return result(S.NO_MESSAGE_IN_QUEUE, _correct(store, offset, 0))
    if offset < min_offset:
        return result(S.OFFSET_TOO_SMALL, _correct(store, offset, min_offset))
    if offset == max_offset:
        return result(S.OFFSET_OVERFLOW_ONE, offset)
    if offset > max_offset:
        return result(S.OFFSET_OVERFLOW_BADLY,
                      _correct(store, offset, min_offset if min_offset == 0 else max_offset))

    cfg = store.config
    max_count = min(max(1, max_msg_nums), cfg.max_transfer_count_on_message_in_memory)
    max_bytes = cfg.max_transfer_bytes_on_message_in_memory
    entries = cq.read_entries(
        offset, max(max_count, MAX_FILTER_MESSAGE_COUNT) if message_filter else max_count)
    if not entries:
        # The consume-queue file for this offset is gone: go to the start of the next one.
        per_file = cq.file_size // CQ_STORE_UNIT_SIZE
        return result(S.OFFSET_FOUND_NULL,
                      _correct(store, offset, (offset // per_file + 1) * per_file))
    commitlog = store.commitlog
    min_phy = commitlog.min_offset
    out = GetMessageResult(S.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
    messages = out.messages
    queue_offsets = out.queue_offsets
    index = offset
    total = 0
    last_phy = 0
    status = S.NO_MATCHED_MESSAGE
    codes = message_filter.codes if message_filter is not None else None
    matches_record = message_filter.matches_record if message_filter is not None else None
    # The commitlog file of the last record read, its start and committed end: consecutive
    # records are sliced from it without looking the file up again (CommitLog.read).
    files = commitlog.queue
    mm = None
    base = limit = 0
    for phy, size, code in ENTRY.iter_unpack(entries):
        if len(messages) >= max_count or (messages and total + size > max_bytes):
            break
        index += 1
        if size == BLANK_SIZE:
            continue
        last_phy = phy
        if phy < min_phy:
            status = S.MESSAGE_WAS_REMOVING
            continue
        if codes is not None and code not in codes:
            continue
        pos = phy - base
        if mm is None or pos < 0 or pos + size > limit:
            mf = files.find_by_offset(phy)
            if mf is None:
                status = S.MESSAGE_WAS_REMOVING
                continue
            mm, base, limit = mf.mm, mf.file_from_offset, mf.committed_position
            pos = phy - base
            if pos + size > limit:  # not committed (or cut short): as CommitLog.read
                mm = None
                status = S.MESSAGE_WAS_REMOVING
                continue
        try:
            record = mm[pos:pos + size]
        except ValueError:  # the file was deleted while reading
            mm = None
            status = S.MESSAGE_WAS_REMOVING
            continue
        if matches_record is not None and not matches_record(record):
            continue
        messages.append(record)
        queue_offsets.append(index - 1)
        total += size
    out.next_begin_offset = index
    out.buffer_total_size = total
    if messages:
        out.status = S.FOUND
    else:
        out.status = status
    behind = commitlog.max_offset - last_phy
    out.suggest_pulling_from_slave = (
        behind > _TOTAL_MEMORY * cfg.access_message_in_memory_max_ratio // 100)
    store.disk_fall_behind[group] = behind
    return out


def look_message_by_offset(store: DefaultMessageStore, commit_log_offset: int,
                           size: int = 0) -> MessageExt | None:
    """The record at a commitlog offset, or None when there is none (or it is corrupt)."""
    commitlog = store.commitlog
    if size <= 0:
        head = commitlog.read(commit_log_offset, 4)
        if len(head) < 4:
            return None
        (size,) = INT.unpack(head)
        if size <= 0:
            return None
    record = commitlog.read(commit_log_offset, size)
    if len(record) != size:
        return None
    try:
        msg = decode_record(record, 0, check_crc=True)
    except CorruptRecord:
        return None
    return msg if msg.commit_log_offset == commit_log_offset else None


def look_message_by_msg_id(store: DefaultMessageStore, msg_id: str) -> MessageExt | None:
    """By offsetMsgId (store host + commitlog offset); ValueError when it is not one."""
    _, offset = decode_offset_msg_id(msg_id)
    return look_message_by_offset(store, offset)


def query_message(store: DefaultMessageStore, topic: str, key: str, max_num: int,
                  begin_ms: int = 0, end_ms: int = 2**62) -> list[MessageExt]:
    """Messages of `topic` whose UNIQ_KEY or one of KEYS is `key`, newest first."""
    out: list[MessageExt] = []
    seen: set[int] = set()
    for offset in store.index.query_offsets(topic, key, max_num * 4, begin_ms, end_ms):
        if offset in seen:
            continue
        seen.add(offset)
        msg = look_message_by_offset(store, offset)
        if msg is None or msg.topic != topic:
            continue
        if msg.uniq_key == key or key in msg.keys:
            out.append(msg)
            if len(out) >= max_num:
                break
    return out


def get_message_store_timestamp(store: DefaultMessageStore, topic: str, queue_id: int,
                                queue_offset: int) -> int:
    """Store time of the message at a queue offset; -1 when there is none. Reads the
    record's head only (no body, no CRC): consume stats ask this for every queue."""
    cq = store.queues.find(topic, queue_id)
    entry = cq.get_entry(queue_offset) if cq else None
    if entry is None or entry[1] == BLANK_SIZE:
        return -1
    head = store.commitlog.read(entry[0], min(entry[1], STORE_TIMESTAMP_HEAD))
    stamp = record_store_timestamp(head, entry[0])
    return -1 if stamp is None else stamp


def get_queue_bytes(store: DefaultMessageStore, topic: str, queue_id: int, begin: int,
                    end: int, exact_max: int = LAG_BYTES_EXACT_MAX) -> tuple[int, bool]:
    """Bytes of the messages at queue offsets [begin, end) and whether that is exact: the
    sizes of up to `exact_max` consume-queue entries are summed; past that, the mean of
    those times the count (a consumer lag of millions is not read whole)."""
    cq = store.queues.find(topic, queue_id)
    begin = max(begin, cq.min_offset_in_queue) if cq else begin
    count = end - begin
    if cq is None or count <= 0:
        return 0, True
    total = summed = blanks = 0
    index = begin
    while summed < min(count, exact_max):
        raw = cq.read_entries(index, min(count, exact_max) - summed)
        if not raw:
            break
        for (size,) in _ENTRY_SIZE.iter_unpack(raw):
            if size == BLANK_SIZE:
                blanks += 1
            else:
                total += size
        n = len(raw) // CQ_STORE_UNIT_SIZE
        summed += n
        index += n
    if summed >= count:
        return total, True
    messages = summed - blanks
    return (total * count // messages if messages else 0), False


def get_offset_in_queue_by_time(store: DefaultMessageStore, topic: str, queue_id: int,
                                timestamp_ms: int) -> int:
    """The first queue offset whose message was stored at or after `timestamp_ms`
    (the max offset when every message is older)."""
    cq = store.queues.find(topic, queue_id)
    if cq is None:
        return 0
    lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
    while lo < hi:
        mid = (lo + hi) // 2
        ts = get_message_store_timestamp(store, topic, queue_id, mid)
        if ts < 0 or ts < timestamp_ms:  # removed or blank: treat as older
            lo = mid + 1
        else:
            hi = mid
    return lo


