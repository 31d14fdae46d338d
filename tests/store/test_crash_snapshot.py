"""Starts after kill -9 that take the consume queues' positions from the snapshot written while
running (store/cq_snapshot.py) and re-dispatch the commitlog after it, instead of reading every
queue; and the full scan when the snapshot cannot be used.

The writer child (tests/store/crash_writer.py, `new-topics`) writes snapshots during its first
0.6 s only and is killed later, so the last snapshot is older than the last puts and queues of
topics made after it hold acknowledged messages. Checked as test_crash.py's sigkill rounds do:
every acknowledged message readable by queue offset, offsetMsgId and key, queue offsets without
holes, `store.inspect` clean.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from common.codec import decode_offset_msg_id
from store import cq_snapshot
from store.constants import GetMessageStatus
from store.consume_queue import ConsumeQueue
from store.message import Message
from store.message_store import DefaultMessageStore
from tests.store.conftest import wait_dispatched
from tests.store.test_crash import _brief, check_acked, run_inspect, writer_round

ROUNDS = 2
MakeStore = Callable[..., DefaultMessageStore]
USED = "after a crash from the consume-queue snapshot"


def snapshot_topics(snap: cq_snapshot.Snapshot) -> set[str]:
    names, pos = set(), 0
    for _ in range(snap.topic_count):
        (n,) = struct.unpack_from(">H", snap.payload, pos)
        names.add(snap.payload[pos + 2 : pos + 2 + n].decode())
        pos += 2 + n
    return names


@pytest.mark.parametrize("damage", ["none", "truncated", "flipped-byte"])
def test_kill9_after_a_snapshot_older_than_the_last_puts(
        tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.randrange(1 << 32)))
    print(f"CRASH_SEED={seed}")
    rng = random.Random(seed)
    store_dir = tmp_path / "store"
    snapshot = store_dir / cq_snapshot.FILE_NAME
    log = tmp_path / "writer.stderr"
    acks = []
    for rnd in range(ROUNDS):
        kill_after = rng.uniform(0.3, 0.8)
        new = writer_round(store_dir, kill_after, rnd, log, "new-topics",
                           after_line="SNAPSHOTS STOPPED")
        acks += new
        context = (f"seed {seed}, round {rnd}, killed {kill_after:.2f} s after the last "
                   f"snapshot, {len(new)} acks")
        snap = cq_snapshot.read(str(snapshot))
        assert isinstance(snap, cq_snapshot.Snapshot) and snap.kind == cq_snapshot.RUNNING
        after = [a for a in new if decode_offset_msg_id(a.msg_id)[1] >= snap.offset]
        assert after, f"{context}: no put after the last snapshot (at {snap.offset})"
        made_after = {a.topic for a in after} - snapshot_topics(snap)
        assert made_after, f"{context}: no queue made after the last snapshot"
        if damage == "truncated":
            data = snapshot.read_bytes()
            snapshot.write_bytes(data[: len(data) // 2])
        elif damage == "flipped-byte":
            data = bytearray(snapshot.read_bytes())
            data[len(data) // 2] ^= 0x01
            snapshot.write_bytes(bytes(data))
        caplog.clear()
        caplog.set_level(logging.INFO, logger="store")
        try:
            check_acked(store_dir, acks)
        except Exception as e:
            raise AssertionError(f"{context}: {type(e).__name__}: {e}") from e
        lines = [r.getMessage() for r in caplog.records]
        if damage == "none":
            assert any(USED in m for m in lines), f"{context}: {lines}"
        else:
            assert not any(USED in m for m in lines), f"{context}: {lines}"
            assert sum("snapshot not used" in m for m in lines) == 1, f"{context}: {lines}"
        code, rep = run_inspect(store_dir)
        assert code == 0 and not rep["warnings"] and not rep["abort"], f"{context}: {_brief(rep)}"


def test_snapshot_of_another_boot_is_not_used(
        make_store: MakeStore, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After a power cut the page cache of the last boot is lost in any order: the queues
    may hold entries past the snapshot that no record after it accounts for."""
    root = tmp_path / "store"
    store = make_store(root=root)
    assert store.put_messages([Message("T", b"x", queue_id=q) for q in range(4)]).ok
    wait_dispatched(store)
    store.shutdown()
    snap = cq_snapshot.read(store.queues.snapshot_path)
    assert isinstance(snap, cq_snapshot.Snapshot) and snap.kind == cq_snapshot.CLEAN
    monkeypatch.setattr(cq_snapshot, "boot_id", lambda: bytes(range(16)))
    cq_snapshot.write_file(store.queues.snapshot_path, snap.as_running())  # "written before"
    monkeypatch.undo()
    (root / "abort").touch()
    caplog.set_level(logging.INFO, logger="store")
    again = make_store(root=root)
    lines = [r.getMessage() for r in caplog.records]
    assert any("another boot" in m for m in lines), lines
    assert not any(USED in m for m in lines), lines
    for q in range(4):
        assert again.get_message("g", "T", q, 0, 32).status is GetMessageStatus.FOUND


