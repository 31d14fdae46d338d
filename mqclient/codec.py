"""Decoding the commitlog records of a raw pull (SPEC 2.2) into MessageExt, lean: the layout,
properties and hosts come from common.codec (pure); no CRC check, hosts are formatted once per
distinct raw address, offsetMsgId is the hex of the raw store host and the commitlog offset."""

from __future__ import annotations

from common import native
from common.codec import decode_host, decode_properties, header_struct
from common.compression import COMPRESSED_FLAG, DecompressError, decompress_body
from common.constants import MESSAGE_MAGIC_CODE
from mqclient.message import MessageExt, MQClientError

_HOST_CACHE: dict[bytes, str] = {}


def format_host(host: str, port: int) -> str:
    """`ip:port`, `[ipv6]:port`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _host(raw: bytes) -> str:
    text = _HOST_CACHE.get(raw)
    if text is None:
        text = format_host(*decode_host(raw))
        if len(_HOST_CACHE) < 4096:
            _HOST_CACHE[raw] = text
    return text


def decompress_bodies(msgs: list[MessageExt]) -> list[MessageExt]:
    """Decompresses the bodies marked COMPRESSED (and clears the mark); a body that cannot
    be read keeps its stored bytes and the mark, with the reason in `body_error`."""
    for m in msgs:
        if m.sys_flag & COMPRESSED_FLAG:
            try:
                m.body = decompress_body(m.body, m.sys_flag)
                m.sys_flag &= ~COMPRESSED_FLAG
            except DecompressError as e:
                m.body_error = str(e)
    return msgs


def decode_records(raw: bytes, broker_name: str) -> list[MessageExt]:
    """Messages from concatenated commitlog records, compressed bodies decompressed
    (decompress_bodies); MQClientError when they are not records."""
    if native.lib is not None:  # the store's C twin of _decode_records; None: use that
        fast = native.lib.decode_pulled(raw, broker_name, MessageExt, _HOST_CACHE, _host)
        if fast is not None:
            return decompress_bodies(fast)
    return decompress_bodies(_decode_records(raw, broker_name))


def _decode_records(raw: bytes, broker_name: str) -> list[MessageExt]:
    out: list[MessageExt] = []
    append = out.append
    pos, end = 0, len(raw)
    while pos < end:
        header = header_struct(int.from_bytes(raw[pos + 36:pos + 40], "big"))
        if pos + header.size > end:
            raise MQClientError("DECODE_ERROR", f"truncated record header at {pos}")
        (total, magic, _crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts, born_host,
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
        # What is left after the three the broker owns are the user properties.
        props = decode_properties(raw[p:pos + total])
        tags = props.pop("TAGS", "")
        keys = props.pop("KEYS", None)
        uniq_key = props.pop("UNIQ_KEY", "")
        pos += total
        append(MessageExt(
            topic=topic, body=body, tags=tags, keys=keys.split() if keys is not None else [],
            properties=props, msg_id=uniq_key,
            offset_msg_id=(store_host + phys.to_bytes(8, "big")).hex().upper(),
            broker_name=broker_name, queue_id=queue_id, queue_offset=queue_offset,
            commit_log_offset=phys, born_timestamp=born_ts, store_timestamp=store_ts,
            born_host=_host(born_host), store_host=_host(store_host),
            reconsume_times=reconsume, flag=flag, sys_flag=sys_flag))
    return out
