"""A group's dead-letter queue (%DLQ%{group}): how many, list (bounded), export as JSON,
resend to the group. Brokers create DLQ topics write-only (RocketMQ 4.x's PERM_WRITE), so
listing one first makes it readable on its brokers, after the user asks for it."""

from __future__ import annotations

import base64
import dataclasses
import time
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from common.constants import PERM_READ, PERM_WRITE
from console import messages
from console.app import console_of
from console.backend import DLQ_PREFIX, ClusterBackend
from mqclient.admin_types import AdminError, StoredMessage

router = APIRouter()
DLQ_LIST_LIMIT = 500  # messages read for the list and the export


def dlq_state(backend: ClusterBackend, group: str) -> dict[str, Any]:
    """The DLQ topic's route and queues, whether it is readable, and (when it is) the first
    DLQ_LIST_LIMIT dead letters by store time."""
    topic = DLQ_PREFIX + group
    try:
        route = backend.admin.topic_route(topic)
    except AdminError:
        return {"topic": topic, "exists": False}
    readable = all(q.perm & PERM_READ for q in route.queue_datas)
    status = backend.admin.topic_status(topic)
    found = (messages.by_time(backend, topic, 0, 2**62, DLQ_LIST_LIMIT) if readable
             else None)
    return {"topic": topic, "exists": True, "readable": readable, "status": status,
            "total": sum(s.max_offset - s.min_offset for s in status), "found": found}


def make_readable(backend: ClusterBackend, topic: str) -> None:
    route = backend.admin.topic_route(topic)
    for q in route.queue_datas:
        master = route.group(q.broker_name).master_addr
        if master is None:
            raise AdminError(f"broker {q.broker_name} has no live master: {topic} unchanged "
                             "there")
        backend.admin.create_topic(topic, broker_addr=master,
                                   read_queue_nums=q.read_queue_nums,
                                   write_queue_nums=q.write_queue_nums,
                                   perm=q.perm | PERM_READ | PERM_WRITE)


def export_row(m: StoredMessage) -> dict[str, Any]:
    row = dataclasses.asdict(m)
    row["body_base64"] = base64.b64encode(m.body).decode()
    row.pop("body")
    return row


@router.get("/groups/{group}/dlq", include_in_schema=False)
async def dlq_page(request: Request, group: str, resent: int = -1) -> Response:
    console = console_of(request)
    backend = console.backend_of(request)
    state = await backend.call(dlq_state, backend, group, rpcs=8)
    return console.page(request, "dlq.html", title=f"Dead letters of {group}", group=group,
                        s=state, resent=resent, limit=DLQ_LIST_LIMIT)


@router.post("/groups/{group}/dlq/readable", include_in_schema=False)
async def dlq_readable(request: Request, group: str) -> Response:
    backend = console_of(request).backend_of(request)
    await backend.call(make_readable, backend, DLQ_PREFIX + group, rpcs=6)
    return RedirectResponse(f"/groups/{quote(group, safe='')}/dlq", status_code=303)


@router.get("/groups/{group}/dlq/export", tags=["groups"])
async def dlq_export(request: Request, group: str) -> Response:
    """The group's dead letters (the first DLQ_LIST_LIMIT by store time) as a JSON file,
    bodies in base64."""
    backend = console_of(request).backend_of(request)
    state = await backend.call(dlq_state, backend, group, rpcs=8)
    if not state["exists"] or not state["readable"]:
        raise AdminError(f"{state['topic']} is not readable (or not there): list it first")
    rows = [export_row(m) for m in state["found"].messages]
    name = f"dlq-{group}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    return JSONResponse(rows, headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.post("/groups/{group}/dlq/resend", include_in_schema=False)
async def dlq_resend(request: Request, group: str) -> Response:
    form = await request.form()
    ids = [str(i) for i in form.getlist("id")]
    if not ids:
        raise AdminError("no dead letter chosen to resend")
    backend = console_of(request).backend_of(request)
    for offset_msg_id in ids:
        await backend.call(messages.resend_to_group, backend, offset_msg_id, group, rpcs=4)
    return RedirectResponse(f"/groups/{quote(group, safe='')}/dlq?resent={len(ids)}",
                            status_code=303)
