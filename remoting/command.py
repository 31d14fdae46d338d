"""RocketMQ 4.x's RemotingCommand on the wire (pure functions over bytes).

A frame, big-endian:

    total (4: bytes after this field) | header-info (4) | header | body

header-info: the top byte is the serialize type (0 JSON, 1 ROCKETMQ binary), the low three
bytes the header length. The Apache C++ client ignores the type byte (it reads all four
bytes as the length and parses JSON), so a server answers in the type a request came in.

JSON header: ``{"code", "language", "version", "opaque", "flag", "remark", "extFields"}``.
Binary header (RocketMQSerializable): int16 code, byte language, int16 version, int32
opaque, int32 flag, int32 remark length + UTF-8, int32 extFields length + repeated (int16
key length + key, int32 value length + value).

extFields values are strings in Java; the C++ client sends some as JSON numbers: decoding
keeps what came (str, int, ...), `ext_str` / `ext_int` read either form. Encoding writes
every value as a string (the C++ client reads only string values of answers).
"""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any

SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
FLAG_RESPONSE = 1
FLAG_ONEWAY = 2
DEFAULT_VERSION = 399  # V4_9_4 in RocketMQ's version enum: what our answers carry
MAX_HEADER_BYTES = 0xFFFFFF
# Java's default (com.rocketmq.remoting.frameMaxLength); a broker passes its own bound.
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024

LANGUAGES = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP",
             "GO", "PHP", "OMS", "RUST")
_LANGUAGE_CODES = {name: i for i, name in enumerate(LANGUAGES)}

_INT = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")  # total, header-info
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag


class CommandError(ValueError):
    """Bytes that are not a RemotingCommand: the stream cannot go on."""


@dataclasses.dataclass
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, Any] = dataclasses.field(default_factory=dict)
    body: bytes = b""
    language: str = "PYTHON"
    version: int = DEFAULT_VERSION
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(self, code: int, remark: str | None = None,
                 ext_fields: dict[str, Any] | None = None, body: bytes = b""
                 ) -> RemotingCommand:
        """The answer to this request: same opaque and serialize type, flag = response."""
        return RemotingCommand(code=code, opaque=self.opaque, flag=FLAG_RESPONSE, remark=remark,
                               ext_fields=ext_fields or {}, body=body,
                               serialize_type=self.serialize_type)

    def ext_str(self, name: str, default: str = "") -> str:
        """An extFields value as a string (JSON numbers as their decimal form)."""
        value = self.ext_fields.get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (int, str)):
            return str(value)
        raise CommandError(f"extFields.{name} is {type(value).__name__}, not a string")

    def ext_int(self, name: str, default: int | None = None) -> int:
        """An extFields value as an int, sent as a JSON number or a decimal string;
        CommandError naming the field when it is missing (no default) or not a number."""
        value = self.ext_fields.get(name)
        if value is None or value == "":
            if default is None:
                raise CommandError(f"extFields.{name} is missing")
            return default
        if isinstance(value, bool):
            raise CommandError(f"extFields.{name} is a boolean, not a number")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise CommandError(f"extFields.{name} is {value!r}, not an integer")

    def ext_bool(self, name: str, default: bool = False) -> bool:
        value = self.ext_fields.get(name)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in ("true", "1")


