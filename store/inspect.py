"""Read-only verifier of a store directory (SPEC §2): commitlog, consume queues and index.

    mqstore inspect STORE_DIR [--json] [--commitlog-file-size N] [--cq-file-size N]
    (or python -m store.inspect ..., but not from a directory holding a `store/` folder)

Files are opened read-only; nothing is recovered (DefaultMessageStore.load() would truncate).
Exit status: 0 clean (warnings allowed), 1 problems found, 2 usage error. With an `abort` file
(the store runs, or was killed) entries missing for the newest records are the warning
"dispatch behind"; entries pointing at wrong or invalid records are always problems.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import mmap
import os
import re
import struct
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from common.codec import INT, CorruptRecord
from store.commitlog import NO_QUEUE_OFFSET_BIT
from store.constants import CQ_STORE_UNIT_SIZE
from store.consume_queue import BLANK_SIZE, ENTRY
from store.dispatch import DispatchRequest, parse_dispatch
from store.index import (
    HASH_SLOT_SIZE,
    INDEX_DIR_NAME,
    INDEX_ENTRY,
    INDEX_FILE_NAME,
    INDEX_HEADER,
    INDEX_HEADER_SIZE,
    INDEX_SIZE,
    MAX_HASH_SLOT_NUM,
    index_file_size,
    key_hash,
)
from store.message import topic_problem

_OFFSET_NAME = re.compile(r"^\d{20}$")
_MAX_LISTED = 50
_SLOT = struct.Struct(">i")
_MAX_GEOMETRY_TRIES = 2_000_000
_COPY_CHUNK = 8 << 20
Buffer = mmap.mmap | bytes


class UsageError(Exception):
    """Exit status 2."""


@dataclasses.dataclass(slots=True)
class Record:
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    tags_code: int
    dispatchable: bool  # transaction type is not PREPARED / ROLLBACK: it has a CQ entry
    key_hashes: frozenset[int]


@dataclasses.dataclass
class Report:
    store: str
    abort: bool = False
    commitlog_files: int = 0
    file_size: int = 0
    min_offset: int = 0
    max_offset: int = 0  # end of valid data
    records: int = 0
    queues: dict[tuple[str, int], dict[str, int]] = dataclasses.field(default_factory=dict)
    index_files: int = 0
    index_entries: int = 0
    warnings: list[str] = dataclasses.field(default_factory=list)
    problems: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    problem_count: int = 0

    def problem(self, file: str, offset: int, message: str) -> None:
        self.problem_count += 1
        if len(self.problems) < _MAX_LISTED:
            self.problems.append({"file": file, "offset": offset, "message": message})

    def queue(self, topic: str, queue_id: int) -> dict[str, int]:
        return self.queues.setdefault((topic, queue_id), {"records": 0, "entries": 0,
                                                          "problems": 0})

    def to_json(self) -> dict[str, Any]:
        cl = {"files": self.commitlog_files, "file_size": self.file_size,
              "min_offset": self.min_offset, "max_offset": self.max_offset,
              "records": self.records}
        return {"store": self.store, "abort": self.abort, "clean": self.problem_count == 0,
                "commitlog": cl, "queues": [{"topic": t, "queue_id": q, **v}
                                            for (t, q), v in sorted(self.queues.items())],
                "index": {"files": self.index_files, "entries": self.index_entries},
                "warnings": self.warnings, "problem_count": self.problem_count,
                "problems": self.problems,
                "first_problem": self.problems[0] if self.problems else None}


def _data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """[start, end) of each stretch of data in the file, in order (the rest are holes); the
    whole file when the file system cannot tell."""
    extents: list[tuple[int, int]] = []
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # holes only, from pos to the end
                break
            return [(0, size)]
        pos = min(size, os.lseek(fd, start, os.SEEK_HOLE))
        extents.append((start, pos))
    return extents


def _map(path: Path) -> Buffer:
    """The file's bytes, read without touching a hole of it: read through a mapping, a hole
    of a sparse file gets a page allocated on tmpfs (filling it) and is a SIGBUS when the
    file system is full. A file with every block allocated is mapped; a sparse one has its
    data copied into anonymous memory, whose untouched pages read as zeros."""
    with open(path, "rb") as f:
        fd = f.fileno()
        st = os.fstat(fd)
        if not st.st_size:
            return b""
        extents = _data_extents(fd, st.st_size)
        if st.st_blocks * 512 >= st.st_size or extents == [(0, st.st_size)]:
            return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        buf = mmap.mmap(-1, st.st_size)
        with memoryview(buf) as view:
            for start, end in extents:
                pos = start
                while pos < end:
                    n = os.preadv(fd, [view[pos : min(end, pos + _COPY_CHUNK)]], pos)
                    if n <= 0:  # cut short meanwhile: the rest reads as zeros
                        break
                    pos += n
        return buf


def _first_nonzero(buf: Buffer, start: int, end: int) -> int:
    """Position of the first non-zero byte in buf[start:end], -1 when all are zero."""
    step = 1 << 20
    for p in range(start, end, step):
        chunk = buf[p : min(end, p + step)]
        rest = chunk.lstrip(b"\0")
        if rest:
            return p + len(chunk) - len(rest)
    return -1


def _offset_files(rep: Report, root: Path, directory: Path) -> list[tuple[int, Path]]:
    """The 20-digit-named files of a directory, by start offset; others are noted."""
    out = []
    for p in sorted(directory.iterdir()):
        if p.is_file() and _OFFSET_NAME.match(p.name):
            out.append((int(p.name), p))
        elif not p.name.endswith(".prealloc"):  # the allocator's next file, not yet in use
            rep.warnings.append(f"foreign file {p.relative_to(root)} ignored")
    return out


def _file_size(files: Iterable[Path], given: int | None) -> int:
    if given:
        return given
    sizes = Counter(p.stat().st_size for p in files)
    return min(sizes, key=lambda s: (-sizes[s], s)) if sizes else 0


def _open_checked(rep: Report, rel: str, path: Path, start: int, size: int,
                  expected: int | None, last: bool) -> Buffer:
    buf = _map(path)
    if not buf and last and rep.abort:
        # A crash between creating the file and sizing it: loading the store sizes it.
        rep.warnings.append(f"{rel}: empty, its creation cut short by a crash")
    elif len(buf) != size:
        rep.problem(rel, 0, f"file size {len(buf)}, expected {size}")
    if expected is not None and start != expected:
        rep.problem(rel, 0, f"file starts at {start}, expected {expected} (gap or overlap)")
    return buf


def _garbage(rep: Report, rel: str, buf: Buffer, start: int, end: int, what: str,
             torn: list[tuple[str, int, str]] | None = None) -> bool:
    """Reports the first non-zero byte of buf[start:end] (after the end of data); a pending
    torn tail is no longer one when something follows it."""
    nz = _first_nonzero(buf, start, end)
    if nz >= 0:
        while torn:
            rep.problem(*torn.pop())
        rep.problem(rel, nz, f"garbage after the end of {what}")
    return nz >= 0


def _chain_ok(ents: list[tuple[int, int, int, int]], i: int, s: int) -> bool:
    """Entry i's chain link goes back to an entry of the same slot (or ends the chain)."""
    h, prev = ents[i - 1][0], ents[i - 1][3]
    return prev < i and (not prev or ents[prev - 1][0] % s == h % s)


