"""RemotingCommand codec from hand-made frames (JSON and ROCKETMQ binary headers)."""

from __future__ import annotations

import json
import struct

import pytest

from remoting.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    SERIALIZE_ROCKETMQ,
    CommandError,
    RemotingCommand,
    decode,
    encode,
    frame_length,
)


def json_frame(header: dict, body: bytes = b"", type_byte: int = 0) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack(">iI", 4 + len(h) + len(body), (type_byte << 24) | len(h)) + h + body


def test_a_cpp_style_json_request_with_numbers_and_strings_in_ext_fields() -> None:
    frame = json_frame({"code": 10, "language": "CPP", "version": 63, "opaque": 7, "flag": 0,
                        "remark": None,
                        "extFields": {"topic": "T", "queueId": 3, "sysFlag": 0,
                                      "bornTimestamp": "1700000000000", "batch": "0"}},
                       b"hello")
    assert frame_length(frame[:4]) == len(frame) - 4
    cmd = decode(frame[4:])
    assert (cmd.code, cmd.opaque, cmd.language, cmd.version, cmd.body) == (10, 7, "CPP", 63,
                                                                           b"hello")
    assert cmd.ext_int("queueId") == 3 and cmd.ext_int("bornTimestamp") == 1700000000000
    assert cmd.ext_str("queueId") == "3" and cmd.ext_str("topic") == "T"
    assert not cmd.is_response and not cmd.is_oneway
    assert cmd.remark is None


def test_answers_carry_ext_fields_as_strings_and_the_request_s_opaque() -> None:
    request = RemotingCommand(code=11, opaque=99)
    answer = request.response(0, None, {"nextBeginOffset": 12, "minOffset": 0}, b"xy")
    frame = encode(answer)
    (total, info) = struct.unpack_from(">iI", frame)
    assert total == len(frame) - 4 and info >> 24 == 0
    header = json.loads(frame[8:8 + (info & 0xFFFFFF)])
    assert header["extFields"] == {"nextBeginOffset": "12", "minOffset": "0"}
    assert header["opaque"] == 99 and header["flag"] == FLAG_RESPONSE
    assert frame.endswith(b"xy")


def test_binary_header_by_hand_and_round_trip() -> None:
    remark = b"r"
    fields = b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v
                      for k, v in ((b"topic", b"T"), (b"queueId", b"2")))
    header = (struct.pack(">hbhii", 105, 0, 399, 5, FLAG_ONEWAY)
              + struct.pack(">i", 1) + remark + struct.pack(">i", len(fields)) + fields)
    frame = struct.pack(">I", (1 << 24) | len(header)) + header + b"B"
    cmd = decode(frame)
    assert cmd.serialize_type == SERIALIZE_ROCKETMQ and cmd.language == "JAVA"
    assert (cmd.code, cmd.version, cmd.opaque, cmd.remark, cmd.body) == (105, 399, 5, "r", b"B")
    assert cmd.ext_fields == {"topic": "T", "queueId": "2"} and cmd.is_oneway
    again = decode(encode(cmd)[4:])
    assert again == cmd
    answer = cmd.response(0, "ok")
    assert decode(encode(answer)[4:]).serialize_type == SERIALIZE_ROCKETMQ


@pytest.mark.parametrize(("frame", "message"), [
    (b"\x00\x00", "no header info"),
    (struct.pack(">I", 100) + b"{}", "header length 100 past"),
    (struct.pack(">I", 2) + b"[]", "not an object"),
    (struct.pack(">I", 3) + b"{x}", "does not parse"),
    (struct.pack(">I", 2) + b"{}", "no code"),
    (struct.pack(">I", 7 << 24) + b"", "unknown serialize type 7"),
    (struct.pack(">I", (1 << 24) | 3) + b"\x00\x01\x00", "ends inside a fixed field"),
    (struct.pack(">I", (1 << 24) | 17) + struct.pack(">hbhii", 1, 0, 0, 0, 0)
     + struct.pack(">i", 50), "remark length 50 past"),
])
def test_bad_frames_are_clear_errors(frame: bytes, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        decode(frame)


def test_bad_lengths_and_bad_ext_field_types() -> None:
    with pytest.raises(CommandError, match="under the 4 bytes"):
        frame_length(struct.pack(">i", 3))
    with pytest.raises(CommandError, match="over the limit of 1000"):
        frame_length(struct.pack(">i", 1001), 1000)
    with pytest.raises(CommandError, match="under the 4 bytes"):
        frame_length(struct.pack(">i", -5))
    cmd = decode(json_frame({"code": 11, "extFields": {"queueId": "x", "topic": [1],
                                                       "n": True}})[4:])
    with pytest.raises(CommandError, match="queueId is 'x', not an integer"):
        cmd.ext_int("queueId")
    with pytest.raises(CommandError, match="topic is list"):
        cmd.ext_str("topic")
    with pytest.raises(CommandError, match="n is a boolean"):
        cmd.ext_int("n")
    with pytest.raises(CommandError, match="missing is missing"):
        cmd.ext_int("missing")
    assert cmd.ext_int("missing", -1) == -1
    with pytest.raises(CommandError, match="opaque"):
        decode(json_frame({"code": 11, "opaque": "zz"})[4:])
