"""Decoding encoded send batches (RocketMQ's MessageBatch encoding) into store messages: the
store's C twin (common/_native.c decode_batch_messages) against the pure-Python
messages_from_batch(decode_batch(...)), on well-formed and on damaged input, and the broker's
send path that uses it (broker.convert.decode_messages)."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable

import pytest

from broker.constants import RESERVED_PROPERTIES
from broker.convert import (
    _BATCH_CLIENT_PROPERTIES,
    _fits_native_batch,
    decode_messages,
    messages_from_batch,
)
from broker.status import RequestError
from common import native
from mqproto import common_pb2, messaging_pb2
from remoting.framing import decode_batch, encode_batch_message
from store.message import Message
from tests.support.brokers import BrokerThread, pull_all

TOPIC, QUEUE_ID, BORN_HOST, BORN_TS = "TopicX", 3, ("10.0.0.7", 5123), 1_700_000_000_123
_NO_C = "the store's C fast paths are not built (no C compiler) or are off (STORE_NATIVE=0)"


def _props(pairs: list[tuple[str, str]]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs).encode()


def _batch(elements: list[tuple[int, bytes, bytes]]) -> bytes:
    return b"".join(encode_batch_message(flag, body, raw) for flag, body, raw in elements)


class _Keys:
    """A uniq_key() that counts its calls: both paths must call it alike."""

    def __init__(self) -> None:
        self._next = itertools.count()
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return f"GEN{next(self._next)}"


def _fields(msgs: list[Message]) -> list[tuple[object, ...]]:
    """Every field of every message, the properties in order, the body's type too."""
    out = []
    for m in msgs:
        values = tuple(getattr(m, f.name) for f in dataclasses.fields(Message))
        out.append((type(m), type(m.body), list(m.properties.items()), *values))
    return out


def _native(data: bytes, keys: _Keys) -> list[Message] | None:
    assert native.lib is not None
    return native.lib.decode_batch_messages(data, TOPIC, QUEUE_ID, BORN_HOST, BORN_TS, Message,
                                            RESERVED_PROPERTIES, _BATCH_CLIENT_PROPERTIES, keys)


def _python(data: bytes, keys: _Keys) -> list[Message] | str:
    """Python's messages, or the name of the error it raises."""
    try:
        return messages_from_batch(decode_batch(data), topic=TOPIC, queue_id=QUEUE_ID,
                                   born_host=BORN_HOST, born_timestamp=BORN_TS, uniq_key=keys)
    except (ValueError, RequestError) as e:
        return type(e).__name__


def _public(data: bytes, keys: _Keys, lib: object, monkeypatch: pytest.MonkeyPatch
            ) -> list[Message] | int:
    """decode_messages' messages, or the code of the RequestError it raises."""
    monkeypatch.setattr(native, "lib", lib)
    try:
        return decode_messages(data, topic=TOPIC, queue_id=QUEUE_ID, born_host=BORN_HOST,
                               born_timestamp=BORN_TS, uniq_key=keys)
    except RequestError as e:
        return e.code


_TEXTS = ["", "a", "TagA", "标签", "naïve ☃", "emoji 🎉", "x" * 300, "k1 k2 ключ", "ü" * 50]
_NAMES = ["color", "città", "名前", "a", "x" * 40, "🎉", "TAGS", "KEYS", "SHARDING_KEY",
          "UNIQ_KEY"]


def _random_pairs(rng: random.Random) -> list[tuple[str, str]]:
    kind = rng.randrange(8)
    if kind == 0:
        return []
    pairs: list[tuple[str, str]] = []
    if rng.random() < 0.6:
        pairs.append(("TAGS", rng.choice(_TEXTS[1:])))
    if rng.random() < 0.4:
        pairs.append(("KEYS", rng.choice(["k1", "k1 k2", "ключ 键", "a  b"])))
    if rng.random() < 0.3:
        pairs.append(("SHARDING_KEY", rng.choice(["order-1", "组", ""])))
    for _ in range(rng.choice([0, 0, 1, 2, 5])):
        pairs.append((rng.choice(_NAMES), rng.choice(_TEXTS)))
    uniq = rng.randrange(4)  # present, absent, empty, present twice (the last one wins)
    if uniq == 0:
        pairs.insert(rng.randrange(len(pairs) + 1), ("UNIQ_KEY", f"U{rng.randrange(10**6):X}"))
    elif uniq == 2:
        pairs.insert(rng.randrange(len(pairs) + 1), ("UNIQ_KEY", ""))
    elif uniq == 3:
        pairs += [("UNIQ_KEY", "FIRST"), ("UNIQ_KEY", rng.choice(["", "SECOND"]))]
    if kind == 7:
        rng.shuffle(pairs)
    return pairs


