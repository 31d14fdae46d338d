"""Messages: find by id, by key, by topic and time range (bounded), one message's body and
properties, and resending it to a consumer group."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import Response

from console import messages
from console.app import console_of
from mqclient.admin_types import AdminError, StoredMessage

router = APIRouter()
MODES = ("id", "key", "time")


def parse_time(text: str, what: str) -> int:
    """Epoch ms, or YYYY-MM-DDTHH:MM[:SS] in the console's local time."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise AdminError(f"{what} {text!r}: give YYYY-MM-DDTHH:MM[:SS] or epoch ms") from None


def message_json(m: StoredMessage) -> dict[str, Any]:
    out = dataclasses.asdict(m)
    out["body"] = messages.body_views(m.body)
    return out


async def run_query(request: Request, mode: str, msg_id: str, topic: str, key: str,
                    begin: str, end: str, scan_limit: int) -> messages.Found | None:
    backend = console_of(request).backend_of(request)
    if mode == "id" and msg_id.strip():
        return await backend.call(messages.by_id, backend, msg_id, topic.strip(), rpcs=4)
    if mode == "key" and (topic.strip() or key.strip()):
        begin_ms = parse_time(begin, "from") if begin.strip() else 0
        end_ms = parse_time(end, "to") if end.strip() else 0
        return await backend.call(messages.by_key, backend, topic.strip(), key.strip(),
                                  begin_ms, end_ms, rpcs=4)
    if mode == "time" and topic.strip():
        begin_ms = parse_time(begin, "from") if begin.strip() else 0
        end_ms = parse_time(end, "to") if end.strip() else 2**62
        # Bounded by the scan limit: a slow or hung broker costs its budget per queue asked.
        return await backend.call(messages.by_time, backend, topic.strip(), begin_ms, end_ms,
                                  scan_limit, rpcs=8)
    return None


@router.get("/messages", include_in_schema=False)
async def messages_page(request: Request, mode: str = "id", msg_id: str = "", topic: str = "",
                        key: str = "", begin: str = "", end: str = "",
                        scan_limit: int = messages.DEFAULT_SCAN_LIMIT, page: int = 1
                        ) -> Response:
    console = console_of(request)
    mode = mode if mode in MODES else "id"
    found = await run_query(request, mode, msg_id, topic, key, begin, end, scan_limit)
    shown: list[StoredMessage] = []
    pages = 1
    if found is not None:
        pages = max(1, -(-len(found.messages) // messages.PAGE_SIZE))
        page = min(max(page, 1), pages)
        shown = found.messages[(page - 1) * messages.PAGE_SIZE:page * messages.PAGE_SIZE]
    return console.page(request, "messages.html", title="Messages", mode=mode, msg_id=msg_id,
                        topic=topic, key=key, begin=begin, end=end, scan_limit=scan_limit,
                        found=found, shown=shown, page=page, pages=pages,
                        max_scan=messages.MAX_SCAN_LIMIT)


@router.get("/api/messages", tags=["messages"])
async def messages_api(request: Request, mode: str = "id", msg_id: str = "", topic: str = "",
                       key: str = "", begin: str = "", end: str = "",
                       scan_limit: int = Query(messages.DEFAULT_SCAN_LIMIT, ge=1,
                                               le=messages.MAX_SCAN_LIMIT)) -> dict[str, Any]:
    """`mode` id (`msg_id`: an offsetMsgId, or a message id with its `topic`), key (`topic`,
    `key`) or time (`topic`, `begin`, `end`: epoch ms or ISO local time). Sorted by store
    time; a time query reads at most `scan_limit` messages and says when it stopped there."""
    found = await run_query(request, mode, msg_id, topic, key, begin, end, scan_limit)
    if found is None:
        raise AdminError("nothing to look for: give msg_id, or topic and key, or topic")
    return {"messages": [message_json(m) for m in found.messages], "scanned": found.scanned,
            "limit_reached": found.limit_reached, "problems": found.problems}


@router.get("/messages/view", include_in_schema=False)
async def message_view(request: Request, id: str, resent: str = "") -> Response:
    console = console_of(request)
    backend = console.backend_of(request)
    m = await backend.call(backend.admin.query_msg_by_id, id, rpcs=3)
    table = await backend.group_table()
    groups = sorted(g.group for g in table.rows.values() if m.topic in g.topics)
    return console.page(request, "message.html", title=f"Message {m.msg_id or id}", m=m,
                        body=messages.body_views(m.body), groups=groups, resent=resent)


@router.post("/messages/resend", include_in_schema=False)
async def resend(request: Request, id: str = Form(...), group: str = Form(...)) -> Response:
    console = console_of(request)
    backend = console.backend_of(request)
    result = await backend.call(messages.resend_to_group, backend, id, group, rpcs=4)
    return console.page(request, "resent.html", title="Resent", id=id, group=group,
                        result=result)
