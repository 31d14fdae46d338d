"""The recovery scan of the commitlog (SPEC §2.6): every valid record from an offset on,
up to the first bad byte."""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

from crc32c import crc32c

from common.codec import CorruptRecord, header_struct
from common.constants import MAX_PROPERTIES_LENGTH, MESSAGE_MAGIC_CODE
from store.dispatch import KNOWN_TOPICS, DispatchRequest, check_record
from store.dispatch import dispatch_request as codec_dispatch_request

if TYPE_CHECKING:
    from store.commitlog import CommitLog

# position in file, commitlog offset, total size, queue id, queue offset, topic, sys flag
ScannedRecord = tuple[int, int, int, int, int, str, int]
SCAN_RUN = 4096  # records per run
# The IPv4 header fields a scan needs: TOTALSIZE MAGICCODE BODYCRC QUEUEID (FLAG) QUEUEOFFSET
# PHYSICALOFFSET SYSFLAG (BORNTIMESTAMP BORNHOST STORETIMESTAMP STOREHOST RECONSUMETIMES
# PREPARED TRANSACTION OFFSET) BODY length.
_SCAN_V4 = struct.Struct(">iiii4xqqi44xi")


class CommitLogScan:
    """Walks the valid records of a commitlog from `start_offset` on.

    `runs()` yields them in runs of up to SCAN_RUN records of one file: (the file's mapping,
    records); `dispatch_request(mm, record)` gives a record's full dispatch request.
    Afterwards `end` is where valid data ends and `error` says why it ends there, if not at a
    clean end of data.

    Plain IPv4 records are checked by scan_plain_records (or its C twin); anything else
    (IPv6 hosts, blanks, the end, damage) goes through dispatch.check_record, so the verdict is
    always check_record's.
    """

    def __init__(self, commitlog: CommitLog, start_offset: int) -> None:
        self.commitlog = commitlog
        self.start_offset = start_offset
        self.end = start_offset
        self.error = ""

    def runs(self) -> Iterator[tuple[mmap.mmap, list[ScannedRecord]]]:
        offset = self.start_offset
        lib = self.commitlog.native
        scan_plain = lib.scan if lib is not None else scan_plain_records
        topics = KNOWN_TOPICS
        while True:
            mf = self.commitlog.queue.find_by_offset(offset)
            if mf is None:
                return
            base = mf.file_from_offset
            mm = mf.mm
            size = mf.file_size
            run: list[ScannedRecord] = []
            pos = offset - base
            with memoryview(mm) as data:
                while True:
                    if len(run) >= SCAN_RUN:
                        self.end = base + pos
                        yield mm, run
                        run = []
                    pos = scan_plain(mm, pos, size, base, topics, MAX_PROPERTIES_LENGTH,
                                     SCAN_RUN - len(run), run)
                    if len(run) >= SCAN_RUN:
                        continue
                    # Not a plain valid IPv4 record: check_record's full verdict.
                    try:
                        r = check_record(data, pos)
                    except CorruptRecord as e:
                        self.error = f"{mf.path.name}: {e}"
                        r = 0
                    if isinstance(r, int):
                        self.end = base + pos if r == 0 else mf.file_tail_offset
                        if run:
                            yield mm, run
                        if r == 0:  # end of data (or damage) inside this file
                            return
                        offset = mf.file_tail_offset  # end-of-file blank: the next file
                        break
                    total, queue_id, queue_offset, phys, topic, fields, _ = r
                    if phys != base + pos:
                        self.error = (f"{mf.path.name}: record at {base + pos} says it is at "
                                      f"{phys}")
                        self.end = base + pos
                        if run:
                            yield mm, run
                        return
                    run.append((pos, phys, total, queue_id, queue_offset, topic, fields[7]))
                    pos += total


def scan_plain_records(mm: mmap.mmap, pos: int, size: int, base: int, topics: dict[bytes, str],
                       max_props: int, max_records: int, run: list[ScannedRecord]) -> int:
    """Adds to `run` the plain valid IPv4 records from `pos` on (at most max_records) of a file
    of `size` bytes starting at commitlog offset `base`, whose topics are known; returns where
    it stopped: at a record that is anything else (IPv6 hosts, a blank, the end, damage, a
    topic not seen yet), for check_record to judge. One unpack of the fields that matter."""
    unpack = _SCAN_V4.unpack_from
    header_size = _SCAN_V4.size
    magic_code = MESSAGE_MAGIC_CODE
    add = run.append
    with memoryview(mm) as data:
        for _ in range(max_records):
            if pos + header_size > size:
                break
            total, magic, crc, queue_id, queue_offset, phys, sys_flag, body_len = unpack(mm, pos)
            end = pos + total
            p = pos + header_size + body_len
            if not (magic == magic_code and not sys_flag & 0x30 and phys == base + pos
                    and end <= size and body_len >= 0 and p + 3 <= end
                    and queue_id >= 0 and queue_offset >= 0
                    and crc32c(data[p - body_len : p]) & 0x7FFFFFFF == crc):
                break
            topic_len = mm[p]
            props_pos = p + 3 + topic_len
            props_len = end - props_pos
            topic = topics.get(mm[p + 1 : p + 1 + topic_len])
            if not (topic is not None and 0 <= props_len <= max_props
                    and mm[props_pos - 2] << 8 | mm[props_pos - 1] == props_len
                    and (not props_len or (mm[end - 1] == 2 and (
                        mm[props_pos:end].isascii() or _is_utf8(mm[props_pos:end]))))):
                break
            add((pos, phys, total, queue_id, queue_offset, topic, sys_flag))
            pos = end
    return pos


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def dispatch_request(mm: mmap.mmap, record: ScannedRecord,
                     delay_levels: tuple[int, ...]) -> DispatchRequest:
    """The dispatch request of a scanned record (the fields the scan did not keep)."""
    pos, phys, total, queue_id, queue_offset, topic, sys_flag = record
    header = header_struct(sys_flag)
    fields = header.unpack_from(mm, pos)
    p = pos + header.size + fields[14]
    return codec_dispatch_request(topic, queue_id, phys, total, fields[10], queue_offset,
                                  sys_flag, fields[13], mm[p + 3 + mm[p] : pos + total],
                                  delay_levels)