def _random_batch(rng: random.Random, count: int | None = None) -> bytes:
    count = count if count is not None else rng.choice([1, 1, 2, 3, 8, 32, 100])
    elements = []
    for _ in range(count):
        size = rng.choices([0, 1, 17, 1000, 70_000], weights=[4, 4, 4, 6, 1])[0]
        flag = rng.choice([0, 1, 7, -1, 0x7FFFFFFF, -0x80000000, rng.randrange(-2**31, 2**31)])
        elements.append((flag, rng.randbytes(size), _props(_random_pairs(rng))))
    return _batch(elements)


# -- the C twin against Python ------------------------------------------------------------------
def test_native_and_python_agree_on_well_formed_batches() -> None:
    if native.lib is None:
        pytest.skip(_NO_C)
    rng = random.Random(11)
    batches = [_random_batch(rng) for _ in range(300)]
    batches += [_random_batch(rng, 1), _random_batch(rng, 100)]
    batches += [_batch([(0, b"", b"")]), _batch([(0, b"x" * 70_000, b"")] * 3)]
    seen_sizes: set[int] = set()
    for data in batches:
        fast_keys, py_keys = _Keys(), _Keys()
        fast = _native(data, fast_keys)
        py = _python(data, py_keys)
        assert fast is not None and isinstance(py, list)
        assert _fields(fast) == _fields(py)
        assert fast_keys.calls == py_keys.calls
        seen_sizes.update(len(m.body) for m in fast)
    assert {0, 1, 1000, 70_000} <= seen_sizes


def test_native_unique_keys_and_property_order() -> None:
    if native.lib is None:
        pytest.skip(_NO_C)
    data = _batch([
        (5, b"a", _props([("TAGS", "标签"), ("名前", "值")])),           # absent: added last
        (0, b"", _props([("UNIQ_KEY", ""), ("KEYS", "k1 k2")])),         # empty: in its place
        (-1, b"c", _props([("UNIQ_KEY", "ID"), ("SHARDING_KEY", "g")])),  # given: kept
        (0, b"d", b""),
    ])
    keys = _Keys()
    msgs = _native(data, keys)
    assert msgs is not None and keys.calls == 3
    assert [list(m.properties.items()) for m in msgs] == [
        [("TAGS", "标签"), ("名前", "值"), ("UNIQ_KEY", "GEN0")],
        [("UNIQ_KEY", "GEN1"), ("KEYS", "k1 k2")],
        [("UNIQ_KEY", "ID"), ("SHARDING_KEY", "g")],
        [("UNIQ_KEY", "GEN2")],
    ]
    assert [(m.flag, m.body) for m in msgs] == [(5, b"a"), (0, b""), (-1, b"c"), (0, b"d")]
    assert all((m.topic, m.queue_id, m.born_host, m.born_timestamp, m.sys_flag)
               == (TOPIC, QUEUE_ID, BORN_HOST, BORN_TS, 0) for m in msgs)


