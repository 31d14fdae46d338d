"""The broker's send channel on the wire, and RocketMQ's MessageBatch encoding (pure).

A gRPC call costs a Python broker some 300-400 us of CPU whatever it carries, so producers
send batches over one plain TCP connection per broker instead (as RocketMQ 4.x's remoting
does), many requests in flight, answered by id in any order. Both directions are frames,
big-endian:

    length (4: bytes after this field) | request id (4) | kind (1) | payload

A SEND_BATCH request's payload is a serialized SendBatchRequest with `encoded_messages`;
its answer, with the same id and kind, a serialized SendBatchResponse. A SEND_BATCHES
request carries a SendBatchesRequest: batches of several topics (or queues) of one broker,
each stored or refused on its own, answered by a SendBatchesResponse (one SendBatchResponse
per batch, in order); producers gather async sends of many topics this way. A frame over
MAX_FRAME_BYTES, or of an unknown kind, closes the connection.

`encoded_messages` holds each message as RocketMQ's MessageDecoder.encodeMessage lays it
out: TOTALSIZE (4) | MAGICCODE (4, 0) | BODYCRC (4, 0) | FLAG (4) | body length (4) + body |
properties length (2) + properties (`name\\x01value\\x02` pairs, UTF-8).
"""

from __future__ import annotations

import struct

FRAME_HEADER = struct.Struct(">IIB")
KIND_SEND_BATCH = 1
KIND_SEND_BATCHES = 2
# Access control (acl/): the first frame of a connection to a broker with aclEnable. Its
# payload is JSON {accessKey, timestamp, nonce, signature} (acl.signing, method
# SEND_CHANNEL_AUTH_METHOD, no fields); the answer (same id and kind) is a serialized
# common Status: SUCCESS, or NO_PERMISSION with the reason (then the broker closes).
KIND_AUTH = 3
KINDS = frozenset({KIND_SEND_BATCH, KIND_SEND_BATCHES, KIND_AUTH})
SEND_CHANNEL_AUTH_METHOD = "/mqcluster.v1.SendChannel/Auth"
MAX_FRAME_BYTES = 64 * 1024 * 1024
REQUEST_ID_MASK = 0xFFFFFFFF
READ_BUFFER_BYTES = 256 * 1024
MIN_READ_ROOM = 64 * 1024

_ELEMENT_HEAD = struct.Struct(">iiiii")  # total size, magic, body CRC, flag, body length
_PROPERTIES_LENGTH = struct.Struct(">H")
ELEMENT_FIXED_BYTES = _ELEMENT_HEAD.size + _PROPERTIES_LENGTH.size
MAX_PROPERTIES_BYTES = 0x7FFF


class FrameError(ValueError):
    """Bytes that are not frames of this channel: the connection cannot go on."""


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint; a negative int32 / int64 as its 64-bit two's complement."""
    if 0 <= n < 0x4000:  # lengths of batches and small ints: one or two bytes
        return bytes((n,)) if n < 0x80 else bytes(((n & 0x7F) | 0x80, n >> 7))
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _length_delimited(tag: int, data: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(data)) + data if data else b""


def _int_field(tag: int, n: int) -> bytes:
    return bytes((tag,)) + _varint(n) if n else b""


_TOPIC_FIELDS: dict[str, bytes] = {}  # SendBatchRequest.topic encoded, by topic
_MAX_TOPIC_FIELDS = 65536


class SendBatchesWriter:
    """A SendBatchesRequest's bytes, written directly: what SerializeToString gives for the
    same batches (fields in number order, proto3 zeros left out). Spread over many topics a
    request holds hundreds of batches of a few messages each, and building a SendBatchRequest
    object per batch, then the request, then serializing it, cost a producer ~9 us a batch
    (this ~1 us); the messages' bytes are copied once, into the frame."""

    def __init__(self, producer_group: str, default_topic_queue_nums: int) -> None:
        self._group = _length_delimited(0x0A, producer_group.encode())  # field 1
        self._queue_nums = _int_field(0x28, default_topic_queue_nums)  # field 5
        self._born = 0
        self._tail = b""  # field 7 of `_born`
        self._parts: list[bytes] = []

    def add(self, topic: str, queue_id: int, elements: list[bytes], size: int,
            born_timestamp: int, sys_flags: list[int] | None = None) -> None:
        """One SendBatchRequest: `elements` (MessageBatch elements, `size` bytes in all)
        to `queue_id` of `topic`; `sys_flags`, when given, their sysflag bits (field 9,
        packed)."""
        topic_field = _TOPIC_FIELDS.get(topic)
        if topic_field is None:
            if len(_TOPIC_FIELDS) >= _MAX_TOPIC_FIELDS:
                _TOPIC_FIELDS.clear()
            topic_field = _TOPIC_FIELDS[topic] = _length_delimited(0x12, topic.encode())
        if born_timestamp != self._born:
            self._born, self._tail = born_timestamp, _int_field(0x38, born_timestamp)
        head = b"".join((self._group, topic_field,  # fields 1, 2
                         _int_field(0x18, queue_id), self._queue_nums,  # fields 3, 5
                         b"\x32" + _varint(size) if size else b""))  # field 6's head
        tail = self._tail
        if sys_flags:
            packed = b"".join(_varint(f) for f in sys_flags)
            tail += b"\x4a" + _varint(len(packed)) + packed  # field 9
        parts = self._parts
        parts += (b"\x0a", _varint(len(head) + size + len(tail)), head)  # batches: field 1
        parts += elements
        parts.append(tail)

    def parts(self) -> list[bytes]:
        """The payload in parts (SendChannel.request joins them with the frame's header)."""
        return self._parts