def scan_commitlog(rep: Report, root: Path, size_arg: int | None) -> dict[int, Record]:
    files = _offset_files(rep, root, root / "commitlog")
    rep.commitlog_files = len(files)
    records: dict[int, Record] = {}
    if not files:
        return records
    size = rep.file_size = _file_size((p for _, p in files), size_arg)
    rep.min_offset = files[0][0]
    end: int | None = None
    expected: int | None = None
    last_qoff: dict[tuple[str, int], int] = {}
    torn: list[tuple[str, int, str]] = []  # an invalid last record, with abort: torn tail?
    for start, path in files:
        rel = str(path.relative_to(root))
        buf = _open_checked(rep, rel, path, start, size, expected, path == files[-1][1])
        expected = start + size
        limit = min(len(buf), size)
        if end is not None:  # everything after the end of data must be zero
            _garbage(rep, rel, buf, 0, limit, f"data (commitlog offset {end})", torn)
            continue
        view = memoryview(buf)[:limit] if limit else b""
        pos = 0
        while True:
            off = start + pos
            try:
                r = parse_dispatch(view, pos, check_crc=True)
                why = _record_problem(off, r) if not isinstance(r, int) else ""
            except (CorruptRecord, ValueError, IndexError, struct.error) as e:
                r, why = 0, str(e)
            if why:  # with abort and nothing after it, a write the crash cut short
                end = off
                total = INT.unpack_from(view, pos)[0] if pos + 4 <= limit else 0
                tail = pos + total if 8 <= total <= limit - pos else limit
                torn.append((rel, pos, f"invalid record at commitlog offset {off}: {why}"))
                if not rep.abort or _first_nonzero(buf, tail, limit) >= 0:
                    rep.problem(*torn.pop())
                break
            if r == 0:
                end = off
                _garbage(rep, rel, buf, pos, limit, f"data (commitlog offset {off})")
                break
            if isinstance(r, int):  # end-of-file blank: continue in the next file
                break
            keys = r.keys.split() + ([r.uniq_key] if r.uniq_key else [])
            dispatchable = not r.sys_flag & NO_QUEUE_OFFSET_BIT
            records[off] = Record(r.msg_size, r.topic, r.queue_id, r.queue_offset, r.tags_code,
                                  dispatchable, frozenset(key_hash(r.topic, k) for k in keys))
            rep.queue(r.topic, r.queue_id)["records"] += 1
            prev = last_qoff.get((r.topic, r.queue_id)) if dispatchable else None
            if prev is not None and r.queue_offset != prev + 1:
                rep.problem(rel, pos, f"record at commitlog offset {off} has QUEUEOFFSET "
                                      f"{r.queue_offset} in {r.topic}/{r.queue_id}, "
                                      f"expected {prev + 1}")
            if dispatchable:
                last_qoff[(r.topic, r.queue_id)] = r.queue_offset
            pos += r.msg_size
    if torn:
        rep.warnings.append(f"torn tail: {torn[0][2]} (the last record, nothing after it: "
                            "a write cut short by the crash; loading the store cuts it)")
    rep.max_offset = end if end is not None else expected or 0
    rep.records = len(records)
    return records


