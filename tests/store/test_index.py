"""Hash index files (SPEC §2.4): store/index.py."""

from __future__ import annotations

import random
import re
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import crc32c
import pytest

from store import index as index_module
from store.index import (
    INDEX_HEADER_SIZE,
    INDEX_SIZE,
    IndexFile,
    IndexService,
    index_file_name,
    index_file_size,
    key_hash,
)

SLOTS = 7
ENTRIES = 50  # 49 usable entries per file: entry 0 is never used
T0 = 1_700_000_000_000
TOPIC = "TopicA"
# Two keys whose `TopicA#key` CRC32C agree on the low 31 bits (found by search).
SAME_HASH = ("order-1371838", "order-2000402")


@dataclass
class Msg:
    phy: int
    ts: int
    keys: tuple[str, ...]
    topic: str = TOPIC


def new_service(tmp_path: Path, slots: int = SLOTS, entries: int = ENTRIES) -> IndexService:
    svc = IndexService(tmp_path / "index", hash_slot_num=slots, index_num=entries)
    svc.load()
    return svc


def build(svc: IndexService, msgs: list[Msg]) -> None:
    for m in msgs:
        svc.build_index(m.topic, m.keys, m.phy, m.ts)


def expected(msgs: list[Msg], topic: str, key: str, max_num: int, begin: int, end: int,
             below: int | None = None) -> list[int]:
    """The model: messages with a key of equal hash, whose second overlaps [begin, end]."""
    h = key_hash(topic, key)
    out = []
    for m in reversed(msgs):
        if below is not None and m.phy >= below:
            continue
        if m.topic != topic or all(key_hash(m.topic, k) != h for k in m.keys if k):
            continue
        if m.ts + 999 < begin or m.ts > end:
            continue
        out.append(m.phy)
    return out[:max_num]


def header_fields(f: IndexFile) -> tuple[Path, int, int, int, int, int, int]:
    """A file's path and header fields."""
    return (f.path, f.begin_timestamp, f.end_timestamp, f.begin_phy_offset, f.end_phy_offset,
            f.index_count, f.hash_slot_count)


def slot_of(key: str, topic: str = TOPIC, slots: int = SLOTS) -> int:
    return key_hash(topic, key) % slots


def keys_in_one_slot(n: int, slots: int = SLOTS) -> list[str]:
    """n keys with different hashes that share the slot of "k0"."""
    target = slot_of("k0", slots=slots)
    found = ["k0"]
    i = 1
    while len(found) < n:
        k = f"k{i}"
        if slot_of(k, slots=slots) == target and key_hash(TOPIC, k) != key_hash(TOPIC, "k0"):
            found.append(k)
        i += 1
    return found


def random_msgs(rng: random.Random, n: int, keys: list[str], start_phy: int = 0,
                start_ts: int = T0) -> list[Msg]:
    msgs, phy, ts = [], start_phy, start_ts
    for _ in range(n):
        chosen = tuple(rng.sample(keys, rng.randint(1, 2)))
        msgs.append(Msg(phy, ts, chosen))
        phy += rng.randint(50, 300)
        ts += rng.choice((0, 1, 400, 1000, 2500))
    return msgs


def random_service(tmp_path: Path, seed: int, keys: list[str], n: int, entries: int = ENTRIES
                   ) -> tuple[IndexService, random.Random, list[Msg]]:
    """A service holding n random messages over `keys`, and the generator to make more."""
    rng = random.Random(seed)
    msgs = random_msgs(rng, n, keys)
    svc = new_service(tmp_path, entries=entries)
    build(svc, msgs)
    return svc, rng, msgs


def assert_all_queries(svc: IndexService, msgs: list[Msg], keys: list[str],
                       below: int | None = None) -> None:
    end_ts = msgs[-1].ts + 10_000
    for key in keys:
        for max_num in (1, 3, 1000):
            got = svc.query_offsets(TOPIC, key, max_num, 0, end_ts)
            assert got == expected(msgs, TOPIC, key, max_num, 0, end_ts, below), (key, max_num)


def assert_all_queries_after_reload(tmp_path: Path, svc: IndexService, msgs: list[Msg],
                                    keys: list[str], entries: int = ENTRIES) -> None:
    """Closes `svc` and loads its files again: every query is still answered right."""
    svc.close()
    again = new_service(tmp_path, entries=entries)
    assert_all_queries(again, msgs, keys)
    again.close()


