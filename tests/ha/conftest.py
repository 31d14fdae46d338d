"""In-memory stores for the HA channel: a bytearray per commitlog file, fake records."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import struct
from collections.abc import AsyncIterator

import pytest

from common.constants import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE
from ha.codec import SlaveHello, encode_hello
from ha.constants import HA_PROOF_TAIL_SIZE
from ha.interface import HAStore
from ha.master import HAService
from ha.proof import tail_crc
from ha.slave import HAClient

# TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, QUEUEOFFSET, PHYSICALOFFSET
RECORD_HEAD = struct.Struct(">iiiiiqq")
BLANK = struct.Struct(">ii")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Runs `async def` tests in a fresh event loop (no pytest-asyncio here)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**args))
    return True


class MemoryStore:
    """Implements ha.interface.HAStore over bytearrays of `file_size` bytes each.

    Like the real commitlog: records never cross a file; a record that does not fit
    (size + 8 > space left) leaves an end-of-file blank; an empty store takes its first
    replicated bytes at any file start.
    """

    def __init__(self, file_size: int = 64 * 1024) -> None:
        self.file_size = file_size
        self.files: list[tuple[int, bytearray]] = []  # (start offset, data so far)
        self.appends: list[tuple[int, int]] = []  # (offset, size) of append_commitlog calls

    @property
    def max_phy_offset(self) -> int:
        if not self.files:
            return 0
        start, data = self.files[-1]
        return start + len(data)

    @property
    def min_phy_offset(self) -> int:
        return self.files[0][0] if self.files else 0

    def _file_at(self, offset: int) -> tuple[int, bytearray] | None:
        for start, data in self.files:
            if start <= offset < start + self.file_size:
                return start, data
        return None

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes:
        found = self._file_at(offset)
        if found is None:
            return b""
        start, data = found
        pos = offset - start
        return bytes(data[pos:pos + max_bytes])

    def append_commitlog(self, offset: int, data: bytes | memoryview) -> None:
        if self.files and offset != self.max_phy_offset:
            raise ValueError(f"replicated data at {offset}, commitlog ends at "
                             f"{self.max_phy_offset}")
        if not self.files and offset % self.file_size:
            raise ValueError(f"an empty commitlog cannot start at {offset}")
        self._write(offset, data)
        self.appends.append((offset, len(data)))

    def _write(self, offset: int, data: bytes | memoryview) -> None:
        if not self.files or len(self.files[-1][1]) == self.file_size:
            self.files.append((offset, bytearray()))
        start, buf = self.files[-1]
        if offset - start + len(data) > self.file_size:
            raise ValueError(f"data at {offset} crosses the end of file {start}")
        buf += data

    # -- master side helpers ---------------------------------------------------------------
    def put_record(self, body_size: int, rng: random.Random | None = None) -> int:
        """Appends a fake record (real head layout) with a body; returns its offset."""
        total = RECORD_HEAD.size + body_size
        if total + BLANK.size > self.file_size:
            raise ValueError("record larger than a file")
        if not self.files:
            self.files.append((0, bytearray()))
        start, buf = self.files[-1]
        space = self.file_size - len(buf)
        if total + BLANK.size > space:
            buf += BLANK.pack(space, BLANK_MAGIC_CODE) + bytes(space - BLANK.size)
            self.files.append((start + self.file_size, bytearray()))
            start, buf = self.files[-1]
        offset = start + len(buf)
        body = (rng or random).randbytes(body_size)
        buf += RECORD_HEAD.pack(total, MESSAGE_MAGIC_CODE, 0, 0, 0, 0, offset) + body
        return offset

    def fill(self, n_bytes: int, body_size: int = 1000, seed: int = 1) -> None:
        rng = random.Random(seed)
        end = self.max_phy_offset + n_bytes
        while self.max_phy_offset < end:
            self.put_record(body_size, rng)

    def drop_first_file(self) -> None:
        """As expired-file cleaning does: the oldest file goes, min offset moves up."""
        self.files.pop(0)

    def content(self) -> bytes:
        return b"".join(bytes(d) for _, d in self.files)


# Quick intervals for a master and a slave on loopback (tests/ha and tests/acl).
FAST = dict(heartbeat_interval=0.05, housekeeping_interval=1.0, poll_interval=0.01)
FAST_SLAVE = dict(report_interval=0.05, housekeeping_interval=1.0, reconnect_interval=0.05)


@contextlib.asynccontextmanager
async def master(store: MemoryStore, **kw: object) -> AsyncIterator[HAService]:
    service = HAService(store, host="127.0.0.1", **{**FAST, **kw})  # type: ignore[arg-type]
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


@contextlib.asynccontextmanager
async def slave(store: MemoryStore, port: int, **kw: object) -> AsyncIterator[HAClient]:
    client = HAClient(store, f"127.0.0.1:{port}", **{**FAST_SLAVE, **kw})  # type: ignore[arg-type]
    client.start()
    try:
        yield client
    finally:
        await client.stop()


def proven_hello(store: HAStore, offset: int, broker_id: int = 1,
                 broker_addr: str = "10.0.0.9:10911") -> bytes:
    """The hello of a slave holding exactly `store`'s commitlog up to `offset`."""
    size = min(HA_PROOF_TAIL_SIZE, offset - store.min_phy_offset)
    crc = tail_crc(store, offset, size)
    assert crc is not None
    return encode_hello(SlaveHello(broker_id, "broker-a", broker_addr, offset, size, crc))
