"""Message queries, bounded: by id, by key, by topic and store-time range. A time-range query
reads at most `scan_limit` messages over all queues (it says so when it stopped there), and
answers are sorted by store time; "nothing found" is an answer, not an error."""

from __future__ import annotations

import dataclasses
import json
import re

from console.backend import ClusterBackend
from mqclient.admin import PULL_BATCH
from mqclient.admin_types import AdminError, StoredMessage

DEFAULT_SCAN_LIMIT = 2_000
MAX_SCAN_LIMIT = 20_000
PAGE_SIZE = 50
OFFSET_MSG_ID = re.compile(r"^(?:[0-9A-Fa-f]{32}|[0-9A-Fa-f]{56})$")
DEFAULT_MAX_RECONSUME_TIMES = 16  # a consumer's default (RocketMQ's maxReconsumeTimes)
RESEND_EXTRA_RETRIES = 3


@dataclasses.dataclass(frozen=True)
class Found:
    messages: list[StoredMessage]
    scanned: int  # messages read from the brokers
    limit_reached: bool
    problems: list[str]  # queues or brokers that could not be read


def is_offset_msg_id(text: str) -> bool:
    return bool(OFFSET_MSG_ID.match(text))


def by_id(backend: ClusterBackend, msg_id: str, topic: str = "") -> Found:
    """An offsetMsgId names its broker and commitlog offset (no topic needed); a message id
    (UNIQ_KEY) is found in the topic's index, so it needs the topic."""
    msg_id = msg_id.strip()
    if is_offset_msg_id(msg_id):
        try:
            return Found([backend.admin.query_msg_by_id(msg_id)], 1, False, [])
        except AdminError as e:
            if "no message with offsetMsgId" in str(e):
                return Found([], 1, False, [])
            if not topic:
                raise
    if not topic:
        raise AdminError(f"{msg_id!r} is a message id (UNIQ_KEY): give its topic too (an "
                         "offsetMsgId, 32 or 56 hex digits, needs none)")
    found = backend.admin.query_msg_by_key(topic, msg_id)
    return Found([m for m in found if m.msg_id == msg_id], len(found), False, [])


def by_key(backend: ClusterBackend, topic: str, key: str, begin_ms: int = 0,
           end_ms: int = 0) -> Found:
    if not topic or not key:
        raise AdminError("a query by key needs the topic and the key")
    found = backend.admin.query_msg_by_key(topic, key, begin_ms=begin_ms, end_ms=end_ms)
    return Found(found, len(found), False, [])


def by_time(backend: ClusterBackend, topic: str, begin_ms: int, end_ms: int,
            scan_limit: int = DEFAULT_SCAN_LIMIT) -> Found:
    """Messages of the topic stored in [begin_ms, end_ms]: from each queue's offset at
    begin_ms, pulling until end_ms, at most scan_limit messages read in all."""
    if not topic:
        raise AdminError("a query by time needs the topic")
    if end_ms < begin_ms:
        raise AdminError("the end of the time range is before its beginning")
    scan_limit = max(1, min(scan_limit, MAX_SCAN_LIMIT))
    admin = backend.admin
    route = admin.topic_route(topic)
    queues = []
    for q in sorted(route.queue_datas, key=lambda q: q.broker_name):
        group = route.group(q.broker_name)
        if group.addrs:
            queues.extend((group, i) for i in range(q.read_queue_nums))
    out: list[StoredMessage] = []
    problems: list[str] = []
    scanned = 0
    per_queue = max(1, scan_limit // max(1, len(queues)))
    failed: set[str] = set()  # a broker that did not answer costs one budget, not one a queue
    for group, queue_id in queues:
        addr = group.read_addr
        budget = min(per_queue, scan_limit - scanned)
        if budget <= 0:
            break
        if addr in failed:
            continue
        try:
            offset = admin.offset_by_time(addr, topic, queue_id, begin_ms)
            read = 0
            while read < budget:
                msgs, next_offset = admin.pull_at(addr, topic, queue_id, offset,
                                                  min(PULL_BATCH, budget - read),
                                                  group.broker_name)
                read += len(msgs)
                out.extend(m for m in msgs if begin_ms <= m.store_timestamp <= end_ms)
                if not msgs or next_offset == offset or msgs[-1].store_timestamp > end_ms:
                    break
                offset = next_offset
            scanned += read
        except AdminError as e:
            problems.append(str(e))
            failed.add(addr)
    out.sort(key=lambda m: (m.store_timestamp, m.broker_name, m.queue_id, m.queue_offset))
    return Found(out, scanned, scanned >= scan_limit, problems)


def body_views(body: bytes) -> dict[str, str | None]:
    """The body as text (None when not UTF-8), as indented JSON (None when not JSON), as hex."""
    try:
        text: str | None = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    pretty = None
    if text is not None:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    hex_lines = "\n".join(f"{i:08x}  {body[i:i + 16].hex(' ')}"
                          for i in range(0, min(len(body), 64 * 1024), 16))
    return {"text": text, "json": pretty, "hex": hex_lines}


def resend_to_group(backend: ClusterBackend, offset_msg_id: str, group: str) -> str:
    """The stored message sent again to one group only, as a redelivery: to its retry topic
    (%RETRY%{group}) a second later, under its original topic; a dead letter gets the
    retries it had plus RESEND_EXTRA_RETRIES. Returns the master that took it."""
    group = group.strip()
    if not group:
        raise AdminError("resend to which consumer group?")
    m = backend.admin.query_msg_by_id(offset_msg_id)
    return backend.admin.send_back(offset_msg_id, group, delay_level=1,
                                   max_reconsume_times=max(DEFAULT_MAX_RECONSUME_TIMES,
                                                           m.reconsume_times
                                                           + RESEND_EXTRA_RETRIES))
