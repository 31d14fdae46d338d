"""HA wire format (SPEC §5), pure functions over bytes; big-endian both ways.

slave -> master: an 8-byte ack offset (the slave's commitlog max offset).
master -> slave: frames `phyOffset (8) | bodySize (4) | body`; bodySize 0 is a heartbeat.
"""

from __future__ import annotations

import struct
import sys
from typing import NamedTuple

ACK = struct.Struct(">q")
ACK_SIZE = ACK.size  # 8
FRAME_HEADER = struct.Struct(">qi")
FRAME_HEADER_SIZE = FRAME_HEADER.size  # 12


class HACodecError(ValueError):
    """Bytes that cannot be a frame or an ack (negative offset or size)."""


class Frame(NamedTuple):
    phy_offset: int
    body: bytes  # empty for a heartbeat

    @property
    def is_heartbeat(self) -> bool:
        return not self.body


def encode_ack(offset: int) -> bytes:
    return ACK.pack(offset)


def encode_frame_header(phy_offset: int, body_size: int) -> bytes:
    return FRAME_HEADER.pack(phy_offset, body_size)


def encode_frame(phy_offset: int, body: bytes) -> bytes:
    return FRAME_HEADER.pack(phy_offset, len(body)) + body


def encode_heartbeat(phy_offset: int) -> bytes:
    return FRAME_HEADER.pack(phy_offset, 0)


class FrameSpan(NamedTuple):
    """A whole frame inside a buffer: its body is buffer[body_start:body_start + body_size]."""

    phy_offset: int
    body_start: int
    body_size: int


def scan_frames(view: memoryview, start: int, end: int, max_body_size: int
                ) -> tuple[list[FrameSpan], int, int]:
    """The whole frames in view[start:end], parsed in place (nothing copied).

    Returns (frames, where the unparsed rest starts, bytes the first incomplete frame needs
    in all: its header and body, or a header's size when even that is incomplete).
    """
    frames: list[FrameSpan] = []
    unpack = FRAME_HEADER.unpack_from
    pos = start
    while end - pos >= FRAME_HEADER_SIZE:
        offset, size = unpack(view, pos)
        if offset < 0 or size < 0 or size > max_body_size:
            raise HACodecError(f"bad frame header: offset {offset}, body size {size}")
        body_end = pos + FRAME_HEADER_SIZE + size
        if body_end > end:
            return frames, pos, FRAME_HEADER_SIZE + size
        frames.append(FrameSpan(offset, pos + FRAME_HEADER_SIZE, size))
        pos = body_end
    return frames, pos, FRAME_HEADER_SIZE


class FrameParser:
    """Turns byte chunks, split anywhere, into whole frames.

    A chunk is parsed in place; only an incomplete tail is kept for the next chunk. Each
    body is copied once (out of the chunk or the kept tail), headers are not copied.
    """

    def __init__(self, max_body_size: int | None = None) -> None:
        self._pending = bytearray()
        self.max_body_size = max_body_size

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[Frame]:
        if self._pending:
            self._pending += chunk
            data: bytes | bytearray | memoryview = self._pending
        else:
            data = chunk
        limit = sys.maxsize if self.max_body_size is None else self.max_body_size
        with memoryview(data) as view:
            spans, pos, _ = scan_frames(view, 0, len(view), limit)
            frames = [Frame(f.phy_offset, bytes(view[f.body_start:f.body_start + f.body_size]))
                      for f in spans]
            rest = bytes(view[pos:]) if data is not self._pending else b""
        if data is self._pending:
            del self._pending[:pos]
        else:
            self._pending += rest
        return frames


class AckParser:
    """Turns byte chunks into the ack offsets they carry (8 bytes each, split anywhere)."""

    def __init__(self) -> None:
        self._pending = bytearray()

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[int]:
        self._pending += chunk
        whole = len(self._pending) - len(self._pending) % ACK_SIZE
        acks = [a for (a,) in ACK.iter_unpack(bytes(self._pending[:whole]))]
        del self._pending[:whole]
        for a in acks:
            if a < 0:
                raise HACodecError(f"bad ack offset {a}")
        return acks
