"""Consume-queue files that hold no resource while cold (SPEC §2.3 format unchanged).

A broker can hold hundreds of thousands of consume queues (50,000 topics x 8 queues), while a
process has 20,000 fds and 65,530 mappings at most. A consume-queue file here is a path and
its positions; its bytes are read and written with pread / pwrite through one bounded cache of
open fds (`FileHandles`, least recently used closed first), so fds do not grow with the number
of queues and no mapping is made at all.

Why not mappings closed when cold: Python 3.11's mmap keeps a dup of the fd (an fd per
mapping as well as a map), a fault in a sparse mapping reads around the page (the whole 6 MB
file measured 5.7 MiB of page cache and 2.5 ms on the first write), and touched pages stay in
RSS. pread / pwrite touch only the bytes asked for; a syscall per call costs about 1 us, and
writes and reads go a block of entries at a time.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import logging
import os
import resource
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

# Fds the cache keeps open by default: hot queues (those dispatched to or read from) stay open.
DEFAULT_OPEN_FILES = 1024
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE)
_ZEROS = bytes(64 * 1024)


class FileHandles:
    """A bounded LRU cache of fds opened O_RDWR, keyed by path; every use of an fd happens
    under the cache's lock, so an fd is never closed (and its number reused) while in use."""

    def __init__(self, capacity: int = DEFAULT_OPEN_FILES) -> None:
        self.capacity = max(1, capacity)
        self.lock = threading.Lock()
        self._fds: collections.OrderedDict[str, int] = collections.OrderedDict()

    def _fd(self, path: str, create_size: int = 0) -> int:
        """The fd of `path` (called under the lock); `create_size`: create the file sparse
        at that size when it does not exist."""
        fds = self._fds
        fd = fds.get(path)
        if fd is not None:
            fds.move_to_end(path)
            return fd
        while len(fds) >= self.capacity:
            os.close(fds.popitem(last=False)[1])
        flags = os.O_RDWR | (os.O_CREAT if create_size else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as e:
            if e.errno not in _OUT_OF_FDS or not fds:
                raise
            # Something else holds the fds: give back half of ours and try once more.
            for _ in range((len(fds) + 1) // 2):
                os.close(fds.popitem(last=False)[1])
            fd = os.open(path, flags, 0o644)
        try:
            if create_size and os.fstat(fd).st_size == 0:
                os.ftruncate(fd, create_size)
        except BaseException:
            os.close(fd)
            raise
        fds[path] = fd
        return fd

    def create(self, path: str, size: int) -> None:
        with self.lock:
            self._fd(path, size)

    def pread(self, path: str, size: int, pos: int) -> bytes:
        with self.lock:
            return os.pread(self._fd(path), size, pos)

    def pwrite(self, path: str, data: bytes | bytearray | memoryview, pos: int) -> None:
        with self.lock:
            fd = self._fd(path)
            view = memoryview(data)
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], pos + done)

    def forget(self, path: str) -> None:
        """Closes the fd of `path` (it is being deleted)."""
        with self.lock:
            fd = self._fds.pop(path, None)
            if fd is not None:
                os.close(fd)

    def close_all(self) -> None:
        with self.lock:
            while self._fds:
                os.close(self._fds.popitem()[1])


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        fn: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    return fn


_syncfs = _load_syncfs()


def sync_filesystem(path: str) -> None:
    """Forces every dirty page of the file system holding `path` (syncfs(2); sync(2) where
    it is missing): one call instead of an fdatasync per file when many queues are dirty."""
    if _syncfs is None:
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
    finally:
        os.close(fd)


def open_files_cap(configured: int) -> int:
    """The fd cache's size: as configured, but at most a quarter of the soft nofile limit
    (connections and the commitlog / index files need the rest)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(16, min(configured, soft // 4))


def max_map_count() -> int | None:
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def limits_report(configured_open_files: int) -> str:
    """One line on what nofile and vm.max_map_count allow this store."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    maps = max_map_count()
    cache = open_files_cap(configured_open_files)
    nofile = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    spare = "" if soft == resource.RLIM_INFINITY else (
        f"; {soft - cache} fds left for connections and commitlog/index files (2 each)")
    return (f"limits: nofile {nofile}, vm.max_map_count {maps if maps is not None else '?'}: "
            f"consume queues hold no fd or mapping when cold (a cache of {cache} open files, "
            f"no maps), so they allow any number of queues; the disk bounds them{spare}")


def sync_file(path: str) -> None:
    """fdatasync of `path` on an fd of its own: the cache's lock is not held for the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)


def data_end(fd: int, file_size: int, start: int = 0) -> int:
    """Where the file's allocated data from `start` on ends (the next hole), or `file_size`
    when the file system cannot tell: nothing written lies past it in a sparse file written
    front to back."""
    try:
        return os.lseek(fd, start, os.SEEK_HOLE)
    except OSError:
        return file_size


def zero_tail(fd: int, pos: int, file_size: int, zero_run_proof: int | None,
              known_zero_to: int = 0) -> None:
    """See _zero_tail; what it zeroed is forced to disk (a rare case: stale bytes found)."""
    if _zero_tail(fd, pos, file_size, zero_run_proof, known_zero_to):
        os.fdatasync(fd)


def _zero_tail(fd: int, pos: int, file_size: int, zero_run_proof: int | None,
               known_zero_to: int) -> bool:
    """Zeroes [pos, file_size) so a later scan sees the end of data there, not stale bytes;
    [pos, known_zero_to) is known zero already. Holes are zeros, and reading stops once
    `zero_run_proof` zero bytes in a row were seen (data is written front to back)."""
    cur = max(pos, known_zero_to)
    zeros = cur - pos
    wrote = False
    while cur < file_size:
        if zero_run_proof is not None and zeros >= zero_run_proof:
            return wrote
        try:
            data_at = os.lseek(fd, cur, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # nothing but holes to the end
                return wrote
            data_at = cur  # the file system cannot tell: read everything
        zeros += data_at - cur
        cur = data_at
        if cur >= file_size or (zero_run_proof is not None and zeros >= zero_run_proof):
            return wrote
        try:  # within this data region: zeros written into a hole would allocate it
            region_end = os.lseek(fd, cur, os.SEEK_HOLE)
        except OSError:
            region_end = file_size
        n = min(len(_ZEROS), max(region_end, cur + 1) - cur, file_size - cur)
        chunk = os.pread(fd, n, cur)
        if chunk == _ZEROS[: len(chunk)]:
            zeros += len(chunk)
        else:
            os.pwrite(fd, _ZEROS[: len(chunk)], cur)
            wrote = True
            zeros = 0
        if not chunk:
            return wrote
        cur += len(chunk)
    return wrote