# -- format ----------------------------------------------------------------------------------
def test_key_hash_is_masked_crc32c_of_topic_hash_key() -> None:
    assert key_hash("T", "k") == crc32c.crc32c(b"T#k") & 0x7FFFFFFF
    assert key_hash("T", "ключ") == crc32c.crc32c("T#ключ".encode()) & 0x7FFFFFFF
    a, b = SAME_HASH
    assert a != b and key_hash(TOPIC, a) == key_hash(TOPIC, b)


def test_header_slot_and_entry_bytes(tmp_path: Path) -> None:
    svc = new_service(tmp_path)
    a, b = keys_in_one_slot(2)
    svc.build_index(TOPIC, [a], 100, T0)
    svc.build_index(TOPIC, [b, ""], 250, T0 + 3_700)
    svc.flush()
    (path,) = (tmp_path / "index").iterdir()
    assert re.fullmatch(r"\d{17}", path.name)
    data = path.read_bytes()
    assert len(data) == 40 + SLOTS * 4 + ENTRIES * 20 == index_file_size(SLOTS, ENTRIES)

    header = struct.unpack(">qqqqii", data[:40])
    assert header == (T0, T0 + 3_700, 100, 250, 1, 3)  # one slot in use, entries 1 and 2

    slots = struct.unpack(f">{SLOTS}i", data[40 : 40 + SLOTS * 4])
    assert slots == tuple(2 if s == slot_of(a) else 0 for s in range(SLOTS))

    base = 40 + SLOTS * 4
    assert data[base : base + 20] == bytes(20)  # entry 0 unused
    e1 = struct.unpack(">iqii", data[base + 20 : base + 40])
    e2 = struct.unpack(">iqii", data[base + 40 : base + 60])
    assert e1 == (key_hash(TOPIC, a), 100, 0, 0)
    assert e2 == (key_hash(TOPIC, b), 250, 3, 1)  # 3.7 s later -> 3; chained to entry 1
    assert data[base + 60 :] == bytes(len(data) - base - 60)

    (f,) = svc.files()
    assert header_fields(f) == (path, T0, T0 + 3_700, 100, 250, 3, 1)
    assert list(f.entries()) == [e1, e2]
    svc.close()


def test_new_file_starts_at_index_count_one(tmp_path: Path) -> None:
    svc = new_service(tmp_path)
    svc.build_index(TOPIC, ["x"], 0, T0)
    svc.truncate(0)
    assert svc.files() == []
    svc.build_index(TOPIC, ["x"], 0, T0)
    (f,) = svc.files()
    assert f.index_count == 2 and f.begin_phy_offset == 0
    svc.close()


