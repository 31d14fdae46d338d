"""The send channel's frames and RocketMQ's MessageBatch encoding (remoting/framing.py), pure:
FrameReader gives the same frames however the stream is cut and whichever API receives it,
refuses bytes that are not frames, and decode_batch undoes encode_batch_message and refuses
cut or inconsistent batches."""

from __future__ import annotations

import random
import struct

import pytest

from mqproto import messaging_pb2
from remoting.framing import (
    ELEMENT_FIXED_BYTES,
    KIND_SEND_BATCH,
    MAX_FRAME_BYTES,
    MIN_READ_ROOM,
    FrameError,
    FrameReader,
    SendBatchesWriter,
    decode_batch,
    encode_batch_message,
    encode_frame,
)

Frame = tuple[int, int, bytes]


def _payload(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _frames(sizes: list[int]) -> list[Frame]:
    """Frames of these payload sizes, with ids at both ends of the 32-bit range."""
    ids = [0, 0xFFFFFFFF, 1, 0x80000000, 7]
    return [(ids[i % len(ids)] ^ i, KIND_SEND_BATCH, _payload(size, i))
            for i, size in enumerate(sizes)]


def _stream(frames: list[Frame]) -> bytes:
    return b"".join(encode_frame(request_id, kind, payload)
                    for request_id, kind, payload in frames)


BIG_SIZES = [0, 1, 70 * 1024, 0, 300 * 1024, 1, 3 * 1024 * 1024, 0, 70 * 1024, 1]
SMALL_SIZES = [0, 1, 2, 300, 0, 5000, 1, 70 * 1024, 0, 17]
BIG = _frames(BIG_SIZES)
BIG_STREAM = _stream(BIG)
SMALL = _frames(SMALL_SIZES)
SMALL_STREAM = _stream(SMALL)


def _random_cuts(data: bytes, rng: random.Random, pieces: int) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), pieces - 1))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def _feed_all(chunks: list[bytes]) -> list[Frame]:
    reader = FrameReader()
    out: list[Frame] = []
    for chunk in chunks:
        out += reader.feed(chunk)
    return out


def _receive_all(data: bytes, sizes: list[int] | None) -> list[Frame]:
    """Through get_buffer / received as asyncio.BufferedProtocol uses them: each read writes
    up to the room offered (`sizes`: how much each read brings; None: as much as fits)."""
    reader = FrameReader()
    out: list[Frame] = []
    pos = 0
    step = 0
    while pos < len(data):
        room = reader.get_buffer()
        assert len(room) >= MIN_READ_ROOM
        want = sizes[step % len(sizes)] if sizes else len(room)
        n = min(len(room), want, len(data) - pos)
        room[:n] = data[pos:pos + n]
        out += reader.received(n)
        pos += n
        step += 1
    return out


def test_encode_frame_layout() -> None:
    frame = encode_frame(0x01020304, KIND_SEND_BATCH, b"abc")
    assert frame == struct.pack(">IIB", 8, 0x01020304, KIND_SEND_BATCH) + b"abc"
    assert encode_frame(0xFFFFFFFF, KIND_SEND_BATCH, b"")[:9] == \
        b"\x00\x00\x00\x05\xff\xff\xff\xff\x01"


def test_stream_fed_whole() -> None:
    assert _feed_all([BIG_STREAM]) == BIG
    assert _feed_all([b"", BIG_STREAM, b""]) == BIG


def test_stream_fed_one_byte_at_a_time() -> None:
    reader = FrameReader()
    out: list[Frame] = []
    for i in range(len(SMALL_STREAM)):
        out += reader.feed(SMALL_STREAM[i:i + 1])
    assert out == SMALL


@pytest.mark.parametrize("seed", range(6))
def test_stream_cut_at_random_points(seed: int) -> None:
    rng = random.Random(seed)
    assert _feed_all(_random_cuts(BIG_STREAM, rng, rng.choice([2, 5, 40, 300]))) == BIG
    # Cuts right around frame boundaries and inside the 9-byte headers.
    bounds = []
    pos = 0
    for _, _, payload in BIG:
        bounds += [pos + d for d in (1, 3, 4, 5, 8, 9, 10) if pos + d < len(BIG_STREAM)]
        pos += 9 + len(payload)
    cuts = sorted(set(bounds) | set(rng.sample(range(1, len(BIG_STREAM)), 20)))
    chunks = [BIG_STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(BIG_STREAM)],
                                              strict=True)]
    assert _feed_all(chunks) == BIG


def test_frames_come_out_as_soon_as_complete() -> None:
    reader = FrameReader()
    first, second = (encode_frame(i, KIND_SEND_BATCH, b"x" * i) for i in (3, 4))
    assert reader.feed(first[:-1]) == []
    assert reader.feed(first[-1:] + second[:2]) == [(3, KIND_SEND_BATCH, b"xxx")]
    assert reader.feed(second[2:]) == [(4, KIND_SEND_BATCH, b"xxxx")]
    assert reader.feed(b"") == []