def test_a_queue_written_after_the_snapshot_is_read_from_disk_and_the_others_are_not(
        make_store: MakeStore, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """In one process: a snapshot, puts to one queue and to a new topic, then a start as
    after a crash on a copy of the files (the page cache a killed process leaves)."""
    root = tmp_path / "store"
    store = make_store(root=root)
    assert store.put_messages([Message(f"T{q}", b"x", queue_id=0) for q in range(20)]).ok
    wait_dispatched(store)
    snap = store.queues.encode_snapshot(cq_snapshot.RUNNING, store.reput_from_offset)
    assert snap is not None
    store.queues.write_snapshot(*snap)
    assert store.put_messages([Message("T3", b"y", queue_id=0), Message("New", b"z")]).ok
    wait_dispatched(store)
    # As a kill leaves it: the abort file stays, the snapshot is the last one written.
    store.commitlog.flush()
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    read: list[str] = []
    real_recover = ConsumeQueue.recover_past_snapshot

    def spy(cq: ConsumeQueue) -> tuple[int, int, int] | None:
        read.append(cq.topic)
        return real_recover(cq)

    monkeypatch.setattr(ConsumeQueue, "recover_past_snapshot", spy)
    caplog.set_level(logging.INFO, logger="store")
    again = make_store(root=copy)
    assert any(USED in r.getMessage() for r in caplog.records)
    assert read == ["T3"]  # "New" is loaded whole, as a topic the snapshot lacks
    assert again.get_max_offset_in_queue("T3", 0) == 2
    assert again.get_max_offset_in_queue("New", 0) == 1
    assert [m.body for m in again.get_message("g", "T3", 0, 0, 32).decoded()] == [b"x", b"y"]
    assert sum(cq.max_offset_in_queue for cq in again.queues.table.values()) == 22


def test_recover_past_snapshot_reads_from_the_recorded_end(tmp_path: Path) -> None:
    """Entries past the snapshot's end go on into a file made after it; stale bytes after
    their end are zeroed and a stale later file is deleted, as a full recovery does."""
    size = 10 * 20
    cq = ConsumeQueue("T", 0, tmp_path, size)
    flat = [v for i in range(14) for v in (100 * i, 10, 7)]
    cq.put_entries(0, flat[: 4 * 3])
    recorded = (0, 1, cq._max_pos, cq.min_logic_offset, cq.max_physic_offset, True)
    cq.put_entries(4, flat[4 * 3 :])  # entries 4..13: file 0 full, 4 in file 1
    cq.close()
    second = tmp_path / "T" / "0" / f"{size:020d}"
    with open(second, "r+b") as f:  # stale bytes after a zero entry in file 1
        f.seek(6 * 20)
        f.write(b"\x01" * 20)
    (tmp_path / "T" / "0" / f"{2 * size:020d}").write_bytes(b"\x02" * size)  # a stale file
    again = ConsumeQueue("T", 0, tmp_path, size)
    again.restore(*recorded)
    assert again.recover_past_snapshot() == (1300, 10, 7)
    assert again.max_offset_in_queue == 14 and again.max_physic_offset == 1310
    assert [f.file_from_offset for f in again.files] == [0, size]
    assert second.read_bytes()[4 * 20 :] == bytes(size - 4 * 20)
    assert not (tmp_path / "T" / "0" / f"{2 * size:020d}").exists()
    assert [again.get_entry(i) for i in (0, 9, 10, 13)] == [
        (0, 10, 7), (900, 10, 7), (1000, 10, 7), (1300, 10, 7)]
    again.put_entries(14, [1400, 10, 7])
    assert again.get_entry(14) == (1400, 10, 7)
