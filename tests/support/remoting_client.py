"""A blocking RocketMQ 4.x remoting client for tests: requests by code and extFields on one
socket, answers matched by opaque; requests the server sends meanwhile (40, 39, ...) are
kept in `pushed`. Written from the protocol (remoting/command.py), not from a client."""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from remoting.command import RemotingCommand, decode, encode

TIMEOUT_S = 30.0


class RemotingClient:
    def __init__(self, address: str, timeout_s: float = TIMEOUT_S) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.opaque = 0
        self.pushed: list[RemotingCommand] = []

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def read(self) -> RemotingCommand:
        (total,) = struct.unpack(">i", self._read_exactly(4))
        return decode(self._read_exactly(total))

    def send(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"", *,
             oneway: bool = False, serialize_type: int = 0) -> None:
        self.opaque += 1
        self.sock.sendall(encode(RemotingCommand(
            code=code, opaque=self.opaque, flag=2 if oneway else 0, ext_fields=ext or {},
            body=body, language="CPP", version=63, serialize_type=serialize_type)))

    def call(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
             serialize_type: int = 0) -> RemotingCommand:
        self.send(code, ext, body, serialize_type=serialize_type)
        want = self.opaque
        while True:
            cmd = self.read()
            if not cmd.is_response:
                self.pushed.append(cmd)
                continue
            if cmd.opaque == want:
                return cmd

    def call_raw(self, header: dict[str, Any], body: bytes = b"") -> RemotingCommand:
        """A request whose JSON header is sent as given (values of any JSON type)."""
        self.opaque += 1
        h = json.dumps({**header, "opaque": self.opaque}).encode()
        self.sock.sendall(struct.pack(">iI", 4 + len(h) + len(body), len(h)) + h + body)
        want = self.opaque
        while True:
            cmd = self.read()
            if cmd.is_response and cmd.opaque == want:
                return cmd
            if not cmd.is_response:
                self.pushed.append(cmd)

    def call_json(self, code: int, obj: Any, ext: dict[str, Any] | None = None
                  ) -> RemotingCommand:
        return self.call(code, ext, json.dumps(obj).encode())


def properties(**props: str) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


def decode_records(body: bytes) -> list[dict[str, Any]]:
    """Stored message records (RocketMQ's MessageDecoder layout, IPv4 hosts) as dicts."""
    out = []
    pos = 0
    while pos < len(body):
        (size, magic, crc, queue_id, flag, queue_offset, phys, sys_flag,
         born_ts) = struct.unpack_from(">iiiiiqqiq", body, pos)
        p = pos + 4 * 5 + 8 * 2 + 4 + 8
        born_host = body[p:p + 8]
        p += 8
        (store_ts,) = struct.unpack_from(">q", body, p)
        store_host = body[p + 8:p + 16]
        p += 8 + 8
        reconsume, prepared = struct.unpack_from(">iq", body, p)
        p += 12
        (body_len,) = struct.unpack_from(">i", body, p)
        p += 4
        msg_body = body[p:p + body_len]
        p += body_len
        topic_len = body[p]
        topic = body[p + 1:p + 1 + topic_len].decode()
        p += 1 + topic_len
        (props_len,) = struct.unpack_from(">h", body, p)
        props_text = body[p + 2:p + 2 + props_len].decode()
        props = dict(pair.split("\x01", 1) for pair in props_text.split("\x02") if pair)
        assert p + 2 + props_len == pos + size, "record size"
        out.append({"magic": magic, "queue_id": queue_id, "flag": flag,
                    "queue_offset": queue_offset, "commit_log_offset": phys,
                    "sys_flag": sys_flag, "born_timestamp": born_ts, "born_host": born_host,
                    "store_timestamp": store_ts, "store_host": store_host,
                    "reconsume_times": reconsume,
                    "prepared": prepared, "body": msg_body, "topic": topic,
                    "properties": props})
        pos += size
    return out
