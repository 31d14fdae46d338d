"""mqproto Message <-> store Message / MessageExt (properties, hosts, message ids)."""

from __future__ import annotations

import calendar
import dataclasses
import ipaddress
import itertools
import os
import random
import struct
import time
from collections.abc import Callable

from broker.constants import (
    PROPERTY_SHARDING_KEY,
    PROPERTY_TRANSACTION_ID,
    RESERVED_PROPERTIES,
)
from broker.status import RequestError
from common import native
from common.codec import PROPERTIES_SEPARATOR, PROPERTY_SEPARATOR, MessageExt
from common.constants import TRANSACTION_TYPE_MASK, MessageProperty, SysFlag
from mqproto import common_pb2, messaging_pb2
from remoting.framing import decode_batch
from store.message import Message

_TRANSACTION_TYPES = {
    0: messaging_pb2.TRANSACTION_NOT_TYPE,
    int(SysFlag.TRANSACTION_PREPARED): messaging_pb2.TRANSACTION_PREPARED_TYPE,
    int(SysFlag.TRANSACTION_COMMIT): messaging_pb2.TRANSACTION_COMMIT_TYPE,
    int(SysFlag.TRANSACTION_ROLLBACK): messaging_pb2.TRANSACTION_ROLLBACK_TYPE,
}
# Properties that have their own SystemProperties field on the way out.
_MAPPED_PROPERTIES = frozenset({
    MessageProperty.TAGS, MessageProperty.KEYS, MessageProperty.UNIQ_KEY,
    MessageProperty.DELAY, MessageProperty.REAL_TOPIC, MessageProperty.REAL_QID,
    MessageProperty.PGROUP, PROPERTY_TRANSACTION_ID, PROPERTY_SHARDING_KEY,
})


def _illegal(remark: str) -> RequestError:
    return RequestError(common_pb2.MESSAGE_ILLEGAL, remark)


def format_host(host: tuple[str, int]) -> str:
    ip, port = host
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def parse_host(text: str) -> tuple[str, int] | None:
    """`ip:port` or `[v6]:port` -> (ip, port); None when it is not an IP address and port."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 0xFFFF:
        return None
    host = host.removeprefix("[").removesuffix("]")
    try:
        return str(ipaddress.ip_address(host)), int(port)
    except ValueError:
        return None


def peer_host(peer: str) -> tuple[str, int]:
    """gRPC's `context.peer()` (`ipv4:1.2.3.4:5`, `ipv6:[::1]:5`, ...) as (ip, port)."""
    _, _, address = peer.partition(":")
    return parse_host(address) or ("127.0.0.1", 0)


class UniqKeyFactory:
    """UNIQ_KEYs for messages sent without one, in the manner of MessageClientIDSetter:
    ip (4) + pid (2) + random (4) + ms since the start of the month (4) + counter (2)."""

    def __init__(self, ip: str) -> None:
        try:
            packed = ipaddress.ip_address(ip).packed[-4:]
        except ValueError:
            packed = bytes(4)
        self._prefix = packed + struct.pack(">HI", os.getpid() & 0xFFFF,
                                            random.getrandbits(32))
        self._counter = itertools.count()
        now = time.gmtime()
        self._month_start_ms = calendar.timegm(
            (now.tm_year, now.tm_mon, 1, 0, 0, 0, 0, 0, 0)) * 1000

    def __call__(self, now_ms: int) -> str:
        diff = (now_ms - self._month_start_ms) & 0xFFFFFFFF
        tail = struct.pack(">IH", diff, next(self._counter) & 0xFFFF)
        return (self._prefix + tail).hex().upper()


def _check_text(what: str, value: str) -> None:
    if PROPERTY_SEPARATOR in value or PROPERTIES_SEPARATOR in value:
        raise _illegal(f"{what} {value!r} contains a \\x01 or \\x02 separator")


# Client-given born hosts seen lately ("ip:port" -> (ip, port) or None); a broker sees few.
_BORN_HOSTS: dict[str, tuple[str, int] | None] = {}
_MAX_CACHED_HOSTS = 4096


def parse_born_host(text: str) -> tuple[str, int] | None:
    try:
        return _BORN_HOSTS[text]
    except KeyError:
        if len(_BORN_HOSTS) >= _MAX_CACHED_HOSTS:
            _BORN_HOSTS.clear()
        host = _BORN_HOSTS[text] = parse_host(text)
        return host


