"""SYNC_FLUSH group commit: a put completes only once its bytes are on disk.

A spy stands in for `os` in store.mapped_file and records, per file descriptor, which byte
ranges were written (pwrite / pwritev) and which of those a later fdatasync (or a write with
RWF_DSYNC) made durable. Its syncs are slowed down, so a put released before the sync that
covers it finishes is seen as such when the writer resumes.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from store import mapped_file
from store.constants import FlushDiskType, PutMessageStatus
from store.message import Message
from store.message_store import DefaultMessageStore, PutMessageResult

MakeStore = Callable[..., DefaultMessageStore]
Ranges = list[tuple[int, int]]


def _add(ranges: Ranges, start: int, end: int) -> Ranges:
    out: Ranges = []
    for a, b in sorted([*ranges, (start, end)]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _remove(ranges: Ranges, start: int, end: int) -> Ranges:
    out: Ranges = []
    for a, b in ranges:
        if b <= start or a >= end:
            out.append((a, b))
            continue
        if a < start:
            out.append((a, start))
        if b > end:
            out.append((end, b))
    return out


class DiskSpy:
    """`os` for store.mapped_file: everything passes through; writes and syncs are tracked."""

    def __init__(self, sync_delay_s: float) -> None:
        self.sync_delay_s = sync_delay_s
        self.lock = threading.Lock()
        self.written: dict[int, Ranges] = {}  # written since the last sync, per fd
        self.durable: dict[int, Ranges] = {}
        self.syncs = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def _wrote(self, fd: int, start: int, end: int) -> None:
        with self.lock:  # new bytes are not durable until a sync that began after them
            self.durable[fd] = _remove(self.durable.get(fd, []), start, end)
            self.written[fd] = _add(self.written.get(fd, []), start, end)

    def _synced(self, fd: int, ranges: Ranges) -> None:
        with self.lock:
            for a, b in ranges:
                self.durable[fd] = _add(self.durable.get(fd, []), a, b)
            self.syncs += 1

    def pwrite(self, fd: int, data: Any, offset: int) -> int:
        n = os.pwrite(fd, data, offset)
        self._wrote(fd, offset, offset + n)
        return n

    def pwritev(self, fd: int, buffers: Any, offset: int, flags: int = 0) -> int:
        n = os.pwritev(fd, buffers, offset, flags)
        self._wrote(fd, offset, offset + n)
        if flags & getattr(os, "RWF_DSYNC", 0):
            time.sleep(self.sync_delay_s)
            self._synced(fd, [(offset, offset + n)])
        return n

    def fdatasync(self, fd: int) -> None:
        with self.lock:  # what was written before the call is what this sync covers
            covered = self.written.pop(fd, [])
        time.sleep(self.sync_delay_s)
        os.fdatasync(fd)
        self._synced(fd, covered)

    fsync = fdatasync

    def is_durable(self, fd: int, start: int, end: int) -> bool:
        with self.lock:
            return any(a <= start and end <= b for a, b in self.durable.get(fd, []))


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[DiskSpy]:
    s = DiskSpy(sync_delay_s=0.002)
    monkeypatch.setattr(mapped_file, "os", s)
    yield s


def _assert_durable(store: DefaultMessageStore, spy: DiskSpy, r: PutMessageResult) -> None:
    assert r.status is PutMessageStatus.PUT_OK, r.status
    assert r.append is not None
    offset, end = r.append.wrote_offset, r.append.end_offset
    while offset < end:  # a put may span files (end-of-file blank, then the next file)
        mf = store.commitlog.queue.find_by_offset(offset)
        assert mf is not None
        stop = min(end, mf.file_tail_offset)
        start_in, end_in = offset - mf.file_from_offset, stop - mf.file_from_offset
        assert spy.is_durable(mf.fd, start_in, end_in), (
            f"put [{offset}, {end}) completed before {mf.path.name}[{start_in}:{end_in}] "
            f"was synced")
        offset = stop


def _msg(i: int, size: int = 700) -> Message:
    return Message("TopicA", f"m{i}|".encode().ljust(size, b"."), {"KEYS": f"k{i}"},
                   queue_id=i % 4)


def test_async_puts_complete_only_after_their_bytes_are_synced(
        make_store: MakeStore, spy: DiskSpy) -> None:
    store = make_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)  # 64 KiB files: rolls
    checked = 0

    async def writer(w: int) -> None:
        nonlocal checked
        for i in range(w, 600, 16):
            r = await store.put_messages_async([_msg(i)] if i % 5 else [_msg(i), _msg(i + 1)])
            _assert_durable(store, spy, r)  # right when the writer is released
            checked += 1

    async def main() -> None:
        await asyncio.gather(*(writer(w) for w in range(16)))

    asyncio.run(main())
    assert checked == 600
    assert len(store.commitlog.queue.files) > 3
    assert spy.syncs < checked  # grouped: fewer syncs than puts


def test_blocking_puts_complete_only_after_their_bytes_are_synced(
        make_store: MakeStore, spy: DiskSpy) -> None:
    store = make_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    failures: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for i in range(w, 200, 4):
                _assert_durable(store, spy, store.put_messages([_msg(i)]))
        except BaseException as e:  # reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[0]


def test_the_spy_sees_a_put_released_before_its_sync(
        make_store: MakeStore, spy: DiskSpy, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a group commit that released waiters before forcing the
    data (a bug this file guards against) is caught."""
    store = make_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    commitlog = store.commitlog

    def flush_then_release_too_early() -> int:
        commitlog.commit()
        store.flush_waiters.advance(commitlog.max_offset)  # before the sync: wrong
        return commitlog.queue.flush()

    monkeypatch.setattr(commitlog, "flush", flush_then_release_too_early)

    async def main() -> None:
        r = await store.put_messages_async([_msg(0)])
        with pytest.raises(AssertionError, match="completed before"):
            _assert_durable(store, spy, r)

    asyncio.run(main())


def test_prepared_next_file_is_synced_before_use(tmp_path: Path, spy: DiskSpy) -> None:
    """Under SYNC_FLUSH the allocator forces the zero fill, so no group commit has to."""
    mf = mapped_file.MappedFile(tmp_path / f"{0:020d}", 64 * 1024, write_buffer=True, warm=True,
                                durable_fill=True)
    try:
        assert spy.is_durable(mf.fd, 0, 64 * 1024)
    finally:
        mf.destroy()


def test_only_sync_flush_forces_prepared_files(make_store: MakeStore, tmp_path: Path) -> None:
    sync = make_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, root=tmp_path / "sync")
    async_ = make_store(flush_disk_type=FlushDiskType.ASYNC_FLUSH, root=tmp_path / "async")
    assert sync.commitlog.allocator.durable_fill
    assert not async_.commitlog.allocator.durable_fill


def test_a_new_commitlog_file_name_is_synced_at_roll(
        make_store: MakeStore, spy: DiskSpy, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prepared file is renamed at the roll: the directory is forced, or after a power
    loss the file could be back under its .prealloc name, which loading deletes."""
    synced_dirs: list[str] = []
    real_fsync = spy.fsync

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.isdir(target):
            synced_dirs.append(target)
        real_fsync(fd)

    monkeypatch.setattr(spy, "fsync", fsync, raising=False)
    store = make_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    commitlog_dir = str(store.commitlog.queue.store_path)
    for i in range(200):  # 64 KiB files: several rolls
        assert store.put_messages([_msg(i)]).ok
    files = len(store.commitlog.queue.files)
    assert files > 1
    assert synced_dirs.count(commitlog_dir) >= files