def _str_ext(ext_fields: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in ext_fields.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[str(key)] = value if isinstance(value, str) else str(value)
    return out


def encode_header(cmd: RemotingCommand) -> bytes:
    ext = _str_ext(cmd.ext_fields)
    if cmd.serialize_type == SERIALIZE_ROCKETMQ:
        remark = (cmd.remark or "").encode()
        parts = [_BIN_FIXED.pack(cmd.code, _LANGUAGE_CODES.get(cmd.language, 7),
                                 cmd.version, cmd.opaque, cmd.flag),
                 _INT.pack(len(remark)) if cmd.remark is not None else _INT.pack(0), remark]
        fields = bytearray()
        for key, value in ext.items():
            k, v = key.encode(), value.encode()
            fields += struct.pack(">h", len(k)) + k + _INT.pack(len(v)) + v
        parts += [_INT.pack(len(fields)), bytes(fields)]
        return b"".join(parts)
    if cmd.serialize_type != SERIALIZE_JSON:
        raise CommandError(f"unknown serialize type {cmd.serialize_type}")
    header: dict[str, Any] = {"code": cmd.code, "language": cmd.language,
                              "version": cmd.version, "opaque": cmd.opaque, "flag": cmd.flag,
                              "serializeTypeCurrentRPC": "JSON"}
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    if ext:
        header["extFields"] = ext
    return json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame of `cmd`, length prefix included."""
    header = encode_header(cmd)
    if len(header) > MAX_HEADER_BYTES:
        raise CommandError(f"header of {len(header)} bytes, over {MAX_HEADER_BYTES}")
    info = (cmd.serialize_type << 24) | len(header)
    return _PREFIX.pack(4 + len(header) + len(cmd.body), info) + header + cmd.body


def frame_length(prefix: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> int:
    """The length field of a frame (the bytes after it); CommandError when it cannot be a
    frame: under 4 (no header info) or over `max_frame_bytes`."""
    (total,) = _INT.unpack(prefix[:4])
    if total < 4:
        raise CommandError(f"frame length {total}: under the 4 bytes of its header info")
    if total > max_frame_bytes:
        raise CommandError(f"frame length {total} over the limit of {max_frame_bytes} bytes")
    return total


def decode(frame: bytes | memoryview) -> RemotingCommand:
    """A command from a frame's bytes after its length field (header-info, header, body).

    The type byte is read as RocketMQ's Java side does; a JSON header whose length takes
    the whole four bytes (the C++ client's view) is the same thing for lengths < 16 MiB."""
    data = bytes(frame)
    if len(data) < 4:
        raise CommandError(f"frame of {len(data)} bytes has no header info")
    (info,) = struct.unpack_from(">I", data)
    serialize_type, header_len = info >> 24, info & MAX_HEADER_BYTES
    if header_len > len(data) - 4:
        raise CommandError(f"header length {header_len} past the frame's "
                           f"{len(data) - 4} bytes after the header info")
    header, body = data[4:4 + header_len], data[4 + header_len:]
    if serialize_type == SERIALIZE_JSON:
        cmd = decode_json_header(header)
    elif serialize_type == SERIALIZE_ROCKETMQ:
        cmd = decode_binary_header(header)
    else:
        raise CommandError(f"unknown serialize type {serialize_type} in the header info")
    cmd.body = body
    return cmd


def _as_int(header: dict[str, Any], name: str, default: int) -> int:
    value = header.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise CommandError(f"header field {name} is {value!r}, not an integer")
    try:
        return int(value)
    except ValueError:
        raise CommandError(f"header field {name} is {value!r}, not an integer") from None


def decode_json_header(header: bytes) -> RemotingCommand:
    try:
        obj = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CommandError(f"JSON header does not parse: {e}") from None
    if not isinstance(obj, dict):
        raise CommandError(f"JSON header is a {type(obj).__name__}, not an object")
    if "code" not in obj:
        raise CommandError("JSON header has no code")
    ext = obj.get("extFields") or {}
    if not isinstance(ext, dict):
        raise CommandError(f"extFields is a {type(ext).__name__}, not an object")
    remark = obj.get("remark")
    language = obj.get("language", "JAVA")
    return RemotingCommand(
        code=_as_int(obj, "code", 0), opaque=_as_int(obj, "opaque", 0),
        flag=_as_int(obj, "flag", 0), remark=None if remark is None else str(remark),
        ext_fields=ext, language=str(language) if language is not None else "OTHER",
        version=_as_int(obj, "version", 0), serialize_type=SERIALIZE_JSON)


def decode_binary_header(header: bytes) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BIN_FIXED.unpack_from(header)
        pos = _BIN_FIXED.size
        remark, pos = _read_chunk(header, pos, ">i", "remark")
        fields_bytes, pos = _read_chunk(header, pos, ">i", "extFields")
        ext: dict[str, Any] = {}
        fpos = 0
        while fpos < len(fields_bytes):
            key, fpos = _read_chunk(fields_bytes, fpos, ">h", "extFields key")
            value, fpos = _read_chunk(fields_bytes, fpos, ">i", "extFields value")
            ext[key.decode()] = value.decode()
    except struct.error:
        raise CommandError("binary header ends inside a fixed field") from None
    except UnicodeDecodeError as e:
        raise CommandError(f"binary header holds a string that is not UTF-8: {e}") from None
    return RemotingCommand(
        code=code, opaque=opaque, flag=flag, remark=remark.decode() if remark else None,
        ext_fields=ext,
        language=LANGUAGES[language] if 0 <= language < len(LANGUAGES) else "OTHER",
        version=version, serialize_type=SERIALIZE_ROCKETMQ)


def _read_chunk(data: bytes, pos: int, fmt: str, what: str) -> tuple[bytes, int]:
    (length,) = struct.unpack_from(fmt, data, pos)
    pos += struct.calcsize(fmt)
    if length < 0 or pos + length > len(data):
        raise CommandError(f"binary header: {what} length {length} past its end")
    return data[pos:pos + length], pos + length