def _record_problem(off: int, r: DispatchRequest) -> str:
    """Checks parse_dispatch leaves out: the position, the topic's length."""
    if r.commit_log_offset != off:
        return f"PHYSICALOFFSET says {r.commit_log_offset}"
    return topic_problem(r.topic) or ""


def _cl_location(rep: Report, offset: int) -> tuple[str, int]:
    if rep.file_size <= 0:
        return "commitlog", offset
    start = offset - (offset - rep.min_offset) % rep.file_size
    return f"commitlog/{start:020d}", offset - start


def _report_behind(rep: Report, what: str, behind: list[int], records: dict[int, Record]) -> None:
    text = (f"dispatch behind: {len(behind)} record(s) ({sum(records[o].size for o in behind)} "
            f"bytes) from commitlog offset {behind[0] if behind else 0} have no {what} entry yet")
    if behind and rep.abort:
        rep.warnings.append(text)
    elif behind:
        rep.problem(*_cl_location(rep, behind[0]), text + " (no abort file: the store was shut "
                                                          "down cleanly, so every record should)")


def check_consume_queues(rep: Report, root: Path, records: dict[int, Record],
                         size_arg: int | None) -> None:
    queues: list[tuple[str, int, list[tuple[int, Path]]]] = []
    for qdir in sorted(p for p in (root / "consumequeue").glob("*/*") if p.is_dir()):
        if not qdir.name.isdigit():
            rep.warnings.append(f"foreign directory {qdir.relative_to(root)} ignored")
            continue
        queues.append((qdir.parent.name, int(qdir.name), _offset_files(rep, root, qdir)))
    size = _file_size((p for *_, files in queues for _, p in files), size_arg)
    size -= size % CQ_STORE_UNIT_SIZE
    entries: dict[tuple[str, int], dict[int, int]] = {}
    dispatched_end = 0
    for topic, qid, files in queues:
        stats = rep.queue(topic, qid)
        got = entries[(topic, qid)] = {}
        ended = False
        expected: int | None = None
        # A bad entry is reported when the next one shows it is not the last: a crash can cut
        # the write of the last one (at a page boundary) and loading the store rewrites it.
        last_bad: tuple[str, int, str] | None = None
        for start, path in files:
            rel = str(path.relative_to(root))
            buf = _open_checked(rep, rel, path, start, size, expected,
                                path == files[-1][1])
            expected = start + size
            limit = min(len(buf), size)
            for pos in range(0, limit - limit % CQ_STORE_UNIT_SIZE, CQ_STORE_UNIT_SIZE):
                if ended:
                    stats["problems"] += _garbage(rep, rel, buf, pos, limit, "the consume queue")
                    break
                off, sz, code = ENTRY.unpack_from(buf, pos)
                if off == 0 and sz == 0:
                    ended = True
                    continue
                n = (start + pos) // CQ_STORE_UNIT_SIZE
                stats["entries"] += 1
                if last_bad is not None:
                    stats["problems"] += 1
                    rep.problem(*last_bad)
                    last_bad = None
                if sz == BLANK_SIZE:
                    stats["holes"] = stats.get("holes", 0) + 1
                    continue
                if off < rep.min_offset:
                    continue  # its commitlog file has expired
                why = _entry_problem(rep, records.get(off), topic, qid, n, off, sz, code)
                if why:
                    last_bad = (rel, pos, f"entry {n} of {topic}/{qid}: {why}")
                else:
                    got[n] = off
                    dispatched_end = max(dispatched_end, off + sz)
        if last_bad is not None:
            if rep.abort:
                rep.warnings.append(f"{last_bad[0]}: {last_bad[2]} (the last entry, cut by the "
                                    "crash: loading the store rewrites it)")
            else:
                stats["problems"] += 1
                rep.problem(*last_bad)
    # Per queue: the number after its last good entry.
    queue_ends = {key: max(got) + 1 for key, got in entries.items() if got}
    behind: list[int] = []
    for off, rec in records.items():
        if not rec.dispatchable:
            continue
        key = (rec.topic, rec.queue_id)
        at = entries.get(key, {}).get(rec.queue_offset)
        if at == off:
            continue
        # Past the end of everything dispatched, or (after a crash) past its own queue's end:
        # dispatch had not got there, and loading the store dispatches it.
        if at is None and (off >= dispatched_end or (
                rep.abort and rec.queue_offset >= queue_ends.get(key, 0))):
            behind.append(off)
            continue
        rep.queue(rec.topic, rec.queue_id)["problems"] += 1
        rep.problem(*_cl_location(rep, off),
                    f"record at commitlog offset {off} ({rec.topic}/{rec.queue_id} queue offset "
                    f"{rec.queue_offset}) has no consume-queue entry")
    _report_behind(rep, "consume-queue", behind, records)
    holes = sum(s.get("holes", 0) for s in rep.queues.values())
    if holes:
        rep.warnings.append(f"{holes} blank consume-queue entries (holes)")


