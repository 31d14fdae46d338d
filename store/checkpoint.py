"""The checkpoint file: when commitlog, consume queues and index were last flushed (SPEC §2.6)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from store.disk_full import is_disk_full

_LAYOUT = struct.Struct(">qqq")
_FILE_SIZE = 4096


class StoreCheckpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        data = os.pread(self.fd, _LAYOUT.size, 0)
        if len(data) == _LAYOUT.size:
            (self.physic_msg_timestamp, self.logics_msg_timestamp,
             self.index_msg_timestamp) = _LAYOUT.unpack(data)
        # Allocated once, so that no flush fails for lack of space; on a full disk the
        # store starts without (allocation_error says why) and flush allocates it first.
        self.allocated = os.fstat(self.fd).st_blocks * 512 >= _FILE_SIZE
        self.allocation_error: OSError | None = None
        if not self.allocated:
            try:
                self.allocate()
            except OSError as e:
                if not is_disk_full(e):
                    os.close(self.fd)
                    raise
                self.allocation_error = e

    def allocate(self) -> None:
        os.posix_fallocate(self.fd, 0, _FILE_SIZE)
        self.allocated = True
        self.allocation_error = None

    def min_timestamp(self, index_enabled: bool) -> int:
        """Records stored before this are in flushed files everywhere (3 s of slack)."""
        ts = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        if index_enabled:
            ts = min(ts, self.index_msg_timestamp)
        return max(0, ts - 3000)

    def flush(self) -> None:
        """Writes the timestamps; OSError (ENOSPC) when the file has no space yet."""
        if not self.allocated:
            self.allocate()
        os.pwrite(self.fd, _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp,
                                        self.index_msg_timestamp), 0)
        os.fdatasync(self.fd)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            os.close(self.fd)