def test_file_name_is_local_time_and_bumped_by_one_ms(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    now = T0 + 999  # the last ms of a second: the bump carries into the next second
    monkeypatch.setattr(index_module, "_now_ms", lambda: now)
    svc = new_service(tmp_path, entries=2)  # one entry per file: every message rolls
    for i in range(3):
        svc.build_index(TOPIC, ["k"], i, T0)
    names = [f.path.name for f in svc.files()]
    first = datetime.fromtimestamp(T0 // 1000).strftime("%Y%m%d%H%M%S") + "999"
    second = datetime.fromtimestamp(T0 // 1000 + 1).strftime("%Y%m%d%H%M%S")
    assert names == [first, second + "000", second + "001"] == sorted(names)
    assert index_file_name(now) == first
    svc.close()


# -- build and query -------------------------------------------------------------------------
def test_query_newest_first_with_max_num(tmp_path: Path) -> None:
    svc = new_service(tmp_path, entries=1000)
    keys = keys_in_one_slot(3)  # all chains interleave in one slot
    msgs = [Msg(i * 100, T0 + i * 1000, (keys[i % 3],)) for i in range(30)]
    build(svc, msgs)
    k0 = [m.phy for m in reversed(msgs) if m.keys == (keys[0],)]
    assert svc.query_offsets(TOPIC, keys[0], 100, 0, 2**62) == k0
    assert svc.query_offsets(TOPIC, keys[0], 4, 0, 2**62) == k0[:4]
    assert svc.query_offsets(TOPIC, keys[0], 0, 0, 2**62) == []
    assert svc.query_offsets(TOPIC, "absent", 100, 0, 2**62) == []
    assert svc.query_offsets("OtherTopic", keys[0], 100, 0, 2**62) == []
    svc.close()


def test_equal_hashes_are_all_candidates(tmp_path: Path) -> None:
    svc = new_service(tmp_path)
    a, b = SAME_HASH
    svc.build_index(TOPIC, [a], 10, T0)
    svc.build_index(TOPIC, [b], 20, T0)
    svc.build_index(TOPIC, ["other"], 30, T0)
    assert svc.query_offsets(TOPIC, a, 10, 0, 2**62) == [20, 10]
    assert svc.query_offsets(TOPIC, b, 10, 0, 2**62) == [20, 10]
    svc.close()


def test_several_keys_per_message_and_empty_keys(tmp_path: Path) -> None:
    svc = new_service(tmp_path)
    svc.build_index(TOPIC, ["UNIQ1", "a", "", "b"], 0, T0)
    svc.build_index(TOPIC, ["UNIQ2", "b", "b"], 100, T0)  # a key twice: one offset
    svc.build_index(TOPIC, ["", ""], 200, T0)  # nothing to index
    (f,) = svc.files()
    assert f.index_count == 1 + 3 + 3
    assert f.end_phy_offset == 100
    assert svc.query_offsets(TOPIC, "b", 10, 0, 2**62) == [100, 0]
    assert svc.query_offsets(TOPIC, "a", 10, 0, 2**62) == [0]
    assert svc.query_offsets(TOPIC, "UNIQ2", 10, 0, 2**62) == [100]
    assert svc.query_offsets(TOPIC, "", 10, 0, 2**62) == []
    svc.close()


def test_already_indexed_offsets_are_skipped(tmp_path: Path) -> None:
    svc = new_service(tmp_path)
    svc.build_index(TOPIC, ["a"], 0, T0)
    svc.build_index(TOPIC, ["a"], 100, T0)
    svc.build_index(TOPIC, ["a"], 100, T0)  # dispatched again after a restart
    svc.build_index(TOPIC, ["a"], 50, T0)
    assert svc.files()[0].index_count == 3
    assert svc.query_offsets(TOPIC, "a", 10, 0, 2**62) == [100, 0]
    svc.close()


def test_time_range_filtering(tmp_path: Path) -> None:
    svc = new_service(tmp_path, entries=1000)
    msgs = [Msg(i * 10, T0 + i * 1000, ("k",)) for i in range(20)]
    build(svc, msgs)

    def q(begin: int, end: int) -> list[int]:
        return svc.query_offsets(TOPIC, "k", 100, begin, end)

    assert q(T0 + 5_000, T0 + 9_000) == [90, 80, 70, 60, 50]
    assert q(T0 + 5_000, T0 + 9_000) == expected(msgs, TOPIC, "k", 100, T0 + 5_000, T0 + 9_000)
    assert q(T0 + 5_000, T0 + 5_000) == [50]
    assert q(T0 + 5_500, T0 + 5_600) == [50]  # inside message 5's second
    assert q(T0 - 10_000, T0 - 1) == []
    assert q(T0 + 20_000, T0 + 30_000) == []
    assert q(T0 + 9_000, T0 + 5_000) == []  # begin > end
    assert svc.query_offsets(TOPIC, "k", 2, T0 + 5_000, T0 + 9_000) == [90, 80]
    svc.close()


def test_time_diff_is_whole_seconds_and_range_has_no_misses(tmp_path: Path) -> None:
    svc = new_service(tmp_path, entries=1000)
    rng = random.Random(7)
    ts, msgs = T0 + 123, []
    for i in range(200):
        msgs.append(Msg(i * 10, ts, ("k",)))
        ts += rng.randint(0, 700)
    build(svc, msgs)
    (f,) = svc.files()
    assert [d for _, _, d, _ in f.entries()] == [(m.ts - msgs[0].ts) // 1000 for m in msgs]
    for _ in range(100):
        begin = rng.randint(T0, ts)
        end = begin + rng.randint(0, 5_000)
        got = svc.query_offsets(TOPIC, "k", 1000, begin, end)
        inside = [m.phy for m in reversed(msgs) if begin <= m.ts <= end]
        assert set(inside) <= set(got)  # never a miss
        assert got == sorted(got, reverse=True)
        by_phy = {m.phy: m.ts for m in msgs}
        assert all(begin - 999 <= by_phy[p] <= end + 999 for p in got)  # at most 1 s off
    svc.close()


def test_random_workload_matches_model(tmp_path: Path) -> None:
    keys = [f"key-{i}" for i in range(40)] + list(SAME_HASH)
    svc, rng, msgs = random_service(tmp_path, 1, keys, 400)  # ~600 entries: a dozen files
    assert len(svc.files()) >= 10
    assert_all_queries(svc, msgs, keys)
    for _ in range(50):
        key = rng.choice(keys)
        begin = rng.randint(T0, msgs[-1].ts)
        end = begin + rng.randint(0, 60_000)
        # entry times are whole seconds after the file's begin: exact only up to 999 ms
        near = expected(msgs, TOPIC, key, 1000, begin, end + 999)
        inside = expected(msgs, TOPIC, key, 1000, begin + 999, end)
        got = svc.query_offsets(TOPIC, key, 1000, begin, end)
        assert set(inside) <= set(got) <= set(near)
        assert got == [p for p in near if p in got]
        assert svc.query_offsets(TOPIC, key, 5, begin, end) == got[:5]
    svc.close()


# -- rolling and reloading -------------------------------------------------------------------
def test_rolls_over_files_and_queries_across_them(tmp_path: Path) -> None:
    svc = new_service(tmp_path)
    msgs = [Msg(i * 100, T0 + i * 1000, (f"u{i}", "common")) for i in range(100)]
    build(svc, msgs)  # 200 entries, 49 per file
    files = svc.files()
    assert len(files) == 5
    assert [f.index_count for f in files] == [50, 50, 50, 50, 5]
    assert [f.path.name for f in files] == sorted(f.path.name for f in files)
    for f in files:
        entries = list(f.entries())
        assert len(entries) == f.index_count - 1
        assert f.begin_phy_offset == entries[0][1] and f.end_phy_offset == entries[-1][1]
        assert f.begin_timestamp == T0 + f.begin_phy_offset * 10
        assert f.end_timestamp == T0 + f.end_phy_offset * 10
    # message 24's two keys straddle the first two files
    assert files[0].end_phy_offset == files[1].begin_phy_offset == 2400
    assert svc.query_offsets(TOPIC, "common", 1000, 0, 2**62) == [m.phy for m in msgs[::-1]]
    assert svc.query_offsets(TOPIC, "u24", 10, 0, 2**62) == [2400]
    assert svc.query_offsets(TOPIC, "common", 3, T0 + 30_000, T0 + 60_000) == [6000, 5900, 5800]
    assert svc.max_phy_offset() == 9900
    assert svc.last_timestamp_ms() == T0 + 99_000
    svc.close()


def test_reload_gives_the_same_answers(tmp_path: Path) -> None:
    keys = [f"key-{i}" for i in range(30)]
    svc, rng, msgs = random_service(tmp_path, 2, keys, 150)
    before = {k: svc.query_offsets(TOPIC, k, 1000, 0, 2**62) for k in keys}
    headers = [header_fields(f) for f in svc.files()]
    svc.close()

    again = new_service(tmp_path)
    assert [header_fields(f) for f in again.files()] == headers
    assert {k: again.query_offsets(TOPIC, k, 1000, 0, 2**62) for k in keys} == before
    assert again.max_phy_offset() == msgs[-1].phy
    more = random_msgs(rng, 60, keys, msgs[-1].phy + 1, msgs[-1].ts)
    build(again, more)
    assert_all_queries(again, msgs + more, keys)
    again.close()


def test_load_creates_missing_dir_and_ignores_other_names(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "a" / "index", SLOTS, ENTRIES)
    svc.load()
    assert svc.files() == [] and svc.max_phy_offset() == 0 and svc.last_timestamp_ms() == 0
    assert svc.query_offsets(TOPIC, "k", 10, 0, 2**62) == []
    with pytest.raises(RuntimeError):
        svc.load()
    (tmp_path / "a" / "index" / "README").write_text("not an index file")
    (tmp_path / "a" / "index" / "20240101000000000.tmp").write_bytes(b"half created")
    svc.close()
    svc.load()
    assert svc.files() == []
    assert not (tmp_path / "a" / "index" / "20240101000000000.tmp").exists()
    svc.close()


def test_build_before_load_is_an_error(tmp_path: Path) -> None:
    svc = IndexService(tmp_path / "index", SLOTS, ENTRIES)
    with pytest.raises(RuntimeError):
        svc.build_index(TOPIC, ["k"], 0, T0)


def test_load_rejects_a_file_of_other_sizes(tmp_path: Path) -> None:
    svc = new_service(tmp_path)
    svc.build_index(TOPIC, ["k"], 0, T0)
    svc.close()
    other = IndexService(tmp_path / "index", SLOTS + 1, ENTRIES)
    with pytest.raises(ValueError, match="size"):
        other.load()


def test_load_unlinks_entries_written_past_index_count(tmp_path: Path) -> None:
    """A process killed between an entry (and its slot) and the header leaves them behind."""
    a, b = keys_in_one_slot(2)
    svc = new_service(tmp_path)
    svc.build_index(TOPIC, [a], 0, T0)
    svc.build_index(TOPIC, [b], 100, T0 + 1000)
    (f,) = svc.files()
    header_before = f.path.read_bytes()[:40]
    svc.build_index(TOPIC, [a, b, "c"], 200, T0 + 2000)
    svc.close()
    with f.path.open("r+b") as fh:  # the header of before the third message
        fh.write(header_before)

    again = new_service(tmp_path)
    (f,) = again.files()
    assert f.index_count == 3 and f.end_phy_offset == 100
    assert again.max_phy_offset() == 100
    assert again.query_offsets(TOPIC, a, 10, 0, 2**62) == [0]
    assert again.query_offsets(TOPIC, b, 10, 0, 2**62) == [100]
    assert again.query_offsets(TOPIC, "c", 10, 0, 2**62) == []
    data = f.path.read_bytes()
    assert data[40 + slot_of(a) * 4 : 44 + slot_of(a) * 4] == struct.pack(">i", 2)
    assert data[40 + SLOTS * 4 + 3 * 20 :] == bytes(len(data) - 40 - SLOTS * 4 - 60)
    again.build_index(TOPIC, [a, b, "c"], 200, T0 + 2000)  # dispatched again
    assert again.query_offsets(TOPIC, a, 10, 0, 2**62) == [200, 0]
    assert again.query_offsets(TOPIC, "c", 10, 0, 2**62) == [200]
    again.close()


def test_load_drops_a_message_cut_short_across_two_files(tmp_path: Path) -> None:
    svc = new_service(tmp_path, entries=5)  # 4 entries per file
    svc.build_index(TOPIC, ["a", "b"], 0, T0)
    svc.build_index(TOPIC, ["c", "d", "e"], 100, T0 + 1000)  # c, d in file 1; e in file 2
    first, second = svc.files()
    assert (first.end_phy_offset, second.begin_phy_offset) == (100, 100)
    svc.close()
    with second.path.open("r+b") as fh:  # died before the second file's header was written
        fh.write(struct.pack(">qqqqii", 0, 0, 0, 0, 0, 1))

    again = new_service(tmp_path, entries=5)
    first, second = again.files()
    assert (first.index_count, first.end_phy_offset, second.index_count) == (3, 0, 1)
    assert again.max_phy_offset() == 0
    for key in "cde":
        assert again.query_offsets(TOPIC, key, 10, 0, 2**62) == []
    again.build_index(TOPIC, ["c", "d", "e"], 100, T0 + 1000)  # dispatched again
    for key in "abcde":
        assert again.query_offsets(TOPIC, key, 10, 0, 2**62) == [0 if key in "ab" else 100]
    assert [f.index_count for f in again.files()] == [3, 4]  # writing goes on in the newest
    again.close()


# A child that indexes "ab" at 0 and "cde" at 100 into files of 4 entries (c, d in the first,
# e in the second) and SIGKILLs itself at one point of the roll between them.
KILLED_INDEXER = """
import os, signal, sys
from pathlib import Path
from store import index

point = sys.argv[2]
create, count_in = index.IndexFile.create.__func__, index.IndexFile._count_in
files = []

def die(at):
    if at == point:
        os.kill(os.getpid(), signal.SIGKILL)

def creating(cls, path, slots, num):
    if files:
        die("creating next")
    files.append(create(cls, path, slots, num))
    if len(files) == 2:
        die("next created")
    return files[-1]

def counting_in(self, *args):
    full = self is files[0] and len(files) == 2
    if full:
        die("counting in full")
    count_in(self, *args)
    if full:
        die("full counted in")

index.IndexFile.create = classmethod(creating)
index.IndexFile._count_in = counting_in
svc = index.IndexService(Path(sys.argv[1]), hash_slot_num=7, index_num=5)
svc.load()
svc.build_index("TopicA", ["a", "b"], 0, 1_700_000_000_000)
svc.build_index("TopicA", ["c", "d", "e"], 100, 1_700_000_001_000)
"""


@pytest.mark.parametrize("point", ["creating next", "next created", "counting in full",
                                   "full counted in"])
def test_kill_while_rolling_in_the_middle_of_a_message(tmp_path: Path, point: str) -> None:
    """Whatever a kill leaves, loading and dispatching again indexes every key: the message
    split across the two files must not count as indexed while part of it is missing."""
    p = subprocess.run([sys.executable, "-c", KILLED_INDEXER, str(tmp_path / "index"), point],
                       cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == -9, p.stderr
    again = new_service(tmp_path, entries=5)
    again.build_index_batch([(TOPIC, ["a", "b"], 0, T0), (TOPIC, ["c", "d", "e"], 100, T0 + 1000)])
    for key in "abcde":
        assert again.query_offsets(TOPIC, key, 10, 0, 2**62) == [0 if key in "ab" else 100], key
    again.close()


def test_reader_passes_over_an_entry_not_yet_counted(tmp_path: Path) -> None:
    """A query between the slot write and the indexCount update still sees the older chain."""
    svc = new_service(tmp_path)
    svc.build_index(TOPIC, ["k"], 0, T0)
    svc.build_index(TOPIC, ["k"], 100, T0)
    (f,) = svc.files()
    f.index_count -= 1  # as if the writer had not yet counted entry 2
    assert svc.query_offsets(TOPIC, "k", 10, 0, 2**62) == [0]
    f.index_count += 1
    assert svc.query_offsets(TOPIC, "k", 10, 0, 2**62) == [100, 0]
    svc.close()


# -- truncate and delete ---------------------------------------------------------------------
def test_truncate_in_the_middle_of_a_file(tmp_path: Path) -> None:
    keys = keys_in_one_slot(4) + ["x", "y"]
    svc, rng, msgs = random_service(tmp_path, 3, keys, 25, entries=1000)  # fits one file
    cut = msgs[15].phy
    svc.truncate(cut)
    (f,) = svc.files()
    kept = [m for m in msgs if m.phy < cut]
    assert f.index_count == 1 + sum(len(m.keys) for m in kept)
    assert f.end_phy_offset == kept[-1].phy == svc.max_phy_offset()
    assert kept[-1].ts <= f.end_timestamp < kept[-1].ts + 1000
    assert f.hash_slot_count == len({key_hash(TOPIC, k) % SLOTS for m in kept for k in m.keys})
    assert all(phy < cut for _, phy, _, _ in f.entries())
    assert_all_queries(svc, msgs, keys, below=cut)
    # slots and entries on disk describe only what is left
    data = f.path.read_bytes()
    base = 40 + SLOTS * 4
    assert data[base + f.index_count * 20 :] == bytes(len(data) - base - f.index_count * 20)
    assert max(struct.unpack(f">{SLOTS}i", data[40:base])) == f.index_count - 1

    more = random_msgs(rng, 10, keys, cut, msgs[15].ts)  # dispatch resumes at the cut
    build(svc, more)
    assert_all_queries(svc, kept + more, keys)
    assert_all_queries_after_reload(tmp_path, svc, kept + more, keys, entries=1000)


def test_truncate_across_files(tmp_path: Path) -> None:
    keys = [f"key-{i}" for i in range(12)]
    svc, rng, msgs = random_service(tmp_path, 4, keys, 200)
    files = svc.files()
    assert len(files) >= 5
    middle = files[2]
    entries = list(middle.entries())
    cut = entries[len(entries) // 2][1]
    assert middle.begin_phy_offset < cut <= middle.end_phy_offset
    svc.truncate(cut)
    left = svc.files()
    assert [f.path for f in left] == [f.path for f in files[:3]]
    assert not any(f.path.exists() for f in files[3:])
    assert svc.max_phy_offset() < cut
    assert_all_queries(svc, msgs, keys, below=cut)

    kept = [m for m in msgs if m.phy < cut]
    more = random_msgs(rng, 100, keys, cut, kept[-1].ts)
    build(svc, more)
    assert_all_queries(svc, kept + more, keys)
    assert_all_queries_after_reload(tmp_path, svc, kept + more, keys)


def test_truncate_at_a_file_start_and_before_everything(tmp_path: Path) -> None:
    svc = new_service(tmp_path)
    msgs = [Msg(i * 100, T0 + i, ("k",)) for i in range(120)]  # 49 entries per file
    build(svc, msgs)
    assert len(svc.files()) == 3
    second = svc.files()[1]
    svc.truncate(second.begin_phy_offset)
    assert len(svc.files()) == 1 and not second.path.exists()
    assert svc.query_offsets(TOPIC, "k", 1000, 0, 2**62) == [m.phy for m in msgs[48::-1]]
    svc.truncate(10**9)  # nothing past it
    assert svc.files()[0].index_count == 50
    svc.truncate(0)
    assert svc.files() == [] and svc.max_phy_offset() == 0
    assert list((tmp_path / "index").iterdir()) == []
    build(svc, msgs[:3])
    assert svc.query_offsets(TOPIC, "k", 1000, 0, 2**62) == [200, 100, 0]
    svc.close()


def test_delete_expired_keeps_the_newest_file(tmp_path: Path) -> None:
    svc = new_service(tmp_path)
    msgs = [Msg(i * 100, T0 + i * 1000, ("k",)) for i in range(150)]
    build(svc, msgs)
    files = svc.files()
    assert len(files) == 4
    assert svc.delete_expired(files[0].end_phy_offset) == 0  # "<", not "<="
    assert svc.delete_expired(files[1].end_phy_offset + 1) == 2
    assert [f.path for f in svc.files()] == [f.path for f in files[2:]]
    assert not files[0].path.exists() and not files[1].path.exists()
    assert svc.query_offsets(TOPIC, "k", 1000, 0, 2**62) == [m.phy for m in msgs[:97:-1]]
    assert svc.delete_expired(10**12) == 1
    (newest,) = svc.files()
    assert newest.path == files[3].path
    assert svc.delete_expired(10**12) == 0
    build(svc, [Msg(10**6, T0 + 10**6, ("k",))])
    assert svc.query_offsets(TOPIC, "k", 2, 0, 2**62) == [10**6, 14900]
    svc.close()


# -- threads ---------------------------------------------------------------------------------
def test_queries_while_building_and_rolling(tmp_path: Path) -> None:
    svc = new_service(tmp_path, slots=3, entries=20)
    keys = [f"k{i}" for i in range(5)]
    msgs = [Msg(i * 10, T0 + i * 100, (keys[i % 5], f"u{i}")) for i in range(3000)]
    key_of = {m.phy: m.keys[0] for m in msgs}
    done = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            while not done.is_set():
                for key in keys:
                    got = svc.query_offsets(TOPIC, key, 50, 0, 2**62)
                    assert got == sorted(set(got), reverse=True)
                    assert all(key_of[p] == key for p in got)
                svc.delete_expired(0)
        except BaseException as e:
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    build(svc, msgs)
    done.set()
    for t in readers:
        t.join()
    assert errors == []
    assert_all_queries(svc, msgs, keys)
    svc.close()


def test_flush_and_close(tmp_path: Path) -> None:
    svc = new_service(tmp_path)
    svc.build_index(TOPIC, ["k"], 0, T0)
    (f,) = svc.files()
    assert f._dirty
    svc.flush()
    assert not f._dirty
    svc.close()
    assert svc.files() == []
    svc.load()
    assert svc.query_offsets(TOPIC, "k", 10, 0, 2**62) == [0]
    assert len(f.path.read_bytes()) == INDEX_HEADER_SIZE + SLOTS * 4 + ENTRIES * INDEX_SIZE
    svc.close()
