"""Decoding the commitlog records of a raw pull (SPEC 2.2) into MessageExt, lean: hosts are
formatted once per distinct raw address, offsetMsgId is the hex of the raw store host and
the commitlog offset."""

from __future__ import annotations

import ipaddress

from mqclient.message import MessageExt, MQClientError
from store.codec import HEADER_STRUCTS
from store.constants import MESSAGE_MAGIC_CODE

_RESERVED_OUT = frozenset({"TAGS", "KEYS", "UNIQ_KEY"})
_HOST_CACHE: dict[bytes, str] = {}


def _host(raw: bytes) -> str:
    text = _HOST_CACHE.get(raw)
    if text is None:
        ip = ipaddress.ip_address(raw[:-4])
        port = int.from_bytes(raw[-4:], "big")
        text = f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"
        if len(_HOST_CACHE) < 4096:
            _HOST_CACHE[raw] = text
    return text


def _properties(data: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    if data:
        for pair in data.decode().split("\x02"):
            if pair:
                name, _, value = pair.partition("\x01")
                out[name] = value
    return out


def decode_records(raw: bytes, broker_name: str) -> list[MessageExt]:
    """Messages from concatenated commitlog records; MQClientError when they are not."""
    out: list[MessageExt] = []
    append = out.append
    pos, end = 0, len(raw)
    while pos < end:
        sys_flag = int.from_bytes(raw[pos + 36:pos + 40], "big")
        header = HEADER_STRUCTS[(bool(sys_flag & 0x10), bool(sys_flag & 0x20))]
        if pos + header.size > end:
            raise MQClientError("DECODE_ERROR", f"truncated record header at {pos}")
        (total, magic, _crc, queue_id, flag, queue_offset, phys, _sys, born_ts, born_host,
         store_ts, store_host, reconsume, _prepared, body_len) = header.unpack_from(raw, pos)
        if magic != MESSAGE_MAGIC_CODE or total <= header.size or pos + total > end:
            raise MQClientError("DECODE_ERROR", f"bad record at {pos} (magic {magic:#x}, "
                                f"size {total})")
        p = pos + header.size
        body = raw[p:p + body_len]
        p += body_len
        topic_len = raw[p]
        topic = raw[p + 1:p + 1 + topic_len].decode()
        p += 3 + topic_len
        props = _properties(raw[p:pos + total])
        pos += total
        append(MessageExt(
            topic=topic, body=body, tags=props.get("TAGS", ""),
            keys=props["KEYS"].split() if "KEYS" in props else [],
            properties={k: v for k, v in props.items() if k not in _RESERVED_OUT},
            msg_id=props.get("UNIQ_KEY", ""),
            offset_msg_id=(store_host + phys.to_bytes(8, "big")).hex().upper(),
            broker_name=broker_name, queue_id=queue_id, queue_offset=queue_offset,
            commit_log_offset=phys, born_timestamp=born_ts, store_timestamp=store_ts,
            born_host=_host(born_host), store_host=_host(store_host),
            reconsume_times=reconsume, flag=flag))
    return out
