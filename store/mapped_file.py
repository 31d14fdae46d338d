"""Mapped files and mapped-file queues (SPEC §2.1).

A MappedFile is one fixed-size file mapped with mmap and three positions: wrote (appended),
committed (in the file) and flushed (forced to disk). Appends go either straight into the
mapping, or into an in-process write buffer that `commit` writes with pwrite (RocketMQ's
transient store pool): pwrite + fdatasync measured 3-4x faster than msync of mmap-written pages.
Readers always read through the mapping, up to the committed position.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

from store.cq_files import zero_tail
from store.disk_full import is_disk_full

log = logging.getLogger(__name__)

OFFSET_NAME_DIGITS = 20
PAGE_SIZE = 4096
_ZERO_CHUNK = bytes(1 << 20)
PREALLOC_SUFFIX = ".prealloc"


def offset_file_name(offset: int) -> str:
    return f"{offset:020d}"


# -- a queue's list of same-size files (the commitlog's mapped files, a consume queue's) ----
class OffsetFile(Protocol):
    @property
    def file_from_offset(self) -> int: ...

    @property
    def file_tail_offset(self) -> int: ...


F = TypeVar("F", bound=OffsetFile)


def file_offsets(directory: str | os.PathLike, names: Iterable[str], file_size: int
                 ) -> list[int]:
    """The start offsets of a queue directory's files, from its listing `names`, in order;
    foreign names are logged and skipped, a gap between files is an error."""
    offsets: list[int] = []
    for name in sorted(names):
        if len(name) != OFFSET_NAME_DIGITS or not name.isdigit():
            log.warning("%s: ignoring foreign file %s", directory, name)
            continue
        offset = int(name)
        if offsets and offset != offsets[-1] + file_size:
            raise ValueError(f"{directory}: gap before {name}, expected "
                             f"{offset_file_name(offsets[-1] + file_size)}")
        offsets.append(offset)
    return offsets


def find_file(files: list[F], file_size: int, offset: int) -> F | None:
    """The file of `files` (consecutive, `file_size` each) holding `offset`, or None."""
    if not files:
        return None
    index = (offset - files[0].file_from_offset) // file_size
    if 0 <= index < len(files):
        mf = files[index]
        if mf.file_from_offset <= offset < mf.file_tail_offset:
            return mf
    return None


def cut_files(files: list[F], offset: int, cut: Callable[[F, int], None],
              delete: Callable[[F], None]) -> list[F]:
    """The files kept when everything at or after `offset` is dropped: `cut(file, position)`
    the one holding it (deleted instead when that empties it and files precede it), `delete`
    the later ones."""
    keep: list[F] = []
    for mf in files:
        if mf.file_tail_offset <= offset:
            keep.append(mf)
        elif mf.file_from_offset <= offset:
            pos = offset - mf.file_from_offset
            if pos == 0 and keep:
                delete(mf)
                continue
            cut(mf, pos)
            keep.append(mf)
        else:
            delete(mf)
    return keep


class MappedFile:
    def __init__(self, path: str | os.PathLike, file_size: int, *, write_buffer: bool = False,
                 warm: bool = False, durable_fill: bool = False) -> None:
        self.path = Path(path)
        name = self.path.name.removesuffix(PREALLOC_SUFFIX)
        if len(name) != OFFSET_NAME_DIGITS or not name.isdigit():
            raise ValueError(f"not a mapped file name (20-digit start offset): {self.path}")
        self.file_from_offset = int(name)
        self.file_size = file_size
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            st = os.fstat(self.fd)
            # An empty file is one whose creation a crash cut short: size it as new.
            existed = st.st_size > 0
            if existed and st.st_size != file_size:
                raise ValueError(f"{self.path}: size {st.st_size}, expected {file_size}")
            # Whether every page has disk space: a write through the mapping into one that
            # has none is a SIGBUS when the disk is full. Files made here are allocated first;
            # one found sparse (made by an older version) is allocated before it is written.
            self.allocated = existed and st.st_blocks * 512 >= file_size
            if not existed:
                try:
                    self.allocate()
                    if warm:
                        _zero_fill(self.fd, file_size)
                        if durable_fill:
                            # Forced here (the allocator's thread), else the first group-commit
                            # fdatasync of this file writes back the whole zero fill: 1 GiB
                            # took over 1 s, every SYNC_FLUSH put waiting on it.
                            os.fdatasync(self.fd)
                except BaseException:
                    self.path.unlink(missing_ok=True)  # not in use: its space goes back
                    raise
            self.mm = mmap.mmap(self.fd, file_size)
        except BaseException:
            os.close(self.fd)
            raise
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.write_buffer: bytearray | None = bytearray() if write_buffer else None
        self.store_timestamp = 0  # newest record's store time, for expiry by time
        self.closed = False

    def allocate(self) -> None:
        """Gives every page of the file disk space (and the file its size); OSError (ENOSPC
        when the disk is full) when it cannot. Fast: no data is written."""
        os.posix_fallocate(self.fd, 0, self.file_size)
        self.allocated = True

    # -- positions -------------------------------------------------------------------------
    @property
    def file_tail_offset(self) -> int:
        return self.file_from_offset + self.file_size

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def set_positions(self, pos: int) -> None:
        self.wrote_position = self.committed_position = self.flushed_position = pos
        if self.write_buffer is not None:
            self.write_buffer = bytearray()

    # -- writing ---------------------------------------------------------------------------
    def append(self, data: bytes) -> None:
        """Appends at the wrote position; the caller has checked that it fits."""
        pos = self.wrote_position
        if self.write_buffer is None:
            self.mm[pos : pos + len(data)] = data
            self.committed_position = pos + len(data)
        else:
            self.write_buffer += data
        self.wrote_position = pos + len(data)

    def append_blank(self, blank: bytes) -> None:
        """Writes the end-of-file blank and marks the file full (its tail is zeros already)."""
        pos = self.wrote_position
        if self.write_buffer is None:
            self.mm[pos : pos + len(blank)] = blank
            self.committed_position = self.file_size
        else:
            self.write_buffer += blank + bytes(self.file_size - pos - len(blank))
        self.wrote_position = self.file_size

    def take_uncommitted(self) -> tuple[int, bytearray] | None:
        """Detaches the write buffer (call under the appender's lock); None when empty."""
        buf = self.write_buffer
        if not buf:
            return None
        self.write_buffer = bytearray()
        return self.committed_position + 0, buf

    def write_committed(self, pos: int, data: bytes | bytearray) -> None:
        """Writes a detached buffer at `pos` (serialised by the caller) and moves committed."""
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], pos + done)
        self.committed_position = pos + len(data)

    def write_at(self, pos: int, data: bytes | memoryview) -> None:
        """Replication: puts bytes at exactly `pos` (== wrote position) through the mapping."""
        if pos != self.wrote_position:
            raise ValueError(f"{self.path}: write at {pos}, wrote at {self.wrote_position}")
        self.mm[pos : pos + len(data)] = data
        self.wrote_position = self.committed_position = pos + len(data)

    def flush(self) -> int:
        """Forces committed bytes to disk; returns the flushed position."""
        target = self.committed_position
        if target > self.flushed_position and not self.closed:
            os.fdatasync(self.fd)
            self.flushed_position = target
        return self.flushed_position

    # -- reading ---------------------------------------------------------------------------
    def read(self, pos: int, size: int) -> bytes:
        """Bytes [pos, pos+size) of this file, never past the committed position."""
        end = min(pos + size, self.committed_position)
        if pos < 0 or pos >= end:
            return b""
        return self.mm[pos:end]

    # -- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.mm.close()
        except BufferError:  # a reader still holds a view: leave the mapping to the GC
            log.warning("%s: mapping still in use at close", self.path)
        os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return (f"MappedFile({self.path.name}, wrote={self.wrote_position}, "
                f"committed={self.committed_position}, flushed={self.flushed_position})")


