"""Thousands of consume queues under a low RLIMIT_NOFILE (issue 18), and a queue that fails.

Each run is a child process (tests/store/many_queues_child.py) whose soft nofile limit is set
far below the number of queues: dispatch, sends and reads of every queue must keep working,
and so must a restart after a clean stop (positions from the snapshot) and after a crash
(from the snapshot written while running, or every queue scanned). Before consume queues
stopped holding an fd per file, dispatch failed there with EMFILE and retried forever.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from store import cq_snapshot
from store.constants import GetMessageStatus, PutMessageStatus
from store.consume_queue import ConsumeQueue
from store.message import Message
from store.message_store import DefaultMessageStore
from tests.store.conftest import wait_dispatched

CHILD = Path(__file__).with_name("many_queues_child.py")
QUEUES = 3000
MakeStore = Callable[..., DefaultMessageStore]
NOFILE = 256  # against 3,000 queues: two fds per queue (the old layout) cannot fit


def _low_nofile() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, hard))


def run_child(root: Path, phase: str) -> str:
    proc = subprocess.run([sys.executable, str(CHILD), str(root), phase, str(QUEUES)],
                          capture_output=True, text=True, timeout=25, preexec_fn=_low_nofile,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.parametrize("stop", ["stop", "crash"])
def test_thousands_of_queues_under_low_nofile(tmp_path: Path, stop: str) -> None:
    root = tmp_path / "store"
    out = run_child(root, stop)
    assert f"OK {stop}" in out
    out = run_child(root, "check")
    fds = int(out.split("fds=")[1])
    assert fds < NOFILE
    assert not (root / "abort").exists()


def test_queue_whose_file_cannot_be_opened_fails_alone(
        make_store: MakeStore, caplog: pytest.LogCaptureFixture) -> None:
    store = make_store()
    # TopicB's queue 1 cannot be made: a plain file stands where its directory goes.
    broken = Path(store.queues.root) / "TopicB" / "1"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"in the way")
    caplog.set_level(logging.ERROR, logger="store")
    msgs = [Message(t, f"{t}-{q}".encode(), queue_id=q) for t in ("TopicA", "TopicB")
            for q in range(4)]
    assert store.put_messages(msgs).ok
    wait_dispatched(store)
    assert store.dispatch_behind_bytes == 0  # dispatch got past the broken queue
    for t in ("TopicA", "TopicB"):
        for q in range(4):
            got = store.get_message("g", t, q, 0, 32)
            want = GetMessageStatus.NO_MESSAGE_IN_QUEUE if (t, q) == ("TopicB", 1) else (
                GetMessageStatus.FOUND)
            assert got.status is want, (t, q, got.status)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "TopicB-1" in errors[0], errors
    # Its puts answer a clear status; the other queues' puts go on.
    refused = store.put_message(Message("TopicB", b"again", queue_id=1))
    assert refused.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert refused.append is not None and "TopicB-1" in refused.append.error
    assert store.put_message(Message("TopicB", b"fine", queue_id=2)).ok
    wait_dispatched(store)
    assert store.get_max_offset_in_queue("TopicB", 2) == 2
    # Once the obstacle is gone the retry writes the entries it held.
    broken.unlink()
    store.queues.next_retry = 0.0
    with store._reput_lock:
        store.queues.retry_failed()
    assert not store.queues.failed
    got = store.get_message("g", "TopicB", 1, 0, 32)
    assert got.status is GetMessageStatus.FOUND
    assert [m.body for m in got.decoded()] == [b"TopicB-1"]
    assert store.put_message(Message("TopicB", b"after", queue_id=1)).ok


def test_restart_with_a_broken_queue_loads_the_others(make_store: MakeStore,
                                                      tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = make_store(root=root)
    assert store.put_messages([Message("T", b"x", queue_id=q) for q in range(3)]).ok
    wait_dispatched(store)
    store.shutdown()
    (root / "abort").touch()  # as after a crash: every queue is scanned
    qdir = root / "consumequeue" / "T" / "1"
    size = store.config.mapped_file_size_consume_queue
    (qdir / f"{2 * size:020d}").write_bytes(bytes(size))  # a gap before it
    again = make_store(root=root)
    assert set(again.queues.failed) == {("T", 1)}
    assert again.get_message("g", "T", 0, 0, 32).status is GetMessageStatus.FOUND
    assert again.get_message("g", "T", 2, 0, 32).status is GetMessageStatus.FOUND
    refused = again.put_message(Message("T", b"y", queue_id=1))
    assert refused.status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED
    assert again.put_message(Message("T", b"y", queue_id=2)).ok


def test_recovery_touches_only_allocated_bytes(tmp_path: Path) -> None:
    """A queue file is sparse: recovery reads its allocated start, zeroes stale bytes in a
    later data region, and leaves its holes unallocated (no 1 MiB zero-run read per queue)."""
    size = 300_000 * 20
    cq = ConsumeQueue("T", 0, tmp_path, size)
    cq.put_entries(0, [100, 10, 7, 110, 10, 7, 120, 10, 7])
    path = cq.files[0].path
    cq.close()
    with open(path, "r+b") as f:  # stale bytes behind a hole, as a torn earlier run leaves
        f.seek(100_000)
        f.write(b"\x01" * 20)
    again = ConsumeQueue("T", 0, tmp_path, size)
    again.load()
    again.recover()
    assert again.max_offset_in_queue == 3 and again.max_physic_offset == 130
    with open(path, "rb") as f:
        f.seek(100_000)
        assert f.read(20) == bytes(20)
    assert os.stat(path).st_blocks * 512 <= 64 * 1024  # the holes stayed holes
    again.put_entries(3, [130, 10, 7])
    assert again.get_entry(3) == (130, 10, 7)


def test_commitlog_roll_out_of_fds_is_one_status_and_one_line(
        make_store: MakeStore, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = make_store()
    queue = store.commitlog.queue
    assert store.put_message(Message("T", bytes(1024), queue_id=0)).ok  # the first file

    def out_of_fds(offset: int) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(queue, "create_file", out_of_fds)
    caplog.set_level(logging.ERROR, logger="store")
    statuses = set()
    for _ in range(200):  # 64 KiB files: the roll comes within the first 100 puts
        result = store.put_message(Message("T", bytes(1024), queue_id=0))
        statuses.add(result.status)
        if not result.ok:
            assert result.append is not None and "Too many open files" in result.append.error
    assert PutMessageStatus.CREATE_MAPPED_FILE_FAILED in statuses
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]


def test_snapshot_of_a_clean_stop_is_kept_for_a_crash_and_used_only_when_it_checks_out(
        make_store: MakeStore, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "store"
    snapshot = root / "consumequeue.snapshot"
    store = make_store(root=root)
    assert store.put_messages([Message(f"T{q % 3}", b"x", queue_id=q) for q in range(9)]).ok
    wait_dispatched(store)
    store.shutdown()
    snap = cq_snapshot.read(str(snapshot))
    assert isinstance(snap, cq_snapshot.Snapshot) and snap.kind == cq_snapshot.CLEAN
    # A topic made while stopped is read from disk; the others come from the snapshot.
    (root / "consumequeue" / "Extra" / "0").mkdir(parents=True)
    again = make_store(root=root)
    # Kept for the run, as written while running: a crash re-dispatches from its offset.
    snap = cq_snapshot.read(str(snapshot))
    assert isinstance(snap, cq_snapshot.Snapshot) and snap.kind == cq_snapshot.RUNNING
    assert [again.get_max_offset_in_queue(f"T{q % 3}", q) for q in range(9)] == [1] * 9
    assert ("Extra", 0) in again.queues.table
    assert again.put_message(Message("T0", b"y", queue_id=0)).ok
    wait_dispatched(again)
    again.shutdown()
    # A topic removed while stopped: the snapshot does not check out, every queue is scanned.
    shutil.rmtree(root / "consumequeue" / "Extra")
    caplog.set_level(logging.WARNING, logger="store")
    third = make_store(root=root)
    assert sum("snapshot not used" in r.getMessage() for r in caplog.records) == 1
    assert third.get_max_offset_in_queue("T0", 0) == 2
    third.shutdown()
    data = bytearray(snapshot.read_bytes())  # a damaged snapshot: scanned as well
    data[10] ^= 0xFF
    snapshot.write_bytes(bytes(data))
    caplog.clear()
    fourth = make_store(root=root)
    assert sum("checksum mismatch" in r.getMessage() for r in caplog.records) == 1
    assert fourth.get_max_offset_in_queue("T0", 0) == 2
    assert fourth.get_message("g", "T0", 0, 0, 32).status is GetMessageStatus.FOUND
