"""Encoding messages to send: the store's C twin (common/_native.c client_elements) against
mqclient's Message.check + Message.encode, on good messages and on every kind it must refuse."""

from __future__ import annotations

import random

import pytest

from common import native
from mqclient.message import Message, MQClientError, encode_messages
from remoting.framing import decode_batch

pytestmark = pytest.mark.skipif(native.lib is None, reason="the store's C fast paths are not "
                                "built (no C compiler) or are off (STORE_NATIVE=0)")
MAX_SIZE = 4096


def _encode(msgs: list[Message], ids: list[str], sharding: str, lib: object,
            monkeypatch: pytest.MonkeyPatch) -> bytes | str:
    monkeypatch.setattr(native, "lib", lib)
    try:
        return encode_messages(msgs, ids, MAX_SIZE, sharding)
    except Exception as e:  # noqa: BLE001 (the same error either way is what counts)
        return f"{type(e).__name__}: {e}"


def _good(rng: random.Random, i: int) -> Message:
    msg = Message("TopicA", rng.randbytes(rng.choice([1, 7, 1024, MAX_SIZE])))
    if i % 3 == 0:
        msg.tags = rng.choice(["TagA", "標籤", "a b"])
    if i % 4 == 1:
        msg.keys = rng.choice([["k1", "k2"], ("ключ",), "  one two\tthree ", "solo", []])
    if i % 5 == 2:
        msg.properties = {"user": "v", "città": "naïve ☃", "empty": ""}
    if i % 6 == 3:
        msg.delay_level = rng.choice([1, 3, 18, 99])
    if i % 7 == 4:
        msg.flag = rng.choice([-(2**31), -1, 5, 2**31 - 1])
    return msg


def test_native_and_python_encoders_agree_on_good_messages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    lib = native.lib
    for round_ in range(40):
        msgs = [_good(rng, round_ * 7 + i) for i in range(rng.randint(1, 12))]
        ids = [f"ID{round_:04d}{i:04d}" for i in range(len(msgs))]
        sharding = "" if round_ % 3 else f"order-{round_}"
        fast = _encode(msgs, ids, sharding, lib, monkeypatch)
        assert isinstance(fast, bytes)
        assert lib.client_elements(msgs, ids, sharding, MAX_SIZE, 0x7FFF,  # type: ignore[attr-defined]
                                   frozenset()) is not None  # the C path did it
        assert fast == _encode(msgs, ids, sharding, None, monkeypatch)
        assert len(decode_batch(fast)) == len(msgs)


class _Str(str):
    pass


BAD_OR_UNUSUAL: list[dict[str, object]] = [
    {"topic": ""}, {"body": b""}, {"body": b"x" * (MAX_SIZE + 1)}, {"body": "text"},
    {"body": bytearray(b"ok")}, {"body": memoryview(b"ok")},  # fine, but Python's to do
    {"tags": "a\x01b"}, {"tags": "a\x02"}, {"tags": _Str("sub")}, {"tags": 5},
    {"keys": ["ok", ""]}, {"keys": ["a b"]}, {"keys": ["a\u2003b"]}, {"keys": ["k\x02"]},
    {"keys": "   "}, {"keys": {"set"}}, {"keys": [5]},
    {"properties": {"TAGS": "reserved"}}, {"properties": {"": "v"}},
    {"properties": {"n\x01": "v"}}, {"properties": {"n": "v\x02"}}, {"properties": {"n": 5}},
    {"properties": {"big": "x" * 0x8000}}, {"properties": {"s": "\ud800"}},
    {"delay_level": -1}, {"delay_level": True}, {"delay_level": 1.0},
    {"flag": 2**31}, {"flag": -(2**31) - 1}, {"flag": True},
]


def _case_id(change: dict[str, object]) -> str:
    """A short id, the same in every process (pytest-xdist workers compare them): a memoryview's
    repr holds its address, a long value is cut."""
    def value(v: object) -> str:
        return "" if isinstance(v, memoryview) else repr(v)[:40]

    return ",".join(f"{k}={type(v).__name__}:{value(v)}" for k, v in change.items())


@pytest.mark.parametrize("change", BAD_OR_UNUSUAL, ids=_case_id)
def test_unusual_messages_are_left_to_python(change: dict[str, object],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    good = Message("TopicA", b"body", tags="t", keys=["k"], properties={"p": "v"})
    bad = Message("TopicA", b"body")
    for name, value in change.items():
        setattr(bad, name, value)
    msgs, ids = [good, bad], ["ID1", "ID2"]
    lib = native.lib
    assert lib.client_elements(msgs, ids, "", MAX_SIZE, 0x7FFF,  # type: ignore[attr-defined]
                               frozenset({"TAGS"})) is None
    fast = _encode(msgs, ids, "", lib, monkeypatch)
    assert fast == _encode(msgs, ids, "", None, monkeypatch)


def test_a_refused_message_raises_the_python_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "lib", native.lib)
    with pytest.raises(MQClientError, match="key 'a b' is empty or has blanks"):
        encode_messages([Message("T", b"x", keys=["a b"])], ["ID"], MAX_SIZE)
    with pytest.raises(MQClientError, match="the sharding key"):
        encode_messages([Message("T", b"x")], ["ID"], MAX_SIZE, "k\x01")