def message_from_proto(pb: messaging_pb2.Message, *, topic: str, queue_id: int,
                       born_host: tuple[str, int], now_ms: int,
                       uniq_key: str | Callable[[], str]) -> Message:
    """A store message from a send; RequestError(MESSAGE_ILLEGAL) when it cannot be one.

    `born_host` (the peer) is used when the client gave none; `uniq_key` (or what it makes,
    called only then) when the client set no message_id.
    """
    sp = pb.system_properties
    properties: dict[str, str] = {}
    if pb.user_properties:
        for name, value in pb.user_properties.items():
            if not name:
                raise _illegal("a user property has an empty name")
            if name in RESERVED_PROPERTIES:
                raise _illegal(f"user property {name} is a reserved system property")
            _check_text("user property", name)
            _check_text(f"user property {name} value", value)
            properties[name] = value
    tag = pb.tag
    if tag:
        _check_text("tag", tag)
        properties[MessageProperty.TAGS] = tag
    keys = pb.keys
    if keys:
        for key in keys:
            if not key or key != "".join(key.split()):
                raise _illegal(f"key {key!r} is empty or contains blanks")
            _check_text("key", key)
        properties[MessageProperty.KEYS] = MessageProperty.KEY_SEPARATOR.join(keys)
    message_id = sp.message_id
    if message_id:
        _check_text("message id", message_id)
    else:
        message_id = uniq_key if isinstance(uniq_key, str) else uniq_key()
    properties[MessageProperty.UNIQ_KEY] = message_id
    group = sp.message_group
    if group:
        _check_text("message group", group)
        properties[PROPERTY_SHARDING_KEY] = group
    if sp.delay_time_level > 0:  # the send path moves it to SCHEDULE_TOPIC_XXXX
        properties[MessageProperty.DELAY] = str(sp.delay_time_level)
    host_text = sp.born_host
    host = (parse_born_host(host_text) if host_text else None) or born_host
    reconsume = sp.reconsume_times
    return Message(
        topic=topic,
        body=pb.body,
        properties=properties,
        queue_id=queue_id,
        flag=pb.flag,
        born_timestamp=sp.born_timestamp or now_ms,
        born_host=host,
        reconsume_times=reconsume if reconsume > 0 else 0,
    )


def message_from_ext(ext: MessageExt, *, topic: str, queue_id: int,
                     properties: dict[str, str]) -> Message:
    """A stored message put again elsewhere (a delayed message due, a committed half
    message, a message sent back for retry): body, flags, born time and host kept."""
    return Message(
        topic=topic,
        body=ext.body,
        properties=properties,
        queue_id=queue_id,
        flag=ext.flag,
        # The host-kind bits are the store's to set for the new record.
        sys_flag=ext.sys_flag & ~int(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6),
        born_timestamp=ext.born_timestamp,
        born_host=ext.born_host,
        reconsume_times=ext.reconsume_times,
        prepared_transaction_offset=ext.prepared_transaction_offset,
    )


# Reserved properties a producer sets itself in a MessageBatch element (DELAY: the send path
# checks a batch has one level); any other reserved name (TRAN_MSG, REAL_TOPIC, ...) is
# refused: batches are not transactional (as in RocketMQ).
_BATCH_CLIENT_PROPERTIES = frozenset({
    MessageProperty.TAGS, MessageProperty.KEYS, MessageProperty.UNIQ_KEY,
    MessageProperty.DELAY, PROPERTY_SHARDING_KEY,
})


