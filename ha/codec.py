"""HA wire format (SPEC §5), pure functions over bytes; big-endian both ways.

slave -> master: an 8-byte ack offset (the slave's commitlog max offset). A slave of this
project first says who it is: `HELLO_MAGIC (8) | length (4) | JSON`, so the master names the
link by the slave's brokerId and address; acks can never be negative, so a plain 4.x-style
slave that starts with an ack is still understood. The hello also proves what the slave
holds: its max offset and a CRC32 of the bytes just before it (`maxOffset`, `tailSize`,
`tailCrc`; optional keys, so older hellos still decode) and, with a cluster key, its proof
(`authTs`, `authNonce`, `authMac`: ha/auth.py).
master -> slave: frames `phyOffset (8) | bodySize (4) | body`; bodySize 0 is a heartbeat.
"""

from __future__ import annotations

import json
import struct
import sys
from typing import NamedTuple

ACK = struct.Struct(">q")
ACK_SIZE = ACK.size  # 8
FRAME_HEADER = struct.Struct(">qi")
FRAME_HEADER_SIZE = FRAME_HEADER.size  # 12
HELLO_HEADER = struct.Struct(">qi")  # HELLO_MAGIC, JSON length
HELLO_MAGIC = -0x4D5148_454C4C4F  # negative: never an ack
HELLO_MAX_SIZE = 4096


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


class SlaveHello(NamedTuple):
    """Who the slave at the other end of a link is, and the proof of what it holds: its
    commitlog max offset and the CRC32 of the `tail_size` bytes before it (-1, 0, 0: none)."""

    broker_id: int
    broker_name: str
    broker_addr: str
    max_offset: int = -1
    tail_size: int = 0
    tail_crc: int = 0
    # The cluster key's proof (ha/auth.py): wall time (ms), a nonce and an HMAC-SHA256 over
    # the fields above with them; empty when the slave has no clusterKey.
    auth_ts: int = 0
    auth_nonce: str = ""
    auth_mac: str = ""


def encode_hello(hello: SlaveHello) -> bytes:
    data: dict[str, object] = {"brokerId": hello.broker_id, "brokerName": hello.broker_name,
                               "brokerAddr": hello.broker_addr}
    if hello.max_offset >= 0:
        data.update(maxOffset=hello.max_offset, tailSize=hello.tail_size,
                    tailCrc=hello.tail_crc)
    if hello.auth_mac:
        data.update(authTs=hello.auth_ts, authNonce=hello.auth_nonce, authMac=hello.auth_mac)
    body = json.dumps(data).encode()
    return HELLO_HEADER.pack(HELLO_MAGIC, len(body)) + body


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def decode_hello(body: bytes) -> SlaveHello:
    try:
        data = json.loads(body)
        hello = SlaveHello(data["brokerId"], data["brokerName"], data["brokerAddr"],
                           data.get("maxOffset", -1), data.get("tailSize", 0),
                           data.get("tailCrc", 0), data.get("authTs", 0),
                           data.get("authNonce", ""), data.get("authMac", ""))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise HACodecError(f"bad hello from the slave: {e}") from None
    if (not _is_int(hello.broker_id) or hello.broker_id <= 0
            or not isinstance(hello.broker_name, str) or not isinstance(hello.broker_addr, str)):
        raise HACodecError(f"bad hello from the slave: {data!r} (a slave's brokerId is > 0)")
    if (not _is_int(hello.auth_ts) or not isinstance(hello.auth_nonce, str)
            or not isinstance(hello.auth_mac, str) or len(hello.auth_nonce) > 64
            or len(hello.auth_mac) > 128):
        raise HACodecError(f"bad hello from the slave: {data!r} (bad cluster-key proof)")
    if (not all(_is_int(v) for v in hello[3:6]) or hello.max_offset < -1
            or not 0 <= hello.tail_size <= max(hello.max_offset, 0)
            or not 0 <= hello.tail_crc <= 0xFFFFFFFF):
        raise HACodecError(f"bad hello from the slave: {data!r} (bad proof of its data)")
    return hello


class AckParser:
    """Turns byte chunks into what the slave reports, split anywhere: an optional hello
    first, then ack offsets (8 bytes each)."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._first = True

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[int | SlaveHello]:
        self._pending += chunk
        out: list[int | SlaveHello] = []
        if self._first:
            if len(self._pending) < ACK_SIZE:
                return out
            magic, = ACK.unpack_from(self._pending)
            if magic == HELLO_MAGIC:
                if len(self._pending) < HELLO_HEADER.size:
                    return out
                _, size = HELLO_HEADER.unpack_from(self._pending)
                if not 0 < size <= HELLO_MAX_SIZE:
                    raise HACodecError(f"bad hello length {size}")
                end = HELLO_HEADER.size + size
                if len(self._pending) < end:
                    return out
                out.append(decode_hello(bytes(self._pending[HELLO_HEADER.size:end])))
                del self._pending[:end]
            self._first = False
        out.extend(self._acks())
        return out

    def _acks(self) -> list[int]:
        whole = len(self._pending) - len(self._pending) % ACK_SIZE
        acks = [a for (a,) in ACK.iter_unpack(bytes(self._pending[:whole]))]
        del self._pending[:whole]
        for a in acks:
            if a < 0:
                raise HACodecError(f"bad ack offset {a}")
        return acks