def _entry_problem(rep: Report, rec: Record | None, topic: str, qid: int, n: int, off: int,
                   sz: int, code: int) -> str:
    if rec is None:
        if off >= rep.max_offset:
            return f"points at commitlog offset {off}, past the end of data ({rep.max_offset})"
        return f"points at commitlog offset {off}, which is not the start of a valid record"
    if rec.size != sz:
        return f"size {sz}, the record at {off} has {rec.size}"
    if (rec.topic, rec.queue_id) != (topic, qid):
        return f"the record at {off} belongs to {rec.topic}/{rec.queue_id}"
    if rec.queue_offset != n:
        return f"the record at {off} has QUEUEOFFSET {rec.queue_offset}"
    if rec.tags_code != code:
        return f"tags code {code}, the record at {off} has {rec.tags_code}"
    if not rec.dispatchable:
        return f"the record at {off} is a prepared / rolled-back transaction message"
    return ""


def _geometry_fits(buf: Buffer, s: int, n: int, heads: bool = True) -> bool:
    """Whether the file reads sensibly with s slots: header phy offsets match the first and
    last entries, phy offsets never decrease, every chain link goes back within its slot;
    with `heads`, no entry is newer than the one its slot points at."""
    _, _, begin_phy, end_phy, _, count = INDEX_HEADER.unpack_from(buf, 0)
    if n < 2 or not 1 <= count <= n or len(buf) != index_file_size(s, n):
        return False
    base = INDEX_HEADER_SIZE + s * HASH_SLOT_SIZE
    if count > 1 and (INDEX_ENTRY.unpack_from(buf, base + INDEX_SIZE)[1] != begin_phy or
                      INDEX_ENTRY.unpack_from(buf, base + (count - 1) * INDEX_SIZE)[1] != end_phy):
        return False  # cheap test first: most candidates fail here
    ents = list(INDEX_ENTRY.iter_unpack(buf[base + INDEX_SIZE : base + count * INDEX_SIZE]))
    phys = [e[1] for e in ents]
    # A slot points at the newest entry of its chain (or past indexCount). A wrong s shifts
    # the entries onto the slots' zeros, whose begin phy 0 and repeated end phy (a message's
    # keys) pass the other tests in a first file with few entries.
    return (all(e[0] >= 0 for e in ents) and phys == sorted(phys)
            and all(_chain_ok(ents, i, s) for i in range(1, len(ents) + 1))
            and (not heads or all(
                _SLOT.unpack_from(buf, INDEX_HEADER_SIZE + h % s * HASH_SLOT_SIZE)[0] >= i
                for i, (h, _, _, _) in enumerate(ents, 1))))


