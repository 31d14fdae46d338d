"""The commitlog: one append-only sequence of records for all topics (SPEC §2.2, §2.6)."""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from crc32c import crc32c

from common import native
from common.codec import HEADER_BY_FLAGS, encode_blank, encode_host, tags_code
from common.constants import MAX_PROPERTIES_LENGTH, MESSAGE_MAGIC_CODE, SCHEDULE_TOPIC, SysFlag
from store.config import StoreConfig
from store.constants import END_FILE_MIN_BLANK_LENGTH, PutMessageStatus
from store.disk_full import DiskFull
from store.dispatch import DispatchRequest, delay_level_ms, parse_dispatch
from store.mapped_file import AllocateMappedFileService, MappedFile, MappedFileQueue
from store.message import IllegalMessage, Message, check_sizes, topic_problem

log = logging.getLogger(__name__)

ZERO_RUN_MARGIN = 64 * 1024  # over maxMessageSize: header, topic, properties (< 33 KiB)
# Set in PREPARED (4) and ROLLBACK (12), clear in NOT (0) and COMMIT (8): records that get no
# queue offset and no consume-queue entry.
NO_QUEUE_OFFSET_BIT = int(SysFlag.TRANSACTION_PREPARED)


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


# One message encoded for appending, as a tuple (cheaper to build than an object, and the
# append path touches millions of them): the parts of its record that do not depend on where
# it lands, plus what the dispatch service needs, so it never parses the record back.
#   (message, sys flag, body CRC, tail = topic length + topic + properties length +
#    properties, total record size, born host bytes, tags code, KEYS, UNIQ_KEY,
#    delay ms: >0 for SCHEDULE_TOPIC messages, whose tags code is their delivery time,
#    (topic, queue id) = the message's queue)
EncodedMessage = tuple[Message, int, int, bytes, int, bytes, int, str, "str | None", int,
                       tuple[str, int]]
E_SYS_FLAG, E_TOTAL, E_QUEUE = 1, 4, 10

# A batch of appended records, left for the dispatch service:
#   (commitlog offset of the first record, offset after the last one, store timestamp,
#    encoded messages, commitlog offset of each, queue offset of each)
# The records lie in order; only an end-of-file blank may sit between two of them.
AppendedBatch = tuple[int, int, int, list[EncodedMessage], list[int], list[int]]

# born host (ip, port) -> its record bytes; a broker sees a bounded set of client addresses.
_HOSTS: dict[tuple[str, int], bytes] = {}
_HEADER_SIZE_BY_FLAGS = {flags: h.size for flags, h in HEADER_BY_FLAGS.items()}
_MAX_CACHED = 100_000


def _encode_properties(properties: dict[str, str]) -> bytes:
    try:
        return "".join([f"{k}\x01{v}\x02" for k, v in properties.items()]).encode()
    except UnicodeEncodeError as e:  # a lone surrogate
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                             f"properties are not encodable as UTF-8: {e}") from None