def _zero_fill(fd: int, size: int) -> None:
    # Writing zeros puts every page in the page cache: appends then never fault on a hole
    # (a cold sparse mapping measured 3-10x slower to append into).
    done = 0
    while done < size:
        done += os.pwrite(fd, _ZERO_CHUNK[: min(len(_ZERO_CHUNK), size - done)], done)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AllocateMappedFileService:
    """Prepares the next commitlog file in the background so a roll never waits on its
    allocation (0.5 s for 1 GiB on tmpfs) or, with `warm`, its zero-fill."""

    def __init__(self, warm: bool, durable_fill: bool = False) -> None:
        self.warm = warm
        # Force each prepared file's zero fill to disk before it is used (SYNC_FLUSH: see
        # MappedFile). Not under ASYNC_FLUSH, where the periodic flush writes it back in the
        # background and a roll would otherwise wait for the fdatasync.
        self.durable_fill = durable_fill
        self._lock = threading.Lock()
        self._pending: dict[Path, tuple[threading.Thread, list[MappedFile | BaseException]]] = {}
        self._shut_down = False

    def get(self, path: Path, size: int, write_buffer: bool) -> MappedFile:
        """The prepared file for `path`, or (none prepared, or preparing it failed) a new
        cold one (allocated, not zero-filled)."""
        with self._lock:
            pending = self._pending.pop(path, None)
        if pending is not None:
            thread, result = pending
            thread.join()
            if result and isinstance(result[0], MappedFile):
                mf = result[0]
                os.rename(mf.path, path)
                # The new name must be on disk before acknowledged data is: fdatasync of the
                # file need not commit a rename (ext4 does not), and after a power loss a file
                # still named .prealloc is deleted at load. Once per file.
                _fsync_dir(path.parent)
                mf.path = path
                return mf
        mf = MappedFile(path, size, write_buffer=write_buffer, warm=False)
        _fsync_dir(path.parent)  # as above: the new name must survive with the data
        return mf

    def prepare(self, path: Path, size: int, write_buffer: bool) -> None:
        """Starts preparing `path` now (unless already under way, or shut down)."""
        result: list[MappedFile | BaseException] = []

        def run() -> None:
            try:
                result.append(MappedFile(path.with_name(path.name + PREALLOC_SUFFIX), size,
                                         write_buffer=write_buffer, warm=self.warm,
                                         durable_fill=self.durable_fill))
            except BaseException as e:  # reported by falling back to a cold file
                if not is_disk_full(e):  # else the roll to it reports the full disk
                    log.warning("pre-allocating %s failed: %s", path, e)
                result.append(e)

        thread = threading.Thread(target=run, name="AllocateMappedFile", daemon=True)
        with self._lock:  # started under the lock: `get` in another thread may join it at once
            if self._shut_down or path in self._pending:
                return
            self._pending[path] = (thread, result)
            thread.start()


    def wait_prepared(self) -> None:
        with self._lock:
            threads = [t for t, _ in self._pending.values()]
        for t in threads:
            t.join()

    def shutdown(self) -> None:
        with self._lock:
            self._shut_down = True
            pending = list(self._pending.values())
            self._pending.clear()
        for thread, result in pending:
            thread.join()
            for r in result:
                if isinstance(r, MappedFile):
                    r.destroy()


