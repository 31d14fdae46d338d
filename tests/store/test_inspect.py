"""`python -m store.inspect`: the read-only verifier of a store directory."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.constants import SysFlag
from store.config import StoreConfig
from store.constants import CQ_STORE_UNIT_SIZE
from store.inspect import infer_index_geometry, inspect_store
from store.message import Message
from store.message_store import DefaultMessageStore

REPO = Path(__file__).resolve().parents[2]
FILE_SIZE = 16 * 1024
TOPICS = ("InspA", "InspB")


@dataclasses.dataclass(frozen=True)
class Put:
    offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    keys: tuple[str, ...]
    prepared: bool = False


def config(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=FILE_SIZE,
                       mapped_file_size_consume_queue=50 * CQ_STORE_UNIT_SIZE,
                       max_hash_slot_num=13, max_index_num=100)


def build(root: Path, count: int = 220) -> list[Put]:
    store = DefaultMessageStore(config(root))
    store.load()
    store.start()
    puts = []
    for i in range(count):
        topic, qid = TOPICS[i % 2], i % 4
        prepared = i == 100  # a prepared transaction message: no consume-queue entry
        props = {"TAGS": f"t{i % 3}", "KEYS": f"k{i} shared", "UNIQ_KEY": f"u{i}"}
        msg = Message(topic, b"body-%d " % i * (1 + i % 9), props, queue_id=qid,
                      sys_flag=int(SysFlag.TRANSACTION_PREPARED) if prepared else 0)
        r = store.put_message(msg)
        assert r.ok and r.append is not None
        puts.append(Put(r.append.commit_log_offsets[0], r.append.wrote_bytes, topic, qid,
                        r.append.queue_offsets[0], (f"k{i}", "shared", f"u{i}"), prepared))
    store.shutdown()
    return puts


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Put]]:
    root = tmp_path_factory.mktemp("inspect") / "store"
    return root, build(root)


@pytest.fixture
def store(base: tuple[Path, list[Put]], tmp_path: Path) -> tuple[Path, list[Put]]:
    """A fresh copy of the clean store for each test."""
    root, puts = base
    copy = tmp_path / "store"
    shutil.copytree(root, copy)
    return copy, puts


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "store.inspect", str(root), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def run_json(root: Path) -> tuple[int, dict]:
    p = run(root, "--json")
    return p.returncode, json.loads(p.stdout)


def cl_file(root: Path, offset: int) -> tuple[Path, int]:
    start = offset - offset % FILE_SIZE
    return root / "commitlog" / f"{start:020d}", offset - start


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def flip(path: Path, pos: int) -> None:
    with open(path, "rb") as f:
        f.seek(pos)
        b = f.read(1)[0]
    patch(path, pos, bytes([b ^ 0xFF]))


def test_clean_store_counts(store: tuple[Path, list[Put]]) -> None:
    root, puts = store
    p = run(root)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK: no problems found" in p.stdout
    code, rep = run_json(root)
    assert code == 0 and rep["clean"] and rep["problem_count"] == 0
    assert rep["warnings"] == [] and rep["first_problem"] is None and not rep["abort"]
    end = puts[-1].offset + puts[-1].size
    assert rep["commitlog"] == {"files": end // FILE_SIZE + 1, "file_size": FILE_SIZE,
                                "min_offset": 0, "max_offset": end, "records": len(puts)}
    records = collections.Counter((u.topic, u.queue_id) for u in puts)
    entries = collections.Counter((u.topic, u.queue_id) for u in puts if not u.prepared)
    got = {(q["topic"], q["queue_id"]): q for q in rep["queues"]}
    assert set(got) == set(records)
    for key, q in got.items():
        assert (q["records"], q["entries"], q["problems"]) == (records[key], entries[key], 0)
    assert rep["index"]["entries"] == sum(len(u.keys) for u in puts)
    assert rep["index"]["files"] >= 2  # 100 entries per file: the index rolled over


def test_read_only(store: tuple[Path, list[Put]]) -> None:
    root, puts = store
    (root / "abort").touch()  # DefaultMessageStore.load() would recover; inspect must not
    flip(*cl_file(root, puts[-1].offset + 100))

    def snapshot() -> dict[str, tuple[str, int]]:
        return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                           p.stat().st_mtime_ns)
                for p in sorted(root.rglob("*")) if p.is_file()}

    before = snapshot()
    assert run(root).returncode == 1
    assert snapshot() == before


def test_flipped_body_byte(store: tuple[Path, list[Put]]) -> None:
    root, puts = store
    victim = puts[150]
    body_pos = victim.offset + 88 + 3  # IPv4 hosts: the body starts at byte 88
    path, pos = cl_file(root, body_pos)
    flip(path, pos)
    p = run(root)
    assert p.returncode == 1
    assert f"commitlog offset {victim.offset}" in p.stdout
    code, rep = run_json(root)
    assert code == 1 and not rep["clean"]
    first = rep["first_problem"]
    assert first["file"] == f"commitlog/{path.name}"
    assert first["offset"] == victim.offset % FILE_SIZE
    assert "CRC" in first["message"] and str(victim.offset) in first["message"]
    assert rep["commitlog"]["max_offset"] == victim.offset
    assert rep["commitlog"]["records"] == 150


def test_garbage_in_consume_queue_entry(store: tuple[Path, list[Put]]) -> None:
    root, puts = store
    victim = next(u for u in puts if u.queue_offset == 7 and not u.prepared)
    path = root / "consumequeue" / victim.topic / str(victim.queue_id) / f"{0:020d}"
    patch(path, 7 * CQ_STORE_UNIT_SIZE, b"\x00\x00\x00\x00\x00\x01\x02\x03garbage!!!!!")
    code, rep = run_json(root)
    assert code == 1
    first = rep["first_problem"]
    assert first["file"] == f"consumequeue/{victim.topic}/{victim.queue_id}/{path.name}"
    assert first["offset"] == 7 * CQ_STORE_UNIT_SIZE
    assert "entry 7" in first["message"]
    messages = " | ".join(p["message"] for p in rep["problems"])
    assert f"record at commitlog offset {victim.offset}" in messages  # now lacks its entry


@pytest.mark.parametrize("field", ["size", "tags"])
def test_consume_queue_entry_disagrees(store: tuple[Path, list[Put]], field: str) -> None:
    root, puts = store
    victim = next(u for u in puts if u.queue_offset == 3 and not u.prepared)
    path = root / "consumequeue" / victim.topic / str(victim.queue_id) / f"{0:020d}"
    pos = 3 * CQ_STORE_UNIT_SIZE + (11 if field == "size" else 19)
    flip(path, pos)
    rep = inspect_store(root)
    assert rep.problem_count >= 1
    assert rep.problems[0]["file"].startswith("consumequeue/")
    assert ("size" if field == "size" else "tags code") in rep.problems[0]["message"]


def test_index_entry_pointing_at_wrong_record(store: tuple[Path, list[Put]]) -> None:
    root, puts = store
    index_file = sorted((root / "index").iterdir())[0]
    entry2 = 40 + 13 * 4 + 2 * 20  # header, 13 slots, entry 0 unused
    patch(index_file, entry2 + 4, puts[5].offset.to_bytes(8, "big"))  # phyOffset of entry 2
    rep = inspect_store(root)
    assert rep.problem_count >= 1
    first = rep.problems[0]
    assert first["file"] == f"index/{index_file.name}" and first["offset"] == entry2
    assert "keyHash" in first["message"]


def test_index_entry_past_the_end(store: tuple[Path, list[Put]]) -> None:
    root, puts = store
    index_file = sorted((root / "index").iterdir())[-1]
    entry1 = 40 + 13 * 4 + 20
    end = puts[-1].offset + puts[-1].size
    patch(index_file, entry1 + 4, (end + 1000).to_bytes(8, "big"))
    rep = inspect_store(root)
    assert any("past the end of data" in p["message"] for p in rep.problems)


def test_garbage_after_end_of_data(store: tuple[Path, list[Put]]) -> None:
    root, puts = store
    end = puts[-1].offset + puts[-1].size
    path, pos = cl_file(root, end + 500)
    patch(path, pos, b"\x07")
    code, rep = run_json(root)
    assert code == 1
    assert rep["first_problem"]["file"] == f"commitlog/{path.name}"
    assert rep["first_problem"]["offset"] == pos
    assert "garbage after the end of data" in rep["first_problem"]["message"]


def test_dispatch_behind_is_a_warning_only_with_abort(store: tuple[Path, list[Put]]) -> None:
    root, puts = store
    cut = puts[-5].offset  # the newest 5 records were never dispatched
    for u in puts[-5:]:
        if not u.prepared:
            path = root / "consumequeue" / u.topic / str(u.queue_id)
            f = sorted(path.iterdir())[-1]
            patch(f, u.queue_offset * CQ_STORE_UNIT_SIZE - int(f.name), bytes(20))
    keep = inspect_store(root)
    assert keep.problem_count == 1 and "dispatch behind" in keep.problems[0]["message"]
    (root / "abort").touch()
    code, rep = run_json(root)
    assert code == 0, rep
    assert rep["abort"]
    assert any(w.startswith("dispatch behind: 5 record(s)") and str(cut) in w
               for w in rep["warnings"]), rep["warnings"]
    p = run(root)
    assert "abort" in p.stdout and "dispatch behind" in p.stdout


def test_missing_entry_in_the_middle_is_a_problem_even_with_abort(
        store: tuple[Path, list[Put]]) -> None:
    root, puts = store
    (root / "abort").touch()
    victim = puts[20]
    path = root / "consumequeue" / victim.topic / str(victim.queue_id) / f"{0:020d}"
    patch(path, victim.queue_offset * CQ_STORE_UNIT_SIZE, bytes(20))
    rep = inspect_store(root)
    assert rep.problem_count >= 1
    assert any("garbage after the end of the consume queue" in p["message"]
               for p in rep.problems)


def test_usage_errors(tmp_path: Path) -> None:
    p = run(tmp_path / "missing")
    assert p.returncode == 2 and "no such directory" in p.stderr
    (tmp_path / "empty").mkdir()
    p = run(tmp_path / "empty")
    assert p.returncode == 2 and "not a store" in p.stderr
    p = subprocess.run([sys.executable, "-m", "store.inspect"], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2


def test_explicit_sizes(store: tuple[Path, list[Put]]) -> None:
    root, _ = store
    assert run(root, "--commitlog-file-size", str(FILE_SIZE), "--cq-file-size", "1000",
               "--index-slots", "13", "--index-num", "100").returncode == 0
    p = run(root, "--commitlog-file-size", str(FILE_SIZE * 2))
    assert p.returncode == 1 and "file size" in p.stdout


def test_torn_tail_is_a_warning_only_with_abort(store: tuple[Path, list[Put]]) -> None:
    """A record cut short by a crash: its first bytes after the end of data, zeros after."""
    root, puts = store
    last = puts[-1]
    end = last.offset + last.size
    src, src_pos = cl_file(root, last.offset)
    patch(*cl_file(root, end), src.read_bytes()[src_pos : src_pos + 100])
    code, rep = run_json(root)
    assert code == 1 and rep["first_problem"]["offset"] == end % FILE_SIZE
    assert f"invalid record at commitlog offset {end}" in rep["first_problem"]["message"]
    (root / "abort").touch()
    code, rep = run_json(root)
    assert code == 0, rep
    assert rep["commitlog"]["max_offset"] == end
    assert [w for w in rep["warnings"] if w.startswith("torn tail")], rep["warnings"]
    patch(*cl_file(root, end + 400), b"\x01")  # something after it: not a torn write
    code, rep = run_json(root)
    assert code == 1 and rep["first_problem"]["offset"] == end % FILE_SIZE


def test_an_empty_last_queue_file_after_a_crash_is_a_warning(
        store: tuple[Path, list[Put]]) -> None:
    """SIGKILL between creating a consume-queue file and sizing it leaves it empty; loading
    the store sizes it, so only a crashed store may show one, and only as its last file."""
    root, _ = store
    qdir = root / "consumequeue" / "InspA" / "0"
    last = max(int(p.name) for p in qdir.iterdir())
    (qdir / f"{last + 50 * CQ_STORE_UNIT_SIZE:020d}").touch()
    code, rep = run_json(root)
    assert code != 0 and "file size 0" in rep["first_problem"]["message"]
    (root / "abort").touch()
    code, rep = run_json(root)
    assert rep["problem_count"] == 0, rep["problems"]
    assert any("empty, its creation cut short by a crash" in w for w in rep["warnings"])
    store_ = DefaultMessageStore(config(root))
    store_.load()  # and the store takes it as a new file
    store_.shutdown()


def test_mqstore_script_works_from_a_directory_holding_store(tmp_path: Path) -> None:
    """Issue 16 item 9: run from a broker's data directory (it holds a `store/` folder),
    `python -m store.inspect` imports that folder instead of the package; the console
    script does not."""
    work = tmp_path / "data"
    build(work / "store", count=20)
    script = Path(sys.executable).parent / "mqstore"
    assert script.exists(), "the mqstore console script is not installed (pip install -e .)"
    p = subprocess.run([str(script), "inspect", "store", "--json"], cwd=work,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["problem_count"] == 0
    p = subprocess.run([str(script), "inspect", "missing"], cwd=work, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "mqstore inspect" not in p.stdout
    p = subprocess.run([str(script)], cwd=work, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "inspect" in p.stderr


def test_index_geometry_of_a_first_file_with_a_few_entries(tmp_path: Path) -> None:
    """The sigkill rounds killed a writer after 3 records (3 keys each): with 4001 slots the
    first index file also read as 3991 slots (its entries shifted onto zero slots: begin phy
    0, the last message's keys all at the end phy), and inspect reported its chains broken."""
    root = tmp_path / "store"
    cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=FILE_SIZE,
                      max_hash_slot_num=4001, max_index_num=8000)
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    for i in range(3):
        props = {"KEYS": f"key{i} alt-key{i}", "UNIQ_KEY": f"Ukey{i}"}
        assert store.put_message(Message("CrashA", b"x" * (i + 1), props, queue_id=0)).ok
    store.shutdown()
    [index] = (root / "index").iterdir()
    assert infer_index_geometry([index.read_bytes()]) == (4001, 8000)
    code, rep = run_json(root)
    assert code == 0 and rep["problem_count"] == 0 and not rep["warnings"], rep["problems"][:3]


def test_a_reader_that_closed_the_pipe_is_no_traceback(
        base: tuple[Path, list[Put]]) -> None:
    """`mqstore inspect DIR --json | head`: the reader gone before the output is written
    (its end of the pipe closed at once) is no BrokenPipeError traceback."""
    root, _ = base
    for args in (["--json"], []):
        read, write = os.pipe()
        os.close(read)
        try:
            p = subprocess.run([sys.executable, "-m", "store.inspect", str(root), *args],
                               cwd=REPO, stdout=write, stderr=subprocess.PIPE, text=True,
                               timeout=60)
        finally:
            os.close(write)
        assert p.returncode == 0 and p.stderr == "", p.stderr


def test_sizes_out_of_range_are_usage_errors(base: tuple[Path, list[Put]]) -> None:
    root, _ = base
    for args in (["--commitlog-file-size", "0"], ["--cq-file-size", "-1"],
                 ["--index-slots", "99999999999999999999999", "--index-num", "1"]):
        p = run(root, *args)
        assert p.returncode == 2 and "error: argument" in p.stderr, (args, p.stderr)
        assert "Traceback" not in p.stderr