def _batch_properties(index: int, raw: bytes) -> dict[str, str]:
    """The `name\\x01value\\x02` pairs of one MessageBatch element, checked."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise _illegal(f"message {index} of the batch: its properties are not UTF-8") from None
    properties: dict[str, str] = {}
    if not text:
        return properties
    if not text.endswith(PROPERTIES_SEPARATOR):
        raise _illegal(f"message {index} of the batch: its properties do not end with \\x02")
    for pair in text[:-1].split(PROPERTIES_SEPARATOR):
        name, sep, value = pair.partition(PROPERTY_SEPARATOR)
        if not sep or not name or PROPERTY_SEPARATOR in value:
            raise _illegal(f"message {index} of the batch: property {pair!r} is not "
                           "name\\x01value")
        if name in RESERVED_PROPERTIES and name not in _BATCH_CLIENT_PROPERTIES:
            raise _illegal(f"message {index} of the batch: property {name} is reserved "
                           "(batches are not transactional)")
        properties[name] = value
    return properties


def messages_from_batch(elements: list[tuple[int, bytes, bytes]], *, topic: str,
                        queue_id: int, born_host: tuple[str, int], born_timestamp: int,
                        uniq_key: Callable[[], str]) -> list[Message]:
    """Store messages from decoded MessageBatch elements (flag, body, properties);
    RequestError(MESSAGE_ILLEGAL) when one cannot be stored. `uniq_key()` gives the
    UNIQ_KEY of a message sent without one."""
    msgs = []
    for i, (flag, body, raw) in enumerate(elements):
        properties = _batch_properties(i, raw) if raw else {}
        if not properties.get(MessageProperty.UNIQ_KEY):
            properties[MessageProperty.UNIQ_KEY] = uniq_key()
        msgs.append(Message(topic=topic, body=body, properties=properties, queue_id=queue_id,
                            flag=flag, born_timestamp=born_timestamp, born_host=born_host))
    return msgs


def _fits_native_batch(cls: type) -> bool:
    """Whether common/_native.c decode_batch_messages may build `cls` as it does, positionally:
    cls(topic, body, properties, queue_id, flag, 0, born_timestamp, born_host)."""
    fields = dataclasses.fields(cls)
    return (tuple(f.name for f in fields[:8]) == (
        "topic", "body", "properties", "queue_id", "flag", "sys_flag", "born_timestamp",
        "born_host") and fields[5].default == 0)


_NATIVE_BATCH = _fits_native_batch(Message)


def decode_messages(data: bytes, *, topic: str, queue_id: int, born_host: tuple[str, int],
                    born_timestamp: int, uniq_key: Callable[[], str]) -> list[Message]:
    """Store messages from a batch in RocketMQ's MessageBatch encoding, as
    `messages_from_batch(decode_batch(data), ...)`; RequestError(MESSAGE_ILLEGAL) when it is
    not one or a message cannot be stored. The store's C twin (common/_native.c
    decode_batch_messages) does the common case and hands anything unusual back to Python."""
    lib = native.lib
    if lib is not None and _NATIVE_BATCH:
        msgs = lib.decode_batch_messages(data, topic, queue_id, born_host, born_timestamp,
                                         Message, RESERVED_PROPERTIES,
                                         _BATCH_CLIENT_PROPERTIES, uniq_key)
        if msgs is not None:
            return msgs
    try:
        elements = decode_batch(data)
    except ValueError as e:
        raise _illegal(str(e)) from None
    return messages_from_batch(elements, topic=topic, queue_id=queue_id, born_host=born_host,
                               born_timestamp=born_timestamp, uniq_key=uniq_key)


def message_to_proto(ext: MessageExt) -> messaging_pb2.Message:
    props = ext.properties
    delay = props.get(MessageProperty.DELAY, "")
    real_qid = props.get(MessageProperty.REAL_QID, "")
    sp = messaging_pb2.SystemProperties(
        message_id=props.get(MessageProperty.UNIQ_KEY, ""),
        offset_msg_id=ext.msg_id,
        born_timestamp=ext.born_timestamp,
        born_host=format_host(ext.born_host),
        store_timestamp=ext.store_timestamp,
        store_host=format_host(ext.store_host),
        queue_id=ext.queue_id,
        queue_offset=ext.queue_offset,
        commit_log_offset=ext.commit_log_offset,
        store_size=ext.store_size,
        body_crc=ext.body_crc,
        sys_flag=ext.sys_flag,
        reconsume_times=ext.reconsume_times,
        delay_time_level=int(delay) if delay.isdigit() else 0,
        message_group=props.get(PROPERTY_SHARDING_KEY, ""),
        transaction_type=_TRANSACTION_TYPES[ext.sys_flag & TRANSACTION_TYPE_MASK],
        producer_group=props.get(MessageProperty.PGROUP, ""),
        transaction_id=props.get(PROPERTY_TRANSACTION_ID, ""),
        prepared_transaction_offset=ext.prepared_transaction_offset,
        real_topic=props.get(MessageProperty.REAL_TOPIC, ""),
        real_queue_id=int(real_qid) if real_qid.isdigit() else 0,
        reserved_properties={k: v for k, v in props.items()
                             if k in RESERVED_PROPERTIES and k not in _MAPPED_PROPERTIES},
    )
    return messaging_pb2.Message(
        topic=ext.topic,
        flag=ext.flag,
        body=ext.body,
        tag=props.get(MessageProperty.TAGS, ""),
        keys=ext.keys,
        user_properties={k: v for k, v in props.items() if k not in RESERVED_PROPERTIES},
        system_properties=sp,
    )