class MappedFileQueue:
    """One directory of same-size mapped files addressed by a global offset."""

    def __init__(self, store_path: str | os.PathLike, mapped_file_size: int, *,
                 write_buffer: bool = False,
                 allocator: AllocateMappedFileService | None = None) -> None:
        self.store_path = Path(store_path)
        self.mapped_file_size = mapped_file_size
        self.write_buffer = write_buffer
        self.allocator = allocator
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self._prepared_offset = -1  # the file prepare_next_file last asked the allocator for
        # Truncation stops zeroing a file's tail after this many zero bytes in a row (None:
        # zero it to the end); longer than any record, so no stale one hides behind the run.
        self.zero_run_proof: int | None = None

    def load(self) -> None:
        """Maps every file of the directory (positions set to full; recovery fixes the last)."""
        self.store_path.mkdir(parents=True, exist_ok=True)
        for leftover in self.store_path.glob("*" + PREALLOC_SUFFIX):
            leftover.unlink()
        names = [p.name for p in self.store_path.iterdir() if p.is_file()]
        offsets = file_offsets(self.store_path, names, self.mapped_file_size)
        if offsets and (last := self.store_path / offset_file_name(offsets[-1])).stat(
                ).st_size == 0:
            # Its creation was cut short by a crash: it holds nothing, and making it anew
            # could fail on a full disk and stop the load.
            last.unlink()
            offsets.pop()
        for offset in offsets:
            mf = MappedFile(self.store_path / offset_file_name(offset), self.mapped_file_size,
                            write_buffer=self.write_buffer)
            mf.set_positions(self.mapped_file_size)
            self.files.append(mf)
        if self.files and not self.files[-1].allocated:
            # Found sparse (an older version made it): allocated before recovery reads its
            # end, where a hole read through the mapping is a SIGBUS on a full tmpfs. Failing
            # that, its first append tries again (and reports the full disk).
            with contextlib.suppress(OSError):
                self.files[-1].allocate()

    # -- lookup ----------------------------------------------------------------------------
    def first_file(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    def last_file(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def find_by_offset(self, offset: int) -> MappedFile | None:
        return find_file(self.files, self.mapped_file_size, offset)

    def last_file_for_append(self, start_offset: int = 0) -> MappedFile:
        """The file to append to, creating the next one when the last is full (or none)."""
        last = self.files[-1] if self.files else None
        if last is not None and not last.is_full:
            if not last.allocated:  # found sparse at load
                last.allocate()
            return last
        create_offset = last.file_tail_offset if last is not None else (
            start_offset - start_offset % self.mapped_file_size)
        return self.create_file(create_offset)

    def create_next_file(self) -> MappedFile:
        """The file after the last one, made (allocated) before the last one is closed
        with its end-of-file blank: a roll to a file that cannot be made leaves the last
        one open for the records that still fit."""
        last = self.files[-1]
        return self.create_file(last.file_tail_offset)

    def prepare_next_file(self) -> None:
        """Has the allocator warm the file after the last one once the last is half written
        (the first file when there is none). Sooner, its zero-fill would compete with the
        appends for a file's worth of time while the last file still has plenty of room."""
        if self.allocator is None:
            return
        last = self.files[-1] if self.files else None
        if last is None:
            offset = 0
        elif last.wrote_position < last.file_size // 2:
            return
        else:
            offset = last.file_tail_offset
        if offset == self._prepared_offset:
            return
        self._prepared_offset = offset
        path = self.store_path / offset_file_name(offset)
        if not path.exists():
            self.store_path.mkdir(parents=True, exist_ok=True)
            self.allocator.prepare(path, self.mapped_file_size, self.write_buffer)

    def create_file(self, offset: int) -> MappedFile:
        self.store_path.mkdir(parents=True, exist_ok=True)
        path = self.store_path / offset_file_name(offset)
        if self.allocator is not None:
            mf = self.allocator.get(path, self.mapped_file_size, self.write_buffer)
        else:
            mf = MappedFile(path, self.mapped_file_size, write_buffer=self.write_buffer)
        if not self.files:
            self.flushed_where = offset
        self.files.append(mf)
        return mf

    def __iter__(self) -> Iterator[MappedFile]:
        return iter(list(self.files))

    # -- offsets ---------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.files[0].file_from_offset if self.files else 0

    @property
    def max_offset(self) -> int:
        """End of the committed (readable) data.

        In write-buffer mode a roll leaves the full file's tail (and its end-of-file blank)
        in the write buffer and already creates the next file: until the commit writes the
        tail, the data ends in the earlier file, not at the new file's start. Commits write
        files in order, so the end is in the last file whose predecessor is fully committed.
        """
        files = self.files
        if not files:
            return 0
        i = len(files) - 1
        while i > 0 and files[i].committed_position == 0 and (
                files[i - 1].committed_position < files[i - 1].file_size):
            i -= 1
        mf = files[i]
        return mf.file_from_offset + mf.committed_position

    @property
    def max_wrote_offset(self) -> int:
        last = self.files[-1] if self.files else None
        return last.file_from_offset + last.wrote_position if last else 0

    # -- flushing --------------------------------------------------------------------------
    def flush(self) -> int:
        """Forces every file from the flushed offset up to the committed one; returns it."""
        for mf in list(self.files):
            if mf.file_tail_offset <= self.flushed_where:
                continue
            mf.flush()
            self.flushed_where = mf.file_from_offset + mf.flushed_position
            if mf.flushed_position < mf.file_size:
                break
        return self.flushed_where

    def dirty_pages(self) -> int:
        return max(0, self.max_offset - self.flushed_where) // PAGE_SIZE

    # -- truncation and deletion -----------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> None:
        """Drops everything at or after `offset`: later files are deleted, one is cut."""
        def cut(mf: MappedFile, pos: int) -> None:
            _zero_range(mf, pos, self.zero_run_proof)
            mf.set_positions(pos)

        self.files = cut_files(self.files, offset, cut, MappedFile.destroy)
        self.flushed_where = min(self.flushed_where, offset)

    def delete_first_files(self, should_delete: Callable[[MappedFile], bool], max_count: int,
                           interval_s: float = 0.0) -> int:
        """Deletes files from the front while `should_delete` says so (never the last file)."""
        deleted = 0
        while deleted < max_count and len(self.files) > 1 and should_delete(self.files[0]):
            mf = self.files.pop(0)
            mf.destroy()
            deleted += 1
            if interval_s:
                time.sleep(interval_s)
        return deleted

    def destroy(self) -> None:
        for mf in self.files:
            mf.destroy()
        self.files = []
        self.flushed_where = 0

    def close(self) -> None:
        for mf in self.files:
            mf.close()


def _zero_range(mf: MappedFile, pos: int, zero_run_proof: int | None) -> None:
    """Zeroes [pos, end of file) so a later scan sees the end of data, not stale bytes.

    With `zero_run_proof`, stops once that many bytes in a row were zeros already: data is
    written front to back, so nothing stale lies past such a run (rewriting a whole 1 GiB
    file's zero tail at every start cost more than the scan itself). Read with pread, holes
    skipped: read through the mapping, a hole of a sparse file gets a page allocated on tmpfs,
    a SIGBUS when it is full."""
    zero_tail(mf.fd, pos, mf.file_size, zero_run_proof)
