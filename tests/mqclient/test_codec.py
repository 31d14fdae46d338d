"""Decoding raw pulled records: the store's C twin (common/_native.c decode_pulled) against the
pure-Python loop of mqclient.codec, on good and on damaged input."""

from __future__ import annotations

import random

import pytest

from common import native
from common.codec import encode_host, encode_properties, encode_record
from mqclient import codec
from mqclient.message import MessageExt

pytestmark = pytest.mark.skipif(native.lib is None, reason="the store's C fast paths are not "
                                "built (no C compiler) or are off (STORE_NATIVE=0)")


def _records(count: int) -> bytes:
    rng = random.Random(4)
    out = []
    phys = 0
    for i in range(count):
        props: dict[str, str] = {"UNIQ_KEY": f"ID{i}", "TAGS": f"t{i % 3}", "user": "v"}
        if i % 5 == 1:
            props = {}
        elif i % 5 == 2:
            props["KEYS"] = "k1  k2 ключ"
            props["città"] = "naïve ☃"
        elif i % 5 == 3:
            props["empty"] = ""
        born = ("::1", 7) if i % 7 == 3 else ("10.0.0.1", 1234)
        store = ("fe80::1", 10911) if i % 11 == 5 else ("127.0.0.1", 10911)
        sys_flag = (0x10 if ":" in born[0] else 0) | (0x20 if ":" in store[0] else 0)
        body = rng.randbytes(rng.choice([0, 5, 1024]))
        record = encode_record(
            queue_id=i % 4, flag=i % 3, queue_offset=i, physical_offset=phys,
            sys_flag=sys_flag, born_timestamp=1_700_000_000_000 + i,
            born_host=encode_host(*born), store_timestamp=1_700_000_000_500 + i,
            store_host=encode_host(*store), reconsume_times=i % 2,
            prepared_transaction_offset=0, body=body,
            topic=("TopicA" if i % 2 else "主题").encode(), properties=encode_properties(props))
        out.append(record)
        phys += len(record)
    return b"".join(out)


def _decode(raw: bytes, lib: object, monkeypatch: pytest.MonkeyPatch) -> list[MessageExt] | str:
    monkeypatch.setattr(native, "lib", lib)
    try:
        return codec.decode_records(raw, "broker-a")
    except Exception as e:  # noqa: BLE001 (the same error either way is what counts)
        return type(e).__name__


def test_native_and_python_decoders_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = native.lib
    raw = _records(60)
    fast = _decode(raw, lib, monkeypatch)
    assert fast == _decode(raw, None, monkeypatch)
    assert isinstance(fast, list) and len(fast) == 60
    assert fast[2].keys == ["k1", "k2", "ключ"] and fast[2].properties["città"] == "naïve ☃"
    assert fast[1].tags == "" and fast[1].msg_id == "" and fast[1].properties == {}
    rng = random.Random(8)
    for _ in range(300):  # damaged: the same messages or the same error either way
        data = bytearray(raw[: rng.randrange(len(raw) + 1)])
        for _ in range(rng.choice([0, 1, 3])):
            if data:
                pos = rng.randrange(len(data))
                data[pos] = rng.randrange(256)
        assert _decode(bytes(data), lib, monkeypatch) == _decode(bytes(data), None, monkeypatch)


@pytest.mark.parametrize("use_native", [True, False])
def test_bodies_stored_compressed_are_inflated(use_native: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A 4.x client compresses bodies over 4 KiB (sysFlag bit 0) and the broker stores them
    as sent: mqclient inflates them as a 4.x client does; others are left alone."""
    import zlib  # noqa: PLC0415

    if not use_native:
        monkeypatch.setattr(native, "lib", None)
    plain, big = b"small", b"0123456789" * 1000
    raw = b""
    for i, (body, sys_flag) in enumerate(((plain, 0), (zlib.compress(big, 5), 1))):
        raw += encode_record(
            queue_id=0, flag=0, queue_offset=i, physical_offset=len(raw), sys_flag=sys_flag,
            born_timestamp=1, born_host=encode_host("127.0.0.1", 1), store_timestamp=2,
            store_host=encode_host("127.0.0.1", 10911), reconsume_times=0,
            prepared_transaction_offset=0, body=body, topic=b"T",
            properties=encode_properties({"UNIQ_KEY": f"ID{i}"}))
    assert [m.body for m in codec.decode_records(raw, "b")] == [plain, big]
    # A body that does not inflate fails that message alone (its consumer dead-letters it),
    # never the whole pull.
    broken = raw.replace(zlib.compress(big, 5)[:8], b"\x00" * 8)
    first, bad = codec.decode_records(broken, "b")
    assert (first.body, first.body_error) == (plain, "")
    assert bad.body_error and bad.body.startswith(b"\x00" * 8)