def test_buffer_api_gives_the_same_frames() -> None:
    assert _receive_all(BIG_STREAM, None) == BIG  # each read fills the room offered
    assert _receive_all(SMALL_STREAM, [1]) == SMALL  # one byte per read
    rng = random.Random(42)
    for _ in range(4):
        sizes = [rng.choice([1, 2, 9, 100, 4096, 65536, 1 << 20]) for _ in range(50)]
        assert _receive_all(BIG_STREAM, sizes) == BIG


def test_buffer_api_keeps_working_after_a_large_frame() -> None:
    """Small frames after a 3 MB one (the big buffer is dropped once drained)."""
    frames = _frames([3 * 1024 * 1024, 1, 0, 70 * 1024]) * 2
    assert _receive_all(_stream(frames), None) == frames
    assert _receive_all(_stream(frames), [65536, 3, 100000]) == frames


def test_old_views_are_not_overwritten() -> None:
    """A view get_buffer gave may still be held (asyncio): when the room runs short a new
    buffer takes the pending bytes, and writes through the old view do not reach it."""
    reader = FrameReader()
    frames = _frames([200 * 1024, 10])
    data = _stream(frames)
    room = reader.get_buffer()
    first = len(room) - MIN_READ_ROOM + 1
    room[:first] = data[:first]
    assert reader.received(first) == []
    new_room = reader.get_buffer()
    assert len(new_room) >= MIN_READ_ROOM
    room[:] = b"\xee" * len(room)  # scribbling over the old buffer
    rest = data[first:]
    new_room[:len(rest)] = rest
    assert reader.received(len(rest)) == frames


@pytest.mark.parametrize("length", [0, 1, 2, 3, 4])
def test_length_under_five_is_a_frame_error(length: int) -> None:
    with pytest.raises(FrameError):
        FrameReader().feed(struct.pack(">I", length))
    reader = FrameReader()
    assert reader.feed(encode_frame(1, KIND_SEND_BATCH, b"ok")) == [(1, KIND_SEND_BATCH, b"ok")]
    with pytest.raises(FrameError):  # also after good frames, via the buffer API
        room = reader.get_buffer()
        room[:9] = struct.pack(">IIB", length, 2, KIND_SEND_BATCH)
        reader.received(9)


def test_length_over_the_maximum_is_a_frame_error() -> None:
    reader = FrameReader(max_frame_bytes=1000)
    payload = b"p" * (1000 - 5)
    assert reader.feed(encode_frame(9, KIND_SEND_BATCH, payload)) == \
        [(9, KIND_SEND_BATCH, payload)]  # exactly the maximum is fine
    with pytest.raises(FrameError):  # refused from its 4 length bytes, before the rest
        reader.feed(struct.pack(">I", 1001))
    with pytest.raises(FrameError):
        FrameReader().feed(struct.pack(">IIB", MAX_FRAME_BYTES + 1, 1, KIND_SEND_BATCH))
    with pytest.raises(FrameError):
        FrameReader().feed(b"\xff\xff\xff\xff")


@pytest.mark.parametrize("kind", [0, 4, 0x7F, 0xFF])  # 1: SEND_BATCH, 2: SEND_BATCHES, 3: AUTH
def test_unknown_kind_is_a_frame_error(kind: int) -> None:
    with pytest.raises(FrameError):
        FrameReader().feed(encode_frame(1, kind, b"payload"))
    reader = FrameReader()
    good = encode_frame(1, KIND_SEND_BATCH, b"a")
    assert reader.feed(good) == [(1, KIND_SEND_BATCH, b"a")]
    with pytest.raises(FrameError):
        reader.feed(encode_frame(2, kind, b""))


def test_frame_error_is_a_value_error() -> None:
    assert issubclass(FrameError, ValueError)


# -- MessageBatch elements ---------------------------------------------------------------------
def _props(pairs: list[tuple[str, str]]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs).encode()


ELEMENTS: list[tuple[int, bytes, bytes]] = [
    (0, b"hello", _props([("UNIQ_KEY", "ABC"), ("TAGS", "TagA")])),
    (0, b"", b""),
    (-1, b"\x00\x01\x02", _props([("KEYS", "k1 k2"), ("名前", "値 🎉")])),
    (0x7FFFFFFF, b"x" * 70000, b""),
    (-0x80000000, b"", _props([("a", "b" * 0x7000)])),
    (5, random.Random(1).randbytes(4096), _props([("SHARDING_KEY", "order-1")])),
]


