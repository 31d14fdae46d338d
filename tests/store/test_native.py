"""The C fast paths (common/_native.c) against the pure-Python store they stand in for.

Two stores, one with common.native.lib and one without, are fed the same messages with the same
clock: every byte of their commitlogs, consume queues and index files must be equal. The
recovery scan is compared on damaged copies of one commitlog. (`make test` also runs the whole
store suite once more with STORE_NATIVE=0.)
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
from pathlib import Path

import crc32c
import pytest

from common import native
from common.constants import SCHEDULE_TOPIC, SysFlag
from store.commitlog import CommitLog
from store.config import StoreConfig
from store.message import Message
from store.message_store import DefaultMessageStore
from store.scanning import CommitLogScan

from .conftest import SMALL

if native.lib is None:
    if os.environ.get("STORE_NATIVE") == "0":
        pytest.skip("STORE_NATIVE=0: the C fast paths are switched off", allow_module_level=True)
    if shutil.which("cc") or shutil.which("gcc"):
        pytest.fail("common._native was not built although a C compiler is here: "
                    "run `pip install -e .` again and read its output", pytrace=False)
    pytest.skip("no C compiler: the store runs its pure-Python paths", allow_module_level=True)

LIB = native.lib
TOPICS = ["TopicA", "TopicB", "%RETRY%group-1"]


def test_crc32c_matches_the_package() -> None:
    rng = random.Random(1)
    for n in [0, 1, 3, 7, 8, 9, 15, 16, 63, 64, 1000, 1024, 4099]:
        data = rng.randbytes(n)
        assert LIB.crc32c(data) == crc32c.crc32c(data), n
        cut = rng.randrange(n + 1)
        assert LIB.crc32c(data[cut:], LIB.crc32c(data[:cut])) == crc32c.crc32c(data), n


def _messages(seed: int, count: int) -> list[Message]:
    """Every kind of message the append path treats differently."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = i % 12
        props: dict[str, str] = {"TAGS": f"tag{i % 5}", "UNIQ_KEY": f"7F000001{i:024X}"}
        topic = TOPICS[i % len(TOPICS)]
        born_host = ("10.0.0.7", 40000 + i % 3)
        sys_flag = 0
        if kind == 1:
            props["KEYS"] = f"order-{i} user-{i % 7}"
        elif kind == 2:
            props = {}
        elif kind == 3:
            props["TAGS"] = "标签😀"  # UTF-16 surrogate pair in the tags code
            props["KEYS"] = "ключ"
        elif kind == 4:
            born_host = ("::1", 5000)
        elif kind == 5:
            topic = SCHEDULE_TOPIC
            props["DELAY"] = str(1 + i % 5)
            props["REAL_TOPIC"] = "TopicA"
        elif kind == 6:
            sys_flag = int(SysFlag.TRANSACTION_PREPARED)
        elif kind == 7:
            props["KEYS"] = ""
            props["TAGS"] = ""
        elif kind == 8:
            props["KEYS"] = "  spaced   keys  "
            del props["UNIQ_KEY"]
        elif kind == 9:
            props["a" * 300] = "b" * 2000
        body = rng.randbytes(rng.choice([0, 1, 100, 1024, 3000, 9000]))
        out.append(Message(topic, body, props, queue_id=i % 4, flag=i % 3 - 1,
                           sys_flag=sys_flag, born_timestamp=1_700_000_000_000 + i,
                           born_host=born_host, reconsume_times=i % 2,
                           prepared_transaction_offset=i * 3))
    return out


def _store(root: Path, lib: object, monkeypatch: pytest.MonkeyPatch,
           **overrides: object) -> DefaultMessageStore:
    monkeypatch.setattr(native, "lib", lib)
    ticks = itertools.count(1_700_000_000_000, 997)
    cfg = StoreConfig(store_path_root_dir=str(root), **{**SMALL, **overrides})  # type: ignore[arg-type]
    store = DefaultMessageStore(cfg, clock_ms=lambda: next(ticks))
    store.load()
    return store


def _files(root: Path) -> dict[str, bytes]:
    """Every file's bytes by path; index files by their order (their names are wall-clock)."""
    out = {}
    for sub in ("commitlog", "consumequeue"):
        for p in sorted((root / sub).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(root))] = p.read_bytes()
    for n, p in enumerate(sorted((root / "index").iterdir())):
        out[f"index #{n}"] = p.read_bytes()
    return out