def _damaged(rng: random.Random) -> list[bytes]:
    """Broken batches of every kind, and some that only look broken."""
    good = [_random_batch(rng, rng.choice([1, 2, 5])) for _ in range(40)]
    out: list[bytes] = []
    for data in good:  # random truncations
        out.append(data[:rng.randrange(len(data))])
        out.append(data[:rng.randrange(min(len(data), 60))])
    for data in good:  # size fields of the first or a later element changed
        starts = [0]
        while starts[-1] < len(data):
            starts.append(starts[-1] + int.from_bytes(data[starts[-1]:starts[-1] + 4], "big"))
        for _ in range(3):
            start = rng.choice(starts[:-1])
            body_len = int.from_bytes(data[start + 16:start + 20], "big")
            at = rng.choice([start, start + 1, start + 3, start + 16, start + 19,
                             start + 20 + body_len, start + 21 + body_len])
            damaged = bytearray(data)
            damaged[at] = rng.choice([damaged[at] ^ (1 << rng.randrange(8)), 0, 0xFF,
                                      rng.randrange(256)])
            out.append(bytes(damaged))
    for data in good:  # random bytes flipped anywhere (in a property a byte may still decode)
        damaged = bytearray(data)
        for _ in range(rng.choice([1, 2, 4])):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        out.append(bytes(damaged))
    for _ in range(40):  # garbage
        out.append(rng.randbytes(rng.choice([1, 4, 21, 22, 23, 64, 500])))
    out.append(bytes(22))  # total size 0
    out.append(b"\x00\x00\x00\x16" + bytes(18))  # 22 bytes: no body, no properties: fine
    out.append(b"\x00\x00\x00\x16" + bytes(18) + b"\x00")  # a trailing byte
    bad_props = [
        b"\xff\xfe", b"TAGS\x01\xc3\x02", b"\xe4\xb8\x01v\x02", b"a\x01\xed\xa0\x80\x02",
        _props([("REAL_QID", "3")]), _props([("TAGS", "t"), ("TRAN_MSG", "true")]),
        _props([("REAL_TOPIC", "x")]), _props([("WAIT", "true")]),
        _props([("", "v")]), b"\x01v\x02", b"novalue\x02", b"a\x01b\x02c\x02",
        b"a\x01b", b"a\x01b\x02c\x01d", b"\x02", b"\x02\x02", b"a\x01b\x02\x02",
        b"a\x01b\x01c\x02", b"a\x01\x01\x02", b"a\x01b\x02\x01c\x02",
    ]
    fine_props = [b"a\x01\x02", b"b\x01c\x02", _props([("a", "x"), ("a", "y")]),
                  _props([("DELAY", "3")])]
    for raw in bad_props + fine_props:
        for _ in range(3):
            elements = [(rng.randrange(4), rng.randbytes(rng.choice([0, 5, 100])),
                         _props(_random_pairs(rng))) for _ in range(rng.randrange(4))]
            elements.insert(rng.randrange(len(elements) + 1), (0, b"body", raw))
            out.append(_batch(elements))
    return out


def test_native_and_python_agree_on_damaged_batches() -> None:
    if native.lib is None:
        pytest.skip(_NO_C)
    inputs = _damaged(random.Random(12))
    assert len(inputs) >= 300
    handed_back = refused = 0
    for data in inputs:
        fast_keys, py_keys = _Keys(), _Keys()
        fast = _native(data, fast_keys)
        py = _python(data, py_keys)
        if fast is None:
            handed_back += 1
            assert fast_keys.calls == 0  # a None costs no UNIQ_KEY
        else:
            assert isinstance(py, list), (data, py)
            assert _fields(fast) == _fields(py)
            assert fast_keys.calls == py_keys.calls
        refused += isinstance(py, str)
    assert refused >= 250 and handed_back >= refused
    assert _native(b"", _Keys()) is None  # an empty batch: Python's


def test_native_takes_only_bytes() -> None:
    if native.lib is None:
        pytest.skip(_NO_C)
    data = _batch([(0, b"x", b"")])
    assert _native(bytearray(data), _Keys()) is None  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        native.lib.decode_batch_messages(data, TOPIC, QUEUE_ID, BORN_HOST, BORN_TS, Message,
                                         set(), _BATCH_CLIENT_PROPERTIES, _Keys())


def test_native_raises_what_uniq_key_raises() -> None:
    if native.lib is None:
        pytest.skip(_NO_C)

    def broken() -> str:
        raise RuntimeError("no key")

    with pytest.raises(RuntimeError, match="no key"):
        _native(_batch([(0, b"x", b"")]), broken)  # type: ignore[arg-type]


def test_native_path_only_for_the_message_fields_it_knows() -> None:
    assert _fits_native_batch(Message)  # the C twin builds Message(topic, body, ...) in order

    @dataclasses.dataclass
    class Reordered:
        topic: str
        properties: dict[str, str]
        body: bytes
        queue_id: int = 0
        flag: int = 0
        sys_flag: int = 0
        born_timestamp: int = 0
        born_host: tuple[str, int] = ("", 0)

    @dataclasses.dataclass
    class OtherDefault:
        topic: str
        body: bytes
        properties: dict[str, str]
        queue_id: int = 0
        flag: int = 0
        sys_flag: int = 4
        born_timestamp: int = 0
        born_host: tuple[str, int] = ("", 0)

    assert not _fits_native_batch(Reordered) and not _fits_native_batch(OtherDefault)


