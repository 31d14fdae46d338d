"""The consume queues' positions, so a start need not scan 400,000 queues.

Listing and reading 400,000 queue directories costs a start about 30 s on this machine's disk,
and reading every queue's end after a crash 54-83 s. Instead one file holds each queue's files
and positions as of a commitlog offset S: every record before S has its entries in its queue
at the positions recorded (or further).

- While the store runs, the consume-queue flush service writes it every
  `consumeQueueSnapshotInterval` ms (kind RUNNING): S is read first, the positions after,
  the queue files are forced to disk, then the file is written (temporary file, fsync,
  rename). A start after a crash in the same boot (a process killed keeps its page cache)
  takes the positions from it and re-dispatches the commitlog from S (store/recovery.py): only
  the queues those records touch are read from disk.
- A clean stop writes it with S = the commitlog's end (kind CLEAN); the next clean start takes
  it as is and turns it into a RUNNING one for the run that follows.

Encoding is incremental (`SnapshotEncoder`): a queue's fixed-size record is packed again only
when the queue changed, so a write costs Python time for the queues written since the last
one, plus a zlib pass and the write.

Layout: a header `magic "CQS2" | kind (1) | boot id (16) | S (8) | consume-queue file size (4)
| topic count (4) | queue count (4) | compressed payload length (4)`, the zlib-compressed
payload: each topic `length (2) | UTF-8 name`, then one RECORD per queue `topic number (4) |
queue id (4) | first file offset (8) | file count (4) | end (8) | min logic offset (8) | max
physic offset (8) | last entry real (1)`; then the CRC-32 of everything before it (4).
The consume-queue files themselves keep SPEC §2.3's format.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import struct
import uuid
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

from store.consume_queue import ConsumeQueue
from store.mapped_file import _fsync_dir

log = logging.getLogger(__name__)

MAGIC = b"CQS2"
RUNNING = 0
CLEAN = 1
HEAD = struct.Struct(">4sB16sqiIII")
RECORD = struct.Struct(">IiqIqqq?")
TOPIC_LEN = struct.Struct(">H")
CRC = struct.Struct(">I")
FILE_NAME = "consumequeue.snapshot"
# zlib level 1: 400,000 records compress about 4x at ~100 MB/s (higher levels cost several
# times more for a few per cent).
ZLIB_LEVEL = 1


def boot_id() -> bytes:
    """This boot of the machine: a start after a crash in another boot cannot trust the page
    cache of the last one (a power cut loses writes in any order)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return uuid.UUID(f.read().strip()).bytes
    except (OSError, ValueError):
        return bytes(16)  # unknown: never equal to a snapshot's (see read)


class SnapshotEncoder:
    """The payload of the next snapshot, one fixed-size record per queue, packed again only
    for the queues that changed since the last encode."""

    def __init__(self) -> None:
        self.slots: dict[ConsumeQueue, int] = {}
        self.records = bytearray()
        self.topics: dict[str, int] = {}
        self.topic_bytes: list[bytes] = []

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def update(self, queues: Iterable[ConsumeQueue]) -> None:
        """Packs the records of `queues` (new ones get a slot at the end). Fields are read
        without a lock: a queue written meanwhile has records past S, so recovery reads it
        from disk and takes only its min logic offset from here."""
        slots = self.slots
        topics = self.topics
        records = self.records
        pack_into = RECORD.pack_into
        size = RECORD.size
        for cq in queues:
            slot = slots.get(cq)
            if slot is None:
                slot = slots[cq] = len(slots)
                records.extend(bytes(size))
            topic = topics.get(cq.topic)
            if topic is None:
                topic = topics[cq.topic] = len(self.topic_bytes)
                name = cq.topic.encode()
                self.topic_bytes.append(TOPIC_LEN.pack(len(name)) + name)
            files = cq.files
            pack_into(records, slot * size, topic, cq.queue_id,
                      files[0].file_from_offset if files else 0, len(files), cq._max_pos,
                      cq.min_logic_offset, cq.max_physic_offset, cq._tail_real)

    def adopt(self, queues: list[ConsumeQueue], topics: list[str], payload: bytes,
              records_at: int) -> None:
        """Takes the payload of a snapshot read at start (`queues` in its record order) as
        the encoded state, so the first write after a start packs only what changed."""
        self.clear()
        self.slots = {cq: i for i, cq in enumerate(queues)}
        self.records = bytearray(memoryview(payload)[records_at:])
        self.topics = {t: i for i, t in enumerate(topics)}
        self.topic_bytes = [TOPIC_LEN.pack(len(t.encode())) + t.encode() for t in topics]

    def body(self, kind: int, offset: int, cq_file_size: int) -> bytes:
        payload = zlib.compress(b"".join(self.topic_bytes) + self.records, ZLIB_LEVEL)
        head = HEAD.pack(MAGIC, kind, boot_id(), offset, cq_file_size, len(self.topic_bytes),
                         len(self.slots), len(payload))
        body = head + payload
        return body + CRC.pack(zlib.crc32(body))


