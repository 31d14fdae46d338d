"""A full disk on a small real file system (a tmpfs mounted by the test): each kind of store
file hits the limit in turn. The store must refuse puts with SERVICE_NOT_AVAILABLE naming the
full disk, go on serving reads, say so in one log line, and take writes again once space is
freed. Each scenario runs in a child process: before allocation came first, the commitlog's
mapped write into a page the file system could not back killed the process with SIGBUS.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import cq_snapshot
from store.config import StoreConfig
from store.constants import FlushDiskType, GetMessageStatus, PutMessageStatus
from store.inspect import inspect_store
from store.message import Message
from store.message_store import DefaultMessageStore
from tests.support.small_fs import (
    LogLines,
    fill,
    fill_inodes,
    free_bytes,
    mounted_tmpfs,
    run_in_child,
)
from tests.support.waiting import wait_until

S = PutMessageStatus
CONF = dict(
    mapped_file_size_commit_log=1 << 20,
    mapped_file_size_consume_queue=1000 * 20,
    max_hash_slot_num=64,
    max_index_num=256,  # 3 keys a message: a new index file every ~85 messages
    consume_queue_snapshot_interval=0,  # no snapshot write to run out of space first
)
WAIT_S = 10.0  # for the dispatch service, and the clean service's check (every second)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "16m") as mount:
        yield mount


def msg(i: int, queue_id: int = 0, size: int = 1000) -> Message:
    return Message("TopicA", f"message-{i}|".encode().ljust(size, b"."),
                   {"KEYS": f"key-{i} shared", "UNIQ_KEY": f"UNIQ{i:08d}"},
                   queue_id=queue_id, born_timestamp=1000 + i, born_host=("10.1.2.3", 4567))


def open_store(root: Path, **overrides: Any) -> DefaultMessageStore:
    # The disk-usage guard reads 10 %: these tests are about running out of space.
    store = DefaultMessageStore(StoreConfig(store_path_root_dir=str(root),
                                            **{**CONF, **overrides}),
                                disk_usage=lambda path: 0.1)
    store.load()
    store.start()
    return store


def dispatched(store: DefaultMessageStore) -> bool:
    return store.reput_from_offset >= store.commitlog.max_offset


def read_bodies(store: DefaultMessageStore, queue_id: int = 0) -> list[bytes]:
    out: list[bytes] = []
    offset = 0
    while True:
        got = store.get_message("g", "TopicA", queue_id, offset, 32)
        if got.status is not GetMessageStatus.FOUND:
            return out
        out += [m.body for m in got.decoded()]
        offset = got.next_begin_offset


def assert_refused(store: DefaultMessageStore, kind: str, puts: int = 200) -> None:
    """Every put answers SERVICE_NOT_AVAILABLE with the full disk (and `kind`, what could not
    be written) as the reason."""
    for i in range(puts):
        r = store.put_message(msg(10_000 + i))
        assert r.status is S.SERVICE_NOT_AVAILABLE, r
        assert r.append is not None and r.append.error.startswith("disk full: "), r.append
        assert kind in r.append.error, r.append.error


def assert_one_line_each(logs: LogLines, expected_warning: str = "") -> None:
    """One line when the disk filled, one when writes resumed; nothing per put."""
    lines = logs.lines(logging.INFO)
    full = [x for x in lines if "disk full" in x]
    back = [x for x in lines if "accepts writes again" in x]
    assert len(full) == 1 and full[0].startswith("ERROR"), lines
    assert len(back) == 1, lines
    assert not [x for x in logs.lines(logging.WARNING)
                if x not in full and not (expected_warning and expected_warning in x)], lines


def resume(store: DefaultMessageStore, ballast: Path) -> None:
    ballast.unlink()
    wait_until(lambda: store.writeable, WAIT_S, message="writes to resume once space was freed")
    assert store.put_message(msg(20_000)).ok


# -- the scenarios (run in a child process) ------------------------------------------------------
def commitlog_full(disk: Path, flush: FlushDiskType) -> None:
    store = open_store(disk / "store", flush_disk_type=flush)
    try:
        with LogLines() as logs:
            for i in range(20):
                assert store.put_message(msg(i)).ok
            ballast = fill(disk, leave=256 * 1024)  # less than the next 1 MiB file
            stored = 20
            while (r := store.put_message(msg(stored))).ok:
                stored += 1
                assert stored < 2000, "the commitlog never rolled"
            assert r.status is S.SERVICE_NOT_AVAILABLE and r.append is not None, r
            assert "commitlog" in r.append.error, r.append.error
            assert store.commitlog.queue.files[-1].file_from_offset == 0  # no sparse file
            assert_refused(store, "commitlog")
            wait_until(lambda: dispatched(store), WAIT_S, message="dispatch")
            assert len(read_bodies(store)) == stored  # reads go on
            resume(store, ballast)
            for i in range(200):
                assert store.put_message(msg(30_000 + i)).ok
            wait_until(lambda: dispatched(store), WAIT_S, message="dispatch")
            assert len(read_bodies(store)) == stored + 201
        assert_one_line_each(logs)
    finally:
        store.shutdown()
    report = inspect_store(disk / "store")
    assert report.problem_count == 0, report.problems[:3]


def consume_queue_full(disk: Path) -> None:
    store = open_store(disk / "store")
    try:
        with LogLines() as logs:
            for i in range(20):
                assert store.put_message(msg(i)).ok
            wait_until(lambda: dispatched(store), WAIT_S, message="dispatch")
            ballast = fill(disk)
            # The commitlog file has room (it is allocated); queue 1's first page has none.
            assert store.put_message(msg(100, queue_id=1)).ok
            wait_until(lambda: not store.writeable, WAIT_S, message="the store to refuse writes")
            assert_refused(store, "consume queue TopicA-1")
            assert len(read_bodies(store)) == 20
            assert read_bodies(store, 1) == []
            resume(store, ballast)
            wait_until(lambda: dispatched(store) and read_bodies(store, 1), WAIT_S,
                       message="queue 1's entry")
            assert read_bodies(store, 1)[0].startswith(b"message-100|")
            assert len(read_bodies(store)) == 21
        assert_one_line_each(logs)
    finally:
        store.shutdown()
    report = inspect_store(disk / "store")
    assert report.problem_count == 0, report.problems[:3]


def index_full(disk: Path) -> None:
    store = open_store(disk / "store")
    try:
        with LogLines() as logs:
            for i in range(20):
                assert store.put_message(msg(i)).ok
            wait_until(lambda: dispatched(store), WAIT_S, message="dispatch")
            ballast = fill(disk)
            # 3 keys a message: the index file fills and the next one has no space. The
            # consume queue's page and the commitlog file have room.
            stored = 20
            while store.writeable and stored < 200:
                if store.put_message(msg(stored)).ok:
                    stored += 1
                wait_until(lambda: dispatched(store), WAIT_S, message="dispatch")
            assert_refused(store, "index")
            assert len(read_bodies(store)) == stored  # the consume queue has them all
            assert store.query_message("TopicA", "key-3", 5)
            last = f"key-{stored - 1}"
            assert not store.query_message("TopicA", last, 5)  # its keys wait for space
            resume(store, ballast)
            wait_until(lambda: store.query_message("TopicA", last, 5), WAIT_S,
                       message="the held keys indexed")
            wait_until(lambda: dispatched(store), WAIT_S, message="dispatch")
            assert len(store.query_message("TopicA", "shared", 1000)) == stored + 1
        assert_one_line_each(logs)
    finally:
        store.shutdown()
    report = inspect_store(disk / "store")
    assert report.problem_count == 0, report.problems[:3]


def checkpoint_full(disk: Path) -> None:
    ballast = fill(disk)
    with LogLines() as logs:
        store = open_store(disk / "store")  # its checkpoint cannot be allocated
        try:
            assert_refused(store, "checkpoint")
            resume(store, ballast)
            assert (disk / "store" / "checkpoint").stat().st_blocks * 512 >= 4096
            wait_until(lambda: dispatched(store), WAIT_S, message="dispatch")
            assert len(read_bodies(store)) == 1
        finally:
            store.shutdown()
    assert_one_line_each(logs)


def abort_file_full(disk: Path) -> None:
    store = open_store(disk / "store")
    for i in range(20):
        assert store.put_message(msg(i)).ok
    store.shutdown()
    # Without it no file is made before the abort file (the snapshot kept for a crash).
    (disk / "store" / cq_snapshot.FILE_NAME).unlink()
    fillers = fill_inodes(disk)  # no inode left for the abort file
    with LogLines() as logs:
        store = open_store(disk / "store")
        try:
            assert not (disk / "store" / "abort").exists()
            assert_refused(store, "abort file")
            assert len(read_bodies(store)) == 20
            for p in fillers:
                p.unlink()
            wait_until(lambda: store.writeable, WAIT_S,
                       message="writes to resume once inodes were freed")
            assert (disk / "store" / "abort").exists()  # before any write
            assert store.put_message(msg(20)).ok
        finally:
            store.shutdown()
    assert_one_line_each(logs, expected_warning="consume-queue snapshot not used")


def inspect_on_full_disk(disk: Path) -> None:
    # A large index geometry: the index file is sparse (entries allocated 65,536 at a time).
    store = open_store(disk / "store", max_hash_slot_num=100_000, max_index_num=2_000_000)
    for i in range(50):
        assert store.put_message(msg(i, queue_id=i % 2)).ok
    wait_until(lambda: dispatched(store), WAIT_S, message="dispatch")
    store.commitlog.flush()
    ballast = fill(disk)
    before = free_bytes(disk)
    report = inspect_store(disk / "store")  # abort present: the store runs
    assert report.problem_count == 0, report.problems[:3]
    assert report.records == 50 and report.index_entries == 150
    assert free_bytes(disk) == before  # no hole read into an allocated page
    ballast.unlink()
    store.shutdown()


# -- the tests -----------------------------------------------------------------------------------
@pytest.mark.parametrize("flush", list(FlushDiskType))  # SYNC_FLUSH: the write buffer
def test_commitlog_cannot_roll(disk: Path, flush: FlushDiskType) -> None:
    run_in_child(commitlog_full, disk, flush)


def test_consume_queue_cannot_grow(disk: Path) -> None:
    run_in_child(consume_queue_full, disk)


def test_index_cannot_grow(disk: Path) -> None:
    run_in_child(index_full, disk)


def test_checkpoint_cannot_be_made(disk: Path) -> None:
    run_in_child(checkpoint_full, disk)


def test_abort_file_cannot_be_made(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", "16m", inodes=64) as disk:
        run_in_child(abort_file_full, disk)


def test_inspect_reads_no_hole_of_a_full_disk(tmp_path: Path) -> None:
    with mounted_tmpfs(tmp_path / "disk", "32m") as disk:
        run_in_child(inspect_on_full_disk, disk)


def test_a_sparse_commitlog_file_is_allocated_before_it_is_written(disk: Path) -> None:
    """A file made sparse by an older version: its first append allocates it, and on a full
    disk the put is refused instead of writing through the mapping."""
    run_in_child(sparse_file_on_full_disk, disk)


def sparse_file_on_full_disk(disk: Path) -> None:
    store = open_store(disk / "store")
    assert store.put_message(msg(0)).ok
    store.shutdown()
    (path,) = (disk / "store" / "commitlog").iterdir()
    data = path.read_bytes()  # made again sparse: the data, then a hole
    path.unlink()
    with open(path, "wb") as f:
        f.write(data.rstrip(b"\0"))
        f.truncate(len(data))
    assert os.stat(path).st_blocks * 512 < len(data)
    # Without it no file is written at load (the snapshot kept for a crash).
    (disk / "store" / cq_snapshot.FILE_NAME).unlink()
    ballast = fill(disk)
    store = open_store(disk / "store")
    try:
        assert_refused(store, "commitlog", puts=5)
        assert len(read_bodies(store)) == 1
        resume(store, ballast)
        assert os.stat(path).st_blocks * 512 >= len(data)
    finally:
        store.shutdown()


def test_the_next_commitlog_file_is_allocated_ahead_without_warm_up(tmp_path: Path) -> None:
    """Allocating a 1 GiB file took 0.5 s on tmpfs: not under the put lock at a roll, even
    with warmMappedFileEnable off (no zero fill): the allocator makes the next file ahead."""
    store = open_store(tmp_path / "store", warm_mapped_file_enable=False)
    try:
        i = 0
        while store.commitlog.max_wrote_offset < 600 * 1024:  # over half the first file
            assert store.put_message(msg(i)).ok
            i += 1
        store.commitlog.flush()  # what the flush service does: asks for the next file
        store.commitlog.allocator.wait_prepared()
        prepared = tmp_path / "store" / "commitlog" / f"{1 << 20:020d}.prealloc"
        assert prepared.stat().st_blocks * 512 >= 1 << 20
        while len(store.commitlog.queue.files) < 2:
            assert store.put_message(msg(i)).ok
            i += 1
        assert store.commitlog.queue.files[1].path.name == f"{1 << 20:020d}"
        assert not prepared.exists()
    finally:
        store.shutdown()


def test_forcible_cleaning_deletes_only_what_brings_the_disk_under_its_ratio(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Over diskSpaceCleanForciblyRatio unexpired files go, but only enough of them to get
    back under it: a trial on a 128 MiB disk lost 5 of 6 files (10,055 unconsumed messages)
    where one would have done, with a log line calling them "expired"."""
    with mounted_tmpfs(tmp_path / "disk", "16m") as disk:
        store = DefaultMessageStore(StoreConfig(
            store_path_root_dir=str(disk), clean_resource_interval=3_600_000,
            **{**CONF, "max_index_num": 100_000, "max_hash_slot_num": 1000}))
        store.load()
        store.start()
        try:
            i = 0
            while len(store.commitlog.queue.files) < 8:
                assert store.put_message(msg(i)).ok
                i += 1
            wait_until(lambda: dispatched(store), WAIT_S)
            st = os.statvfs(disk)
            usable = (st.f_blocks - st.f_bfree + st.f_bavail) * st.f_frsize
            fill(disk, leave=int(usable * 0.12))  # about 88 % used
            ratio = store.disk_usage(str(disk)) * 100
            assert 86 < ratio < 90
            caplog.set_level(logging.INFO, logger="store.cleaning")
            assert store.clean_expired_files() == 1  # 1 MiB files, < 4 % of 16 MiB to free
            assert store.disk_usage(str(disk)) * 100 < 85
            assert len(store.commitlog.queue.files) == 7
            assert [r.message for r in caplog.records] == [
                f"disk {ratio:.1f}% full, over diskSpaceCleanForciblyRatio 85%: deleted 1 "
                "commitlog file(s) before their fileReservedTime, consumed or not (messages "
                f"before commitlog offset {1 << 20} are gone)"]
            assert store.clean_expired_files() == 0  # under the ratio: nothing more goes
        finally:
            store.shutdown()