def infer_index_geometry(bufs: list[Buffer]) -> tuple[int, int]:
    """(hash_slot_num, index_num) from the file size and the contents of the fullest files."""
    size = Counter(len(b) for b in bufs).most_common(1)[0][0]
    q, r = divmod(size - INDEX_HEADER_SIZE, HASH_SLOT_SIZE)
    candidates = [MAX_HASH_SLOT_NUM, q // 21]  # the defaults; index_num = 4 x slots
    candidates += range(q % 5 or 5, q, 5)[:_MAX_GEOMETRY_TRIES]
    fullest = sorted((b for b in bufs if len(b) == size),
                     key=lambda b: -INDEX_HEADER.unpack_from(b, 0)[5])
    # Sound slot heads first; then without (a damaged key hash breaks them, and inspect is
    # to report the damage, not give up on the geometry).
    for heads in (True, False):
        for buf in fullest[:3] if not r and q > 0 else []:
            for s in candidates:
                n, rest = divmod((q - s) * HASH_SLOT_SIZE, INDEX_SIZE)
                if s > 0 and not rest and _geometry_fits(buf, s, n, heads):
                    return s, n
    raise UsageError("cannot infer the index geometry: pass --index-slots and --index-num")


def check_index(rep: Report, root: Path, records: dict[int, Record],
                geometry: tuple[int, int] | None) -> None:
    idx_dir = root / INDEX_DIR_NAME
    paths = sorted(p for p in idx_dir.iterdir() if INDEX_FILE_NAME.match(p.name)) \
        if idx_dir.is_dir() else []
    rep.index_files = len(paths)
    if not paths:
        return
    bufs = [_map(p) for p in paths]
    s, n = geometry or infer_index_geometry(bufs)
    base = INDEX_HEADER_SIZE + s * HASH_SLOT_SIZE
    present: set[tuple[int, int]] = set()
    max_phy, first_begin = -1, None
    for path, buf in zip(paths, bufs, strict=True):
        rel = str(path.relative_to(root))
        if len(buf) != index_file_size(s, n):
            rep.problem(rel, 0, f"file size {len(buf)}, expected {index_file_size(s, n)}")
            continue
        _, _, begin_phy, end_phy, _, count = INDEX_HEADER.unpack_from(buf, 0)
        if not 1 <= count <= n:
            rep.problem(rel, 36, f"indexCount {count} outside 1..{n}")
            continue
        rep.index_entries += count - 1
        ents = list(INDEX_ENTRY.iter_unpack(buf[base + INDEX_SIZE : base + count * INDEX_SIZE]))
        if ents and (ents[0][1] != begin_phy or ents[-1][1] != end_phy):
            rep.problem(rel, 16, f"header phy offsets {begin_phy}..{end_phy} disagree with its "
                                 f"entries {ents[0][1]}..{ents[-1][1]}")
        first_begin = begin_phy if ents and first_begin is None else first_begin
        for i, (h, phy, _, prev) in enumerate(ents, 1):
            pos = base + i * INDEX_SIZE
            if not _chain_ok(ents, i, s):
                rep.problem(rel, pos, f"index entry {i}: bad chain link to entry {prev}")
            if phy < rep.min_offset:
                continue  # its commitlog file has expired
            rec = records.get(phy)
            if rec is None:
                where = "past the end of data" if phy >= rep.max_offset else "not a record start"
                rep.problem(rel, pos, f"index entry {i} points at commitlog offset {phy}: {where}")
            elif h not in rec.key_hashes:
                rep.problem(rel, pos, f"index entry {i}: keyHash {h} matches no key of the "
                                      f"record at commitlog offset {phy} (topic {rec.topic})")
            else:
                present.add((phy, h))
                max_phy = max(max_phy, phy)
        torn = _first_nonzero(buf, base + count * INDEX_SIZE, base + n * INDEX_SIZE) >= 0
        for j, (v,) in enumerate(struct.iter_unpack(">I", buf[INDEX_HEADER_SIZE:base])):
            if v >= count:
                torn = True
            elif v and ents[v - 1][0] % s != j:
                rep.problem(rel, INDEX_HEADER_SIZE + j * HASH_SLOT_SIZE,
                            f"hash slot {j} points at entry {v} of another slot")
        if torn:
            text = f"{rel}: entries past indexCount {count} (indexing was interrupted)"
            if rep.abort:
                rep.warnings.append(text + "; loading the store repairs it")
            else:
                rep.problem(rel, base + count * INDEX_SIZE, text)
    behind: list[int] = []
    for off, rec in records.items():
        missing = [h for h in rec.key_hashes if (off, h) not in present]
        if not missing or off < (first_begin if first_begin is not None else 0):
            continue
        if off >= max_phy:  # the newest indexed record may have only some of its keys
            behind.append(off)
        else:
            rep.problem(*_cl_location(rep, off), f"record at commitlog offset {off} "
                                                 f"({rec.topic}): {len(missing)} key(s) missing "
                                                 "from the index")
    _report_behind(rep, "index", behind, records)


def inspect_store(root: Path, commitlog_file_size: int | None = None,
                  cq_file_size: int | None = None,
                  index_geometry: tuple[int, int] | None = None) -> Report:
    if not root.is_dir() or not (root / "commitlog").is_dir():
        raise UsageError(f"no such directory: {root}" if not root.is_dir()
                         else f"not a store (no commitlog directory): {root}")
    rep = Report(str(root), abort=(root / "abort").exists())
    records = scan_commitlog(rep, root, commitlog_file_size)
    check_consume_queues(rep, root, records, cq_file_size)
    check_index(rep, root, records, index_geometry)
    return rep


def format_report(rep: Report) -> str:
    lines = [f"store      {rep.store}"]
    if rep.abort:
        lines.append("abort      present: the store is running or was not shut down cleanly")
    lines += [f"commitlog  {rep.commitlog_files} file(s) of {rep.file_size} bytes, min offset "
              f"{rep.min_offset}, valid data ends at {rep.max_offset}, {rep.records} records",
              f"index      {rep.index_files} file(s), {rep.index_entries} entries"]
    if rep.queues:
        width = max(len("topic"), *(len(t) for t, _ in rep.queues))
        lines.append(f"{'topic':<{width}}  queue  records  cq entries  problems")
        for (t, q), v in sorted(rep.queues.items()):
            lines.append(f"{t:<{width}}  {q:>5}  {v['records']:>7}  {v['entries']:>10}  "
                         f"{v['problems']:>8}")
    lines += [f"warning: {w}" for w in rep.warnings]
    if rep.problem_count:
        first = rep.problems[0]
        lines.append(f"PROBLEMS: {rep.problem_count}; first: {first['file']} at offset "
                     f"{first['offset']}: {first['message']}")
        lines += [f"  {p['file']} @ {p['offset']}: {p['message']}" for p in rep.problems[1:10]]
    else:
        lines.append("OK: no problems found")
    return "\n".join(lines)


MAX_SIZE_ARGUMENT = 2**62  # file sizes and index geometry: positive, below any int64 sum


def _positive(text: str) -> int:
    """A size or count argument: a whole number in 1..MAX_SIZE_ARGUMENT (usage error else)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_SIZE_ARGUMENT:
        raise argparse.ArgumentTypeError(f"{text} is not in 1..{MAX_SIZE_ARGUMENT}")
    return value


def main(argv: list[str] | None = None, prog: str = "mqstore inspect") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    ap.add_argument("store_dir", type=Path)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--commitlog-file-size", type=_positive,
                    help="default: size of the files")
    ap.add_argument("--cq-file-size", type=_positive, help="default: size of the files")
    ap.add_argument("--index-slots", type=_positive, help="hashSlotNum (default: inferred)")
    ap.add_argument("--index-num", type=_positive, help="indexNum (default: inferred)")
    args = ap.parse_args(argv)
    if (args.index_slots is None) != (args.index_num is None):
        ap.error("--index-slots and --index-num go together")
    geometry = (args.index_slots, args.index_num) if args.index_slots else None
    try:
        rep = inspect_store(args.store_dir, args.commitlog_file_size, args.cq_file_size,
                            geometry)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(rep.to_json()) if args.json else format_report(rep), flush=True)
    except BrokenPipeError:  # `mqstore inspect DIR --json | head`: the reader had enough
        # Python would report the pipe again when it flushes stdout at exit.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
    return 1 if rep.problem_count else 0


if __name__ == "__main__":
    sys.exit(main())