# -- the public decode_messages -----------------------------------------------------------------
@pytest.mark.parametrize("use_c", [True, False], ids=["c", "python"])
def test_decode_messages_refuses_exactly_what_python_refuses(
        use_c: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = native.lib
    if use_c and lib is None:
        pytest.skip(_NO_C)
    rng = random.Random(13)
    inputs = _damaged(rng) + [_random_batch(rng) for _ in range(30)]
    refused = 0
    for data in inputs:
        got_keys, py_keys = _Keys(), _Keys()
        got = _public(data, got_keys, lib if use_c else None, monkeypatch)
        py = _python(data, py_keys)
        if isinstance(py, str):
            assert got == common_pb2.MESSAGE_ILLEGAL, (data, py)
            refused += 1
        else:
            assert isinstance(got, list) and _fields(got) == _fields(py)
        assert got_keys.calls == py_keys.calls
    assert refused >= 250


@pytest.mark.parametrize("use_c", [True, False], ids=["c", "python"])
def test_decode_messages_remarks(use_c: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = native.lib
    if use_c and lib is None:
        pytest.skip(_NO_C)
    monkeypatch.setattr(native, "lib", lib if use_c else None)
    cases = [
        (_batch([(0, b"x", b"")])[:10], "cut off"),
        (_batch([(0, b"x", _props([("REAL_QID", "1")]))]), "reserved"),
        (_batch([(0, b"x", b"\xff\x02")]), "not UTF-8"),
        (_batch([(0, b"x", b"a\x01b")]), "do not end with"),
        (_batch([(0, b"x", b"ab\x02")]), "not name\\x01value"),
    ]
    for data, remark in cases:
        with pytest.raises(RequestError) as e:
            decode_messages(data, topic=TOPIC, queue_id=QUEUE_ID, born_host=BORN_HOST,
                            born_timestamp=BORN_TS, uniq_key=_Keys())
        assert e.value.code == common_pb2.MESSAGE_ILLEGAL and remark in e.value.remark
    assert decode_messages(b"", topic=TOPIC, queue_id=QUEUE_ID, born_host=BORN_HOST,
                           born_timestamp=BORN_TS, uniq_key=_Keys()) == []


# -- the broker's send path ---------------------------------------------------------------------
@pytest.mark.parametrize("use_c", [True, False], ids=["c", "python"])
def test_encoded_batch_send(use_c: bool, start_broker: Callable[..., BrokerThread],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    if use_c and native.lib is None:
        pytest.skip(_NO_C)
    if not use_c:
        monkeypatch.setattr(native, "lib", None)
    M = messaging_pb2
    b = start_broker(maxMessageSize=1024)
    data = _batch([(1, b"m0", _props([("TAGS", "t0"), ("UNIQ_KEY", "ID0")])),
                   (2, b"m1", _props([("KEYS", "k1 k2"), ("名前", "值")]))])
    r = b.messaging.SendBatch(M.SendBatchRequest(topic="TopicE", queue_id=1,
                                                 encoded_messages=data), timeout=10)
    assert r.status.code == common_pb2.SUCCESS, r.status
    assert (r.queue_id, r.first_queue_offset, len(r.commit_log_offsets)) == (1, 0, 2)
    end = b.controller.store.max_phy_offset
    got = pull_all(b, "TopicE", 1, expect=2)
    assert [(m.body, m.flag, m.tag, list(m.keys)) for m in got] == [
        (b"m0", 1, "t0", []), (b"m1", 2, "", ["k1", "k2"])]
    assert got[0].system_properties.message_id == "ID0"
    assert len(got[1].system_properties.message_id) == 32
    assert dict(got[1].user_properties) == {"名前": "值"}
    refused = [
        (data[:-1], "bad size"),
        (_batch([(0, b"x", _props([("REAL_QID", "1")]))]), "reserved"),
        (_batch([(0, b"x" * 600, b""), (0, b"y" * 600, b"")]), "maxMessageSize"),
    ]
    for bad, remark in refused:
        r = b.messaging.SendBatch(M.SendBatchRequest(topic="TopicE", encoded_messages=bad),
                                  timeout=10)
        assert r.status.code == common_pb2.MESSAGE_ILLEGAL and remark in r.status.remark
    assert b.controller.store.max_phy_offset == end
