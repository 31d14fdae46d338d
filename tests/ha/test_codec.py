from __future__ import annotations

import json
import random

import pytest

from ha.codec import (
    FRAME_HEADER_SIZE,
    HELLO_HEADER,
    HELLO_MAGIC,
    AckParser,
    Frame,
    FrameParser,
    HACodecError,
    SlaveHello,
    encode_ack,
    encode_frame,
    encode_heartbeat,
    encode_hello,
    scan_frames,
)


def test_ack_is_8_bytes_big_endian() -> None:
    assert encode_ack(0x0102030405060708) == bytes(range(1, 9))
    assert AckParser().feed(encode_ack(12345)) == [12345]


def test_frame_header_layout() -> None:
    data = encode_frame(0x10, b"abc")
    assert data[:FRAME_HEADER_SIZE] == bytes(7) + b"\x10" + b"\x00\x00\x00\x03"
    assert data[FRAME_HEADER_SIZE:] == b"abc"
    assert encode_heartbeat(5) == bytes(7) + b"\x05" + bytes(4)


def test_heartbeat_frame() -> None:
    (frame,) = FrameParser().feed(encode_heartbeat(77))
    assert frame == Frame(77, b"") and frame.is_heartbeat


@pytest.mark.parametrize("seed", range(20))
def test_chunk_parser_random_split_points(seed: int) -> None:
    rng = random.Random(seed)
    frames = []
    offset = 0
    for _ in range(rng.randint(1, 60)):
        body = rng.randbytes(rng.choice([0, 1, 7, 100, 4096, 32 * 1024]))
        frames.append(Frame(offset, body))
        offset += len(body)
    stream = b"".join(encode_frame(f.phy_offset, f.body) for f in frames)
    cuts = sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 50))))
    parser = FrameParser()
    got: list[Frame] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        got.extend(parser.feed(stream[prev:cut]))
        prev = cut
    assert got == frames
    assert parser.pending_bytes == 0


def test_chunk_parser_byte_by_byte_and_coalesced() -> None:
    stream = encode_frame(0, b"x" * 10) + encode_heartbeat(10) + encode_frame(10, b"yz")
    parser = FrameParser()
    got = [f for i in range(len(stream)) for f in parser.feed(stream[i:i + 1])]
    assert got == FrameParser().feed(stream) == [Frame(0, b"x" * 10), Frame(10, b""),
                                                 Frame(10, b"yz")]


def test_ack_parser_split_acks() -> None:
    stream = encode_ack(1) + encode_ack(2**40) + encode_ack(3)
    parser = AckParser()
    assert parser.feed(stream[:5]) == []
    assert parser.feed(stream[5:13]) == [1]
    assert parser.feed(stream[13:]) == [2**40, 3]


def test_bad_headers_are_errors() -> None:
    with pytest.raises(HACodecError):
        FrameParser().feed(encode_heartbeat(0)[:8] + b"\xff\xff\xff\xff")
    with pytest.raises(HACodecError):
        FrameParser(max_body_size=10).feed(encode_frame(0, b"x" * 11))
    with pytest.raises(HACodecError):
        AckParser().feed(encode_ack(-1))


def test_scan_frames_parses_in_place_and_says_what_the_tail_needs() -> None:
    stream = encode_frame(0, b"x" * 10) + encode_heartbeat(10) + encode_frame(10, b"y" * 5)
    buf = bytearray(b"??" + stream)  # frames need not start at the buffer start
    view = memoryview(buf)
    frames, rest, needed = scan_frames(view, 2, len(buf), 1000)
    assert [(f.phy_offset, bytes(view[f.body_start:f.body_start + f.body_size]))
            for f in frames] == [(0, b"x" * 10), (10, b""), (10, b"y" * 5)]
    assert (rest, needed) == (len(buf), FRAME_HEADER_SIZE)
    # Cut inside the last body: two whole frames; the third needs its header and body.
    cut = len(buf) - 3
    frames, rest, needed = scan_frames(view, 2, cut, 1000)
    assert len(frames) == 2 and needed == FRAME_HEADER_SIZE + 5
    assert rest == 2 + len(encode_frame(0, b"x" * 10)) + FRAME_HEADER_SIZE
    # Cut inside a header.
    frames, rest, needed = scan_frames(view, 2, 2 + 5, 1000)
    assert (frames, rest, needed) == ([], 2, FRAME_HEADER_SIZE)
    with pytest.raises(HACodecError):
        scan_frames(view, 2, len(buf), 9)  # a body over the limit is garbage, not a frame


def test_hello_then_acks_split_anywhere() -> None:
    hello = SlaveHello(3, "broker-b", "127.0.0.1:10931")
    stream = encode_hello(hello) + encode_ack(7) + encode_ack(9)
    for cut in range(1, len(stream)):
        parser = AckParser()
        assert parser.feed(stream[:cut]) + parser.feed(stream[cut:]) == [hello, 7, 9]


def test_plain_acks_without_hello_and_bad_hellos() -> None:
    assert AckParser().feed(encode_ack(5) + encode_ack(6)) == [5, 6]
    for bad in (json.dumps({"brokerId": 0, "brokerName": "a", "brokerAddr": "x"}),
                json.dumps({"brokerId": "1"}), "not json"):
        body = bad.encode()
        with pytest.raises(HACodecError):
            AckParser().feed(HELLO_HEADER.pack(HELLO_MAGIC, len(body)) + body)
    with pytest.raises(HACodecError):  # a hello only first
        AckParser().feed(encode_ack(1) + encode_hello(SlaveHello(1, "a", "b")))
    with pytest.raises(HACodecError):
        AckParser().feed(HELLO_HEADER.pack(HELLO_MAGIC, 1 << 20))
