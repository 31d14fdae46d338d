"""The commitlog: one append-only sequence of records for all topics (SPEC §2.2, §2.6)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from crc32c import crc32c

from store.codec import (
    _HEADER_BY_FLAGS,
    CorruptRecord,
    DispatchRequest,
    check_record,
    delay_level_ms,
    encode_blank,
    encode_host,
    parse_dispatch,
    tags_code,
)
from store.config import StoreConfig
from store.constants import (
    END_FILE_MIN_BLANK_LENGTH,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    SCHEDULE_TOPIC,
    TRANSACTION_TYPE_MASK,
    PutMessageStatus,
    SysFlag,
)
from store.mapped_file import AllocateMappedFileService, MappedFile, MappedFileQueue
from store.message import IllegalMessage, Message, check_sizes

log = logging.getLogger(__name__)

ScannedRecord = tuple[memoryview, int, int, int, int, int, str, int]
_NO_QUEUE_OFFSET = (int(SysFlag.TRANSACTION_PREPARED), int(SysFlag.TRANSACTION_ROLLBACK))


@dataclasses.dataclass(slots=True)
class AppendResult:
    status: PutMessageStatus
    wrote_offset: int = 0  # commitlog offset of the first record
    wrote_bytes: int = 0
    store_timestamp: int = 0
    # One per message, in order.
    commit_log_offsets: list[int] = dataclasses.field(default_factory=list)
    queue_offsets: list[int] = dataclasses.field(default_factory=list)
    error: str = ""

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes


class _Encoded(DispatchRequest):
    """The parts of a record that do not depend on where it lands. Once appended it is also
    the record's dispatch request (offsets and store time filled in), so the dispatch
    service need not parse the record back."""

    __slots__ = ("msg", "header", "body", "tail", "crc", "total", "born_host", "counted", "key",
                 "delay_ms")

    def __init__(self, msg: Message, store_host_flag: int, max_message_size: int) -> None:
        topic = msg.topic.encode()
        body = msg.body
        properties = msg.properties
        if properties:
            props = "".join([f"{k}\x01{v}\x02" for k, v in properties.items()]).encode()
            tags = properties.get("TAGS")
            # What the dispatch service would otherwise parse back out of the record.
            self.tags_code = tags_code(tags) if tags else 0
            self.keys = properties.get("KEYS", "")
            self.uniq_key = properties.get("UNIQ_KEY")
        else:
            props = b""
            self.tags_code = 0
            self.keys = ""
            self.uniq_key = None
        if len(props) > MAX_PROPERTIES_LENGTH or len(topic) > 127 or len(body) > max_message_size:
            check_sizes(topic, props, len(body), max_message_size)
        born_host = _HOSTS.get(msg.born_host)
        if born_host is None:
            born_host = _HOSTS[msg.born_host] = encode_host(*msg.born_host)
        sys_flag = msg.sys_flag | store_host_flag | (0x10 if len(born_host) == 20 else 0)
        self.topic = msg.topic
        self.queue_id = msg.queue_id
        self.prepared_transaction_offset = msg.prepared_transaction_offset
        self.msg = msg
        self.sys_flag = sys_flag
        self.header = header = _HEADER_BY_FLAGS[sys_flag & 0x30]
        self.body = body
        self.tail = tail = b"".join((bytes((len(topic),)), topic, len(props).to_bytes(2, "big"),
                                     props))
        self.crc = crc32c(body) & 0x7FFFFFFF
        self.total = self.msg_size = header.size + len(body) + len(tail)
        self.born_host = born_host
        self.counted = (sys_flag & TRANSACTION_TYPE_MASK) not in _NO_QUEUE_OFFSET
        self.key = (msg.topic, msg.queue_id)
        self.delay_ms = 0
        if properties and "DELAY" in properties and msg.topic == SCHEDULE_TOPIC:
            self.delay_ms = delay_level_ms(int(properties["DELAY"]))


# born host (ip, port) -> its record bytes; a broker sees a bounded set of client addresses.
_HOSTS: dict[tuple[str, int], bytes] = {}


class CommitLog:
    def __init__(self, config: StoreConfig, clock_ms: Callable[[], int]) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.allocator = AllocateMappedFileService(config.warm_mapped_file_enable)
        self.queue = MappedFileQueue(
            Path(config.store_path_root_dir) / "commitlog",
            config.mapped_file_size_commit_log,
            write_buffer=config.use_write_buffer,
            allocator=self.allocator,
        )
        self.put_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        # Called (offset committed up to) after a write-buffer commit made bytes readable;
        # readers that were woken at put time (HA transfer) need this second wake-up.
        self.commit_listeners: list[Callable[[int], None]] = []
        self.begin_time_in_lock = 0  # ms; 0 when nobody holds the put lock
        # (topic, queueId) -> next queue offset
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self.store_host_flag = 0x20 if ":" in config.store_host[0] else 0
        self.store_host = encode_host(*config.store_host)
        self.last_store_timestamp = 0
        self.file_size = config.mapped_file_size_commit_log
        # Dispatch requests of records appended here, so the dispatch service need not parse
        # them back; replicated and recovered records are parsed from the bytes instead.
        self.dispatch_hints: collections.deque[DispatchRequest] = collections.deque()

    # -- append ----------------------------------------------------------------------------
    def encode(self, msg: Message) -> _Encoded:
        return _Encoded(msg, self.store_host_flag, self.config.max_message_size)

    def put_messages(self, msgs: list[Message]) -> AppendResult:
        """Appends records under the put lock (never waits for disk)."""
        try:
            encoded = [self.encode(m) for m in msgs]
        except IllegalMessage as e:
            return AppendResult(e.status, error=str(e))
        for e in encoded:
            if e.total + END_FILE_MIN_BLANK_LENGTH > self.file_size:
                return AppendResult(PutMessageStatus.MESSAGE_ILLEGAL,
                                    error=f"record of {e.total} bytes exceeds the file size")
        return self.append_encoded(encoded)

    def append_encoded(self, encoded: list[_Encoded]) -> AppendResult:
        table = self.topic_queue_table
        store_host = self.store_host
        hints = self.dispatch_hints
        phys_offsets: list[int] = []
        queue_offsets: list[int] = []
        with self.put_lock:
            now = self.clock_ms()
            self.begin_time_in_lock = now
            try:
                mf = self.queue.last_file_for_append()
                first = mf.file_from_offset + mf.wrote_position
                for e in encoded:
                    total = e.total
                    if total + END_FILE_MIN_BLANK_LENGTH > mf.file_size - mf.wrote_position:
                        mf.append_blank(encode_blank(mf.file_size - mf.wrote_position))
                        mf = self.queue.last_file_for_append()
                        if not phys_offsets:
                            first = mf.file_from_offset
                    msg = e.msg
                    qoff = table.get(e.key, 0) if e.counted else 0
                    phys = mf.file_from_offset + mf.wrote_position
                    mf.append(e.header.pack(
                        total, MESSAGE_MAGIC_CODE, e.crc, msg.queue_id, msg.flag, qoff, phys,
                        e.sys_flag, msg.born_timestamp, e.born_host, now, store_host,
                        msg.reconsume_times, msg.prepared_transaction_offset, len(e.body),
                    ) + e.body + e.tail)
                    if e.counted:
                        table[e.key] = qoff + 1
                    e.commit_log_offset = phys
                    e.queue_offset = qoff
                    e.store_timestamp = now
                    if e.delay_ms:
                        e.tags_code = now + e.delay_ms
                    hints.append(e)
                    phys_offsets.append(phys)
                    queue_offsets.append(qoff)
                mf.store_timestamp = now
                self.last_store_timestamp = now
                end = mf.file_from_offset + mf.wrote_position
            except OSError as err:
                log.error("append failed: %s", err)
                return AppendResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, error=str(err))
            finally:
                self.begin_time_in_lock = 0
        return AppendResult(PutMessageStatus.PUT_OK, first, end - first, now, phys_offsets,
                            queue_offsets)

    def lock_held_ms(self, now: int) -> int:
        begin = self.begin_time_in_lock
        return now - begin if begin else 0

    # -- commit / flush --------------------------------------------------------------------
    def commit(self) -> int:
        """Writes buffered appends into the files (write-buffer mode); returns max offset."""
        if self.queue.write_buffer:
            with self._commit_lock:
                with self.put_lock:
                    chunks = [(mf, mf.take_uncommitted()) for mf in self.queue.files[-2:]]
                moved = False
                for mf, chunk in chunks:
                    if chunk is not None:
                        mf.write_committed(*chunk)
                        moved = True
            if moved:
                committed = self.queue.max_offset
                for listener in self.commit_listeners:
                    listener(committed)
        return self.queue.max_offset

    def flush(self) -> int:
        self.commit()
        return self.queue.flush()

    @property
    def max_offset(self) -> int:
        """End of readable (committed) data."""
        return self.queue.max_offset

    @property
    def max_wrote_offset(self) -> int:
        return self.queue.max_wrote_offset

    @property
    def min_offset(self) -> int:
        first = self.queue.first_file()
        return first.file_from_offset if first else 0

    @property
    def flushed_offset(self) -> int:
        return self.queue.flushed_where

    # -- reading ---------------------------------------------------------------------------
    def read(self, offset: int, size: int) -> bytes:
        """Committed bytes from `offset`, at most `size`, never crossing a file."""
        mf = self.queue.find_by_offset(offset)
        if mf is None:
            return b""
        try:
            return mf.read(offset - mf.file_from_offset, size)
        except ValueError:  # the file was deleted while reading
            return b""

    def read_file_data(self, offset: int) -> tuple[MappedFile, bytes] | None:
        """All committed bytes of the file holding `offset`, from `offset` on."""
        mf = self.queue.find_by_offset(offset)
        if mf is None:
            return None
        try:
            return mf, mf.read(offset - mf.file_from_offset, mf.file_size)
        except ValueError:
            return None

    # -- replication (slave side) ---------------------------------------------------------
    def append_data(self, offset: int, data: bytes) -> None:
        """Puts replicated bytes at exactly `offset` (the slave's max offset); never crosses
        a file. Raises ValueError on a mismatch."""
        with self.put_lock:
            if not self.queue.files and offset % self.file_size == 0:
                pass  # an empty slave starts where the master's retained data starts
            elif offset != self.max_wrote_offset:
                raise ValueError(f"replicated data at {offset}, commitlog ends at "
                                 f"{self.max_wrote_offset}")
            mf = self.queue.last_file_for_append(offset)
            pos = offset - mf.file_from_offset
            if pos + len(data) > mf.file_size:
                raise ValueError(f"replicated data at {offset} crosses the end of {mf.path.name}")
            if mf.write_buffer:
                raise ValueError("append_data with a non-empty write buffer")
            mf.write_at(pos, data)

    # -- recovery --------------------------------------------------------------------------
    def scan(self, start_offset: int) -> Iterator[ScannedRecord]:
        """Yields every valid record from `start_offset` on; stops at the first bad byte.

        Each item is (file data, position in it, commitlog offset, total size, queue id,
        queue offset, topic, sys flag); `parse_dispatch(data, pos)` gives the full request
        when needed.
        After the iteration `self.scan_end` is the offset where valid data ends.
        """
        self.scan_end = start_offset
        self.scan_error = ""
        offset = start_offset
        while True:
            mf = self.queue.find_by_offset(offset)
            if mf is None:
                return
            base = mf.file_from_offset
            with memoryview(mf.mm) as data:
                pos = offset - base
                while True:
                    try:
                        r = check_record(data, pos)
                    except CorruptRecord as e:
                        self.scan_error = f"{mf.path.name}: {e}"
                        return
                    if r == 0:
                        return  # end of data inside this file
                    if isinstance(r, int):  # end-of-file blank: continue in the next file
                        offset = mf.file_tail_offset
                        self.scan_end = offset
                        break
                    total, queue_id, queue_offset, phys, topic, fields, _ = r
                    if phys != base + pos:
                        self.scan_error = (f"{mf.path.name}: record at {base + pos} says it is "
                                           f"at {phys}")
                        return
                    yield data, pos, phys, total, queue_id, queue_offset, topic, fields[7]
                    pos += total
                    self.scan_end = base + pos

    def first_record_timestamp(self, mf: MappedFile) -> int:
        """Store time of a file's first record, 0 when it has none."""
        try:
            r = parse_dispatch(mf.mm[: min(mf.file_size, 1 << 16)], 0, check_crc=False)
        except ValueError:  # CorruptRecord, or undecodable properties
            return 0
        return r.store_timestamp if isinstance(r, DispatchRequest) else 0

    def set_recovered_end(self, offset: int) -> None:
        """After a scan: everything from `offset` on is cut; data before it is on disk."""
        self.queue.truncate_dirty_files(offset)
        self.queue.flushed_where = offset

    def close(self) -> None:
        self.allocator.shutdown()
        self.flush()
        self.queue.close()