def write_file(path: str, body: bytes) -> None:
    """Writes durably: temporary file, fsync, rename, fsync of the directory."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(Path(path).parent)


def discard(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@dataclasses.dataclass
class Snapshot:
    kind: int
    boot: bytes
    offset: int  # S: every record before it is in its queue at the positions recorded
    cq_file_size: int
    topic_count: int
    queue_count: int
    payload: bytes
    compressed: bytes  # the payload as in the file

    def as_running(self) -> bytes:
        """The same snapshot as a RUNNING one of this boot (after a clean start: the run that
        follows re-dispatches from S after a crash, as from a snapshot written while running)."""
        head = HEAD.pack(MAGIC, RUNNING, boot_id(), self.offset, self.cq_file_size,
                         self.topic_count, self.queue_count, len(self.compressed))
        body = head + self.compressed
        return body + CRC.pack(zlib.crc32(body))


def read(path: str) -> Snapshot | str | None:
    """The snapshot at `path`, None when there is none, or why it does not check out."""
    try:
        with open(path, "rb") as f:
            body = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"unreadable: {e}"
    if len(body) < HEAD.size + CRC.size:
        return "too short"
    if body[:4] != MAGIC:
        return f"magic {body[:4]!r}, not {MAGIC!r} (another version wrote it)"
    if CRC.unpack_from(body, len(body) - CRC.size)[0] != zlib.crc32(body[: -CRC.size]):
        return "checksum mismatch"
    _, kind, boot, offset, cq_size, topics, queues, length = HEAD.unpack_from(body)
    if HEAD.size + length + CRC.size != len(body):
        return "length mismatch"
    compressed = body[HEAD.size : HEAD.size + length]
    try:
        payload = zlib.decompress(compressed)
    except zlib.error as e:
        return f"payload does not decompress: {e}"
    return Snapshot(kind, boot, offset, cq_size, topics, queues, payload, compressed)


def restore(snap: Snapshot, cq_root: str, new_queue: Callable[[str, int], ConsumeQueue],
            encoder: SnapshotEncoder | None = None) -> set[str] | str:
    """Makes the snapshot's queues with `new_queue`; returns the topic directories on disk
    that it does not hold (made after it), or why it cannot be used (the caller drops what
    was made and scans every queue)."""
    payload = snap.payload
    pos = 0
    names: list[str] = []
    try:
        for _ in range(snap.topic_count):
            (n,) = TOPIC_LEN.unpack_from(payload, pos)
            names.append(payload[pos + 2 : pos + 2 + n].decode())
            pos += 2 + n
    except (struct.error, UnicodeDecodeError) as e:
        return f"topics unreadable: {e}"
    records_at = pos
    if len(payload) - records_at != snap.queue_count * RECORD.size:
        return "record count mismatch"
    # Queues of topics removed while the broker was stopped: scan instead.
    on_disk: set[str] = set()
    if os.path.isdir(cq_root):
        with os.scandir(cq_root) as entries:
            on_disk = {e.name for e in entries if e.is_dir()}
    known = set(names)
    if len(known) != len(names):
        return "a topic listed twice"
    missing = known - on_disk
    if missing:
        return f"{len(missing)} topic directories are gone, e.g. {next(iter(missing))}"
    made: list[ConsumeQueue] = []
    try:
        for topic, queue_id, first, count, end, min_logic, max_physic, tail_real in (
                RECORD.iter_unpack(memoryview(payload)[records_at:])):
            if count and end < first:
                return f"{names[topic]}-{queue_id}: end {end} before its first file {first}"
            cq = new_queue(names[topic], queue_id)
            cq.restore(first, count, end, min_logic, max_physic, tail_real)
            made.append(cq)
    except IndexError:
        return "a record names no topic"
    if encoder is not None:
        encoder.adopt(made, names, payload, records_at)
    return on_disk - known