def _delay_ms(level: str, delay_levels: tuple[int, ...]) -> int:
    try:
        return delay_level_ms(int(level), delay_levels)
    except ValueError:
        raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                             f"DELAY is not a delay level: {level!r}") from None


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
        self.queue.zero_run_proof = config.max_message_size + ZERO_RUN_MARGIN
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
        # Batches appended here, so the dispatch service need not parse them back;
        # replicated and recovered records are parsed from the bytes instead.
        self.appended: collections.deque[AppendedBatch] = collections.deque()
        self._append_failure: tuple[str, float, int] = ("", 0.0, 0)  # last error, when, repeats
        self._topic_prefixes: dict[str, bytes] = {}  # topic -> its length byte + UTF-8
        self.native = native.lib  # C fast paths, or None; dispatch and recovery use it too
        self.disk_full: DiskFull | None = None  # the store's, which refuses puts meanwhile

    # -- append ----------------------------------------------------------------------------
    def encode(self, msgs: list[Message]) -> list[EncodedMessage]:
        """Encodes what does not depend on the record's place; raises IllegalMessage."""
        max_body = self.config.max_message_size
        max_total = self.file_size - END_FILE_MIN_BLANK_LENGTH
        if self.native is not None:  # None: a message the code below must see
            fast = self.native.encode(msgs, self.store_host_flag, _HOSTS, self._topic_prefixes,
                                       max_body, max_total, MAX_PROPERTIES_LENGTH)
            if fast is not None:
                return fast
        out: list[EncodedMessage] = []
        add = out.append
        hosts = _HOSTS
        prefixes = self._topic_prefixes
        header_sizes = _HEADER_SIZE_BY_FLAGS
        store_flag = self.store_host_flag
        for msg in msgs:
            properties = msg.properties
            keys = ""
            uniq = None
            code = delay = 0
            if properties:
                props = _encode_properties(properties)
                tags = properties.get("TAGS")
                if tags:
                    code = tags_code(tags)
                keys = properties.get("KEYS", "")
                uniq = properties.get("UNIQ_KEY")
                if "DELAY" in properties and msg.topic == SCHEDULE_TOPIC:
                    delay = _delay_ms(properties["DELAY"], self.config.delay_levels_ms)
            else:
                props = b""
            body = msg.body
            prefix = prefixes.get(msg.topic)
            if prefix is None or len(props) > MAX_PROPERTIES_LENGTH or len(body) > max_body:
                prefix = self._check_message(msg, props)
            if msg.queue_id < 0:
                raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                                     f"bad queue id {msg.queue_id}")
            born_host = hosts.get(msg.born_host)
            if born_host is None:
                if len(hosts) >= _MAX_CACHED:
                    hosts.clear()
                born_host = hosts[msg.born_host] = encode_host(*msg.born_host)
            # int(): an IntFlag would pass here and stop the dispatch's C gather.
            sys_flag = int(msg.sys_flag) | store_flag | (0x10 if len(born_host) == 20 else 0)
            tail = prefix + len(props).to_bytes(2, "big") + props
            total = header_sizes[sys_flag & 0x30] + len(body) + len(tail)
            if total > max_total:
                raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL,
                                     f"record of {total} bytes exceeds the file size")
            add((msg, sys_flag, crc32c(body) & 0x7FFFFFFF, tail, total, born_host, code, keys,
                 uniq, delay, (msg.topic, msg.queue_id)))
        return out

    def _check_message(self, msg: Message, props: bytes) -> bytes:
        """Raises IllegalMessage for a bad topic or sizes; returns the topic's tail prefix."""
        problem = topic_problem(msg.topic)
        if problem is not None:
            raise IllegalMessage(PutMessageStatus.MESSAGE_ILLEGAL, problem)
        topic = msg.topic.encode()
        check_sizes(topic, props, len(msg.body), self.config.max_message_size)
        prefixes = self._topic_prefixes
        if len(prefixes) >= _MAX_CACHED:
            prefixes.clear()
        prefix = prefixes[msg.topic] = bytes((len(topic),)) + topic
        return prefix

    def put_messages(self, msgs: list[Message]) -> AppendResult:
        """Appends records under the put lock (never waits for disk). Either every message
        is appended or, for a bad one, none."""
        try:
            encoded = self.encode(msgs)
        except IllegalMessage as e:
            return AppendResult(e.status, error=str(e))
        return self.append_encoded(encoded)

    def put_message_groups(self, groups: list[list[Message]]) -> list[AppendResult]:
        """put_messages for several callers at once: one append for all their messages (one
        lock, one copy); a bad message fails its own group only."""
        try:
            encoded = self.encode([m for msgs in groups for m in msgs])
            counts: list[int | AppendResult] = [len(msgs) for msgs in groups]
        except IllegalMessage:
            encoded, counts = [], []
            for msgs in groups:
                try:
                    group = self.encode(msgs)
                except IllegalMessage as e:
                    counts.append(AppendResult(e.status, error=str(e)))
                    continue
                encoded += group
                counts.append(len(group))
        whole = self.append_encoded(encoded)
        results: list[AppendResult] = []
        i = 0
        for n in counts:
            if isinstance(n, AppendResult):
                results.append(n)
            elif whole.status is not PutMessageStatus.PUT_OK:
                results.append(AppendResult(whole.status, error=whole.error))
            elif n == 0:
                results.append(AppendResult(PutMessageStatus.PUT_OK, whole.wrote_offset, 0,
                                            whole.store_timestamp))
            else:
                phys = whole.commit_log_offsets[i : i + n]
                end = phys[-1] + encoded[i + n - 1][E_TOTAL]
                results.append(AppendResult(PutMessageStatus.PUT_OK, phys[0], end - phys[0],
                                            whole.store_timestamp, phys,
                                            whole.queue_offsets[i : i + n]))
                i += n
        return results

    def append_encoded(self, encoded: list[EncodedMessage]) -> AppendResult:
        table = self.topic_queue_table
        store_host = self.store_host
        phys_offsets: list[int] = []
        queue_offsets: list[int] = []
        fast_pack = self.native.pack if self.native is not None else None
        lock = self.put_lock
        lock.acquire()  # not `with`: measured 2x slower on this hot path
        try:
            now = self.clock_ms()
            self.begin_time_in_lock = now
            parts: list[bytes] = []
            done = 0  # messages whose bytes are in a file
            try:
                mf = self.queue.last_file_for_append()
                first = phys = mf.file_from_offset + mf.wrote_position
                room = mf.file_size - mf.wrote_position - END_FILE_MIN_BLANK_LENGTH
                i = 0
                while i < len(encoded):
                    if encoded[i][E_TOTAL] > room:  # end-of-file blank, then the next file
                        # The next file first: when it cannot be made, nothing of this
                        # batch is in this file, which stays open.
                        nxt = self.queue.create_next_file()
                        if parts:
                            mf.append(b"".join(parts))
                            parts = []
                        done = len(phys_offsets)
                        mf.append_blank(encode_blank(mf.file_size - mf.wrote_position))
                        mf = nxt
                        phys = mf.file_from_offset
                        room = mf.file_size - END_FILE_MIN_BLANK_LENGTH
                        if not done:
                            first = phys
                    args = (encoded, i, table, phys, room, now, store_host, phys_offsets,
                            queue_offsets)
                    packed = fast_pack(*args) if fast_pack is not None else None
                    data, i, end = packed if packed is not None else _pack_records(*args)
                    parts.append(data)
                    room -= end - phys
                    phys = end
                if parts:
                    mf.append(b"".join(parts))
            except OSError as err:
                self._forget_queue_offsets(encoded, queue_offsets, done)
                disk_full = self.disk_full
                if disk_full is not None and disk_full.report(
                        err, f"cannot allocate a commitlog file of {self.file_size} bytes",
                        self.file_size):
                    return AppendResult(PutMessageStatus.SERVICE_NOT_AVAILABLE,
                                        error=disk_full.reason)
                self._log_append_failure(err)
                return AppendResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED, error=str(err))
            mf.store_timestamp = now
            self.last_store_timestamp = now
            self.appended.append((first, phys, now, encoded, phys_offsets, queue_offsets))
        finally:
            self.begin_time_in_lock = 0
            lock.release()
        return AppendResult(PutMessageStatus.PUT_OK, first, phys - first, now, phys_offsets,
                            queue_offsets)

    def _log_append_failure(self, err: OSError) -> None:
        """One line per kind of failure (and a count of the repeats every 10 s), not one
        per put: a commitlog that cannot roll (disk full, out of fds) fails every put."""
        now = time.monotonic()
        last, at, repeats = self._append_failure
        if str(err) == last and now - at < 10.0:
            self._append_failure = (last, at, repeats + 1)
            return
        more = f" ({repeats} more failed puts since the last report)" if repeats else ""
        log.error("append failed, puts answer CREATE_MAPPED_FILE_FAILED: %s%s", err, more)
        self._append_failure = (str(err), now, 0)

    def _forget_queue_offsets(self, encoded: list[EncodedMessage], queue_offsets: list[int],
                              done: int) -> None:
        """After a failed append: messages from `done` on were not written, so their queue
        offsets are handed out again."""
        seen: set[tuple[str, int]] = set()
        for e, qoff in zip(encoded[done:], queue_offsets[done:], strict=False):
            key = e[E_QUEUE]
            if not e[E_SYS_FLAG] & NO_QUEUE_OFFSET_BIT and key not in seen:
                seen.add(key)  # its first unwritten message had the lowest offset
                self.topic_queue_table[key] = qoff

    def lock_held_ms(self, now: int) -> int:
        begin = self.begin_time_in_lock
        return now - begin if begin else 0

    # -- commit / flush --------------------------------------------------------------------
    def commit(self) -> int:
        """Writes buffered appends into the files (write-buffer mode); returns max offset."""
        if self.queue.write_buffer:
            with self._commit_lock:
                with self.put_lock:
                    # One batch may fill several small files: take every file's buffer back
                    # to the first one fully committed, not only the last two.
                    chunks = []
                    for n, mf in enumerate(reversed(self.queue.files)):
                        if n and mf.committed_position >= mf.wrote_position:
                            break
                        chunks.append((mf, mf.take_uncommitted()))
                    chunks.reverse()
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
        self.queue.prepare_next_file()  # the flush services call this often enough
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

    def read_file_data(self, offset: int, max_bytes: int | None = None
                       ) -> tuple[MappedFile, bytes] | None:
        """Committed bytes of the file holding `offset`, from `offset` on (at most
        `max_bytes`; by default to the end of the file's committed data)."""
        mf = self.queue.find_by_offset(offset)
        if mf is None:
            return None
        try:
            return mf, mf.read(offset - mf.file_from_offset, max_bytes or mf.file_size)
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