def _fill(store: DefaultMessageStore, msgs: list[Message], seed: int) -> list[tuple]:
    rng = random.Random(seed)
    results = []
    i = 0
    while i < len(msgs):
        n = rng.choice([1, 2, 5, 17, 32, 40])
        r = store.commitlog.put_messages(msgs[i : i + n])
        results.append((r.status, r.wrote_offset, r.wrote_bytes, r.commit_log_offsets,
                        r.queue_offsets))
        i += n
        if rng.random() < 0.3:  # dispatch at varied points: runs cut at different places
            store.commitlog.commit()
            store.do_reput()
    store.commitlog.commit()
    store.do_reput()
    return results


@pytest.mark.parametrize("overrides", [{}, {"store_host": ("::1", 10911)},
                                       {"transient_store_pool_enable": True}])
def test_stores_are_byte_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   overrides: dict) -> None:
    msgs = _messages(7, 1500)
    got = {}
    for name, lib in (("native", LIB), ("python", None)):
        store = _store(tmp_path / name, lib, monkeypatch, **overrides)
        results = _fill(store, msgs, seed=3)
        store.running = True
        store.shutdown()
        got[name] = (results, _files(tmp_path / name))
    native_results, native_files = got["native"]
    python_results, python_files = got["python"]
    assert native_results == python_results
    assert sorted(native_files) == sorted(python_files)
    assert len([k for k in native_files if k.startswith("index")]) > 2  # rolled index files
    assert len([k for k in native_files if k.startswith("commitlog")]) > 10
    for path, data in python_files.items():
        assert native_files[path] == data, path


def test_bad_messages_get_the_python_verdict(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    store = _store(tmp_path / "s", LIB, monkeypatch)
    good = Message("TopicA", b"x", {"TAGS": "t"})
    cases = [
        Message("bad topic!", b"x"),
        Message("TopicA", b"x", queue_id=-1),
        Message("TopicA", b"x" * (store.config.max_message_size + 1)),
        Message("TopicA", b"x", {"k": "v" * 40_000}),
        Message("TopicA", b"x", {"k": "\ud800"}),  # not encodable as UTF-8
        Message(SCHEDULE_TOPIC, b"x", {"DELAY": "soon"}),
    ]
    for bad in cases:
        r = store.commitlog.put_messages([good, bad])
        assert r.status.name in ("MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED") or r.error, bad
    assert store.commitlog.max_wrote_offset == 0  # nothing of a refused batch was written
    # Fields only struct can judge: the C path hands them to Python, which raises as before.
    with pytest.raises(Exception):  # noqa: B017 (struct.error, whatever Python raises)
        store.commitlog.put_messages([Message("TopicA", b"x", flag=1 << 40)])
    assert store.commitlog.put_messages([good]).status.name == "PUT_OK"
    store.running = True
    store.shutdown()


def _scan(root: Path, lib: object, monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.setattr(native, "lib", lib)
    cl = CommitLog(StoreConfig(store_path_root_dir=str(root), **SMALL), lambda: 0)  # type: ignore[arg-type]
    cl.queue.load()
    scan = CommitLogScan(cl, 0)
    runs = [list(run) for _, run in scan.runs()]
    result = (runs, scan.end, scan.error)
    cl.queue.close()
    return result


def test_recovery_scan_agrees_on_damaged_commitlogs(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "source"
    store = _store(source, LIB, monkeypatch)
    _fill(store, _messages(11, 300), seed=5)
    store.running = True
    store.shutdown()
    clean = _scan(source, LIB, monkeypatch)
    assert clean == _scan(source, None, monkeypatch)
    assert sum(len(r) for r in clean[0]) == 300 and not clean[2]
    files = sorted((source / "commitlog").iterdir())
    rng = random.Random(9)
    for round_ in range(40):
        damaged = tmp_path / f"damaged{round_}"
        shutil.copytree(source / "commitlog", damaged / "commitlog")
        victim = damaged / "commitlog" / files[rng.randrange(len(files))].name
        data = bytearray(victim.read_bytes())
        for _ in range(rng.choice([1, 1, 2, 8])):
            pos = rng.randrange(len(data))
            data[pos] = (data[pos] + rng.randrange(1, 256)) % 256
        victim.write_bytes(bytes(data))
        assert _scan(damaged, LIB, monkeypatch) == _scan(damaged, None, monkeypatch), round_
        shutil.rmtree(damaged)