def encode_frame(request_id: int, kind: int, payload: bytes) -> bytes:
    return FRAME_HEADER.pack(len(payload) + 5, request_id, kind) + payload


class FrameReader:
    """Splits a byte stream into (request id, kind, payload) frames. Received bytes go
    straight into its buffer (`get_buffer` / `received`, as asyncio.BufferedProtocol asks)
    or are copied there by `feed`: receiving into a fresh 256 KiB bytes object per read
    (what asyncio.Protocol does) cost a broker more than parsing the frames.

    The buffer is allocated at the first read, `initial_bytes` large, and grows on demand:
    x4 (up to READ_BUFFER_BYTES) when a read filled all the room offered, and to the size
    of a frame larger than that (at most twice what arrived of it, so a header alone
    claiming a large frame costs nothing). `shrink` drops it while no frame is pending (an
    idle connection then holds no buffer)."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES,
                 initial_bytes: int = READ_BUFFER_BYTES) -> None:
        self._max = max_frame_bytes
        self._initial = self._size = max(4096, min(initial_bytes, READ_BUFFER_BYTES))
        self._buffer = bytearray()
        self._offered = 0  # the room the last get_buffer() gave
        self._start = 0  # the first byte not yet parsed
        self._end = 0  # the end of the bytes received

    @property
    def pending(self) -> int:
        """Bytes received of frames not yet complete."""
        return self._end - self._start

    @property
    def buffer_bytes(self) -> int:
        return len(self._buffer)

    def shrink(self) -> None:
        """Frees the buffer when no frame is pending; the next read allocates a small one."""
        if self._start == self._end:
            self._buffer = bytearray()
            self._start = self._end = 0
            self._size = self._initial

    def get_buffer(self) -> memoryview:
        """Room for at least min(MIN_READ_ROOM, the current size) bytes after those
        received."""
        buffer, start, end = self._buffer, self._start, self._end
        if start == end:
            start = end = self._start = self._end = 0
            if len(buffer) > self._size:  # after a large frame
                buffer = self._buffer = bytearray(self._size)
        min_room = min(MIN_READ_ROOM, self._size)
        if len(buffer) - end < min_room:
            # A new buffer, not a resized one: asyncio may still hold a view of the old.
            pending = end - start
            need = pending + min_room
            if pending >= 4:  # the frame's length is known (and checked by received())
                length = int.from_bytes(buffer[start:start + 4], "big")
                need = max(need, min(4 + length, 2 * need))
            fresh = bytearray(max(self._size, need))
            fresh[:pending] = buffer[start:end]
            buffer = self._buffer = fresh
            self._start, self._end = 0, pending
        view = memoryview(buffer)[self._end:]
        self._offered = len(view)
        return view

    def received(self, n: int) -> list[tuple[int, int, bytes]]:
        """The frames completed by `n` bytes just written into get_buffer()'s view."""
        self._end += n
        if n >= self._offered and self._size < READ_BUFFER_BYTES:  # reads fill it: grow
            self._size = min(4 * self._size, READ_BUFFER_BYTES)
        buffer = self._buffer
        frames = []
        pos, end = self._start, self._end
        while end - pos >= 4:
            length = int.from_bytes(buffer[pos:pos + 4], "big")
            if length < 5 or length > self._max:
                raise FrameError(f"frame length {length} outside 5..{self._max}")
            if end - pos - 4 < length:
                break
            _, request_id, kind = FRAME_HEADER.unpack_from(buffer, pos)
            if kind not in KINDS:
                raise FrameError(f"unknown frame kind {kind}")
            frames.append((request_id, kind, bytes(buffer[pos + 9:pos + 4 + length])))
            pos += 4 + length
        self._start = pos
        return frames

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        frames = []
        while data:
            room = self.get_buffer()
            n = min(len(room), len(data))
            room[:n] = data[:n]
            frames += self.received(n)
            data = data[n:]
        return frames


def encode_batch_message(flag: int, body: bytes, properties: bytes) -> bytes:
    size = ELEMENT_FIXED_BYTES + len(body) + len(properties)
    return b"".join((_ELEMENT_HEAD.pack(size, 0, 0, flag, len(body)), body,
                     _PROPERTIES_LENGTH.pack(len(properties)), properties))


def decode_batch(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """(flag, body, properties bytes) of each message; ValueError when `data` is not
    whole MessageBatch elements."""
    out = []
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < ELEMENT_FIXED_BYTES:
            raise ValueError(f"message {len(out)} of the batch is cut off at byte {pos}")
        size, _, _, flag, body_len = _ELEMENT_HEAD.unpack_from(data, pos)
        body_at = pos + _ELEMENT_HEAD.size
        props_len_at = body_at + body_len
        if body_len < 0 or size < ELEMENT_FIXED_BYTES or pos + size > end \
                or props_len_at + 2 > pos + size:
            raise ValueError(f"message {len(out)} of the batch has a bad size "
                             f"(total {size}, body {body_len}) at byte {pos}")
        (props_len,) = _PROPERTIES_LENGTH.unpack_from(data, props_len_at)
        if props_len_at + 2 + props_len != pos + size:
            raise ValueError(f"message {len(out)} of the batch: total size {size} does not "
                             f"match its body ({body_len}) and properties ({props_len})")
        out.append((flag, data[body_at:props_len_at], data[props_len_at + 2:pos + size]))
        pos += size
    return out