def _pack_records(encoded: list[EncodedMessage], start: int, table: dict[tuple[str, int], int],
                  phys: int, room: int, now: int, store_host: bytes, phys_offsets: list[int],
                  queue_offsets: list[int]) -> tuple[bytes, int, int]:
    """The records of encoded[start:] that fit in `room` bytes from commitlog offset `phys`,
    joined; hands out their queue offsets and adds each one's offsets to the two lists.
    Returns (bytes, index of the first message left out, offset after the last record)."""
    headers = HEADER_BY_FLAGS
    add_phys = phys_offsets.append
    add_qoff = queue_offsets.append
    parts: list[bytes] = []
    i = start
    for msg, sys_flag, crc, tail, total, born_host, _, _, _, _, key in (
            encoded[start:] if start else encoded):
        if total > room:
            break
        if sys_flag & NO_QUEUE_OFFSET_BIT:
            qoff = 0
        else:
            qoff = table.get(key, 0)
            table[key] = qoff + 1
        body = msg.body
        parts += (headers[sys_flag & 0x30].pack(
            total, MESSAGE_MAGIC_CODE, crc, msg.queue_id, msg.flag, qoff, phys, sys_flag,
            msg.born_timestamp, born_host, now, store_host, msg.reconsume_times,
            msg.prepared_transaction_offset, len(body),
        ), body, tail)
        add_phys(phys)
        add_qoff(qoff)
        phys += total
        room -= total
        i += 1
    return b"".join(parts), i, phys