def test_element_layout() -> None:
    element = encode_batch_message(3, b"body", b"k\x01v\x02")
    assert element == struct.pack(">iiiii", ELEMENT_FIXED_BYTES + 4 + 4, 0, 0, 3, 4) + \
        b"body" + struct.pack(">H", 4) + b"k\x01v\x02"
    assert ELEMENT_FIXED_BYTES == 22


def test_batch_round_trip() -> None:
    assert decode_batch(b"") == []
    for element in ELEMENTS:
        assert decode_batch(encode_batch_message(*element)) == [element]
    data = b"".join(encode_batch_message(*e) for e in ELEMENTS)
    assert decode_batch(data) == ELEMENTS
    rng = random.Random(7)
    many = [(rng.randrange(-2**31, 2**31), rng.randbytes(rng.choice([0, 1, 100])),
             _props([("UNIQ_KEY", f"U{i}")] * rng.randrange(3))) for i in range(500)]
    assert decode_batch(b"".join(encode_batch_message(*e) for e in many)) == many


def test_cut_batches_are_refused() -> None:
    elements = ELEMENTS[:3] + ELEMENTS[5:]
    encoded = [encode_batch_message(*e) for e in elements]
    data = b"".join(encoded)
    boundaries = {sum(len(e) for e in encoded[:i]) for i in range(len(encoded) + 1)}
    for cut in range(len(data)):
        if cut in boundaries:  # whole elements: a shorter batch
            assert len(decode_batch(data[:cut])) == sorted(boundaries).index(cut)
        else:
            with pytest.raises(ValueError):
                decode_batch(data[:cut])
    for extra in (b"\x00", b"\x00" * 21, encode_batch_message(0, b"x", b"")[:-1]):
        with pytest.raises(ValueError):
            decode_batch(data + extra)


def _element(size: int, flag: int, body_len: int, body: bytes, props_len: int,
             props: bytes) -> bytes:
    return struct.pack(">iiiii", size, 0, 0, flag, body_len) + body + \
        struct.pack(">H", props_len) + props


@pytest.mark.parametrize("element", [
    _element(22 + 4 + 2, 0, 4, b"body", 2, b"ab" + b"!"),  # total 1 short of the bytes
    _element(22 + 4 + 2 + 1, 0, 4, b"body", 2, b"ab"),  # total 1 over (cut short)
    _element(22 + 4 + 3, 0, 4, b"body", 2, b"abc"),  # properties length 1 short
    _element(22 + 4 + 2, 0, 4, b"body", 3, b"ab"),  # properties length 1 over
    _element(22 + 4 + 2, 0, 5, b"body", 2, b"ab"),  # body length 1 over
    _element(22 + 4 + 2, 0, -1, b"body", 2, b"ab"),  # negative body length
    _element(22 + 4 + 2, 0, 1 << 30, b"body", 2, b"ab"),  # body length past the end
    _element(21, 0, 0, b"", 0, b""),  # total under the fixed part
    _element(0, 0, 0, b"", 0, b""),
    _element(-22, 0, 0, b"", 0, b""),
])
def test_inconsistent_batches_are_refused(element: bytes) -> None:
    with pytest.raises(ValueError):
        decode_batch(element)
    good = encode_batch_message(0, b"ok", b"")
    with pytest.raises(ValueError):
        decode_batch(good + element)
    with pytest.raises(ValueError):
        decode_batch(element + good)


@pytest.mark.parametrize("group, queue_nums", [("PG", 8), ("", 0), ("组-é", 1 << 20)])
def test_send_batches_writer_gives_what_protobuf_serializes(group: str, queue_nums: int
                                                             ) -> None:
    batches = [("TopicA", 0, [b"x" * 3], 1764000000000),
               ("话题", 7, [b"a" * 200, b"b" * 10], 1),
               ("TopicB", -1, [b"y" * 70000], 0),  # the broker picks; a 3-byte length
               ("TopicC", 127, [b"z" * 16370], 128),  # varints at 1 / 2 / 3 bytes' edges
               ("TopicD", 128, [b"w" * 16384], 16383),
               ("TopicE", 16384, [b"v" * 127], 16384),
               ("T" * 255, 2**31 - 1, [], 2**63 - 1)]  # empty: field 6 left out
    writer = SendBatchesWriter(group, queue_nums)
    for topic, queue_id, elements, born in batches:
        writer.add(topic, queue_id, elements, sum(map(len, elements)), born)
    expected = messaging_pb2.SendBatchesRequest(batches=[messaging_pb2.SendBatchRequest(
        producer_group=group, topic=topic, queue_id=queue_id,
        default_topic_queue_nums=queue_nums, encoded_messages=b"".join(elements),
        born_timestamp=born) for topic, queue_id, elements, born in batches])
    assert b"".join(writer.parts()) == expected.SerializeToString()
    assert b"".join(SendBatchesWriter(group, queue_nums).parts()) == b""
