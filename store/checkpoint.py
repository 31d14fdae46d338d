"""The checkpoint file: when commitlog, consume queues and index were last flushed (SPEC §2.6)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

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
        else:
            os.ftruncate(self.fd, _FILE_SIZE)

    def min_timestamp(self, index_enabled: bool) -> int:
        """Records stored before this are in flushed files everywhere (3 s of slack)."""
        ts = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        if index_enabled:
            ts = min(ts, self.index_msg_timestamp)
        return max(0, ts - 3000)

    def flush(self) -> None:
        os.pwrite(self.fd, _LAYOUT.pack(self.physic_msg_timestamp, self.logics_msg_timestamp,
                                        self.index_msg_timestamp), 0)
        os.fdatasync(self.fd)

    def close(self) -> None:
        self.flush()
        os.close(self.fd)
