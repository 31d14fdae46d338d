"""Topics: a paged, filterable list (50,000 topics), one topic's route, queues and consuming
groups, create / update / delete, and a test message."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from common.constants import PERM_READ, PERM_WRITE
from console.app import console_of
from console.backend import ClusterBackend, topic_kind
from mqclient.admin_types import AdminError

router = APIRouter()
PAGE_SIZE = 100
KINDS = ("all", "normal", "retry", "dlq", "system")


@dataclasses.dataclass(frozen=True)
class TopicPage:
    topics: list[str]
    total: int  # topics matching the filter
    page: int
    pages: int


async def topic_page(backend: ClusterBackend, q: str, kind: str, page: int,
                     size: int = PAGE_SIZE) -> TopicPage:
    names = await backend.topics()
    needle = q.strip().lower()
    if needle or kind != "all":
        names = [t for t in names if (not needle or needle in t.lower())
                 and (kind == "all" or topic_kind(t) == kind)]
    pages = max(1, -(-len(names) // size))
    page = min(max(page, 1), pages)
    return TopicPage(names[(page - 1) * size:page * size], len(names), page, pages)


async def topic_detail(backend: ClusterBackend, topic: str) -> dict[str, Any]:
    route = await backend.call(backend.admin.topic_route, topic)
    status: list[Any] = []
    status_error = None
    try:
        # Two or three RPCs a queue, one after the other; a hung broker fails the first.
        status = await backend.call(backend.admin.topic_status, topic, rpcs=4)
    except AdminError as e:
        status_error = str(e)
    groups_table = await backend.group_table()
    groups = sorted(g.group for g in groups_table.rows.values() if topic in g.topics)
    return {"topic": topic, "kind": topic_kind(topic), "route": route, "status": status,
            "status_error": status_error, "groups": groups}


@router.get("/topics", include_in_schema=False)
async def topics_page(request: Request, q: str = "", kind: str = "all", page: int = 1
                      ) -> Response:
    console = console_of(request)
    kind = kind if kind in KINDS else "all"
    result = await topic_page(console.backend_of(request), q, kind, page)
    return console.page(request, "topics.html", title="Topics", result=result, q=q,
                        kind=kind, kinds=KINDS)


@router.get("/api/topics", tags=["topics"])
async def topics_api(request: Request, q: str = "", kind: str = "all",
                     page: int = Query(1, ge=1), size: int = Query(PAGE_SIZE, ge=1, le=5000)
                     ) -> dict[str, Any]:
    """Topic names matching `q` (a substring) of `kind`, a page at a time."""
    result = await topic_page(console_of(request).backend_of(request), q,
                              kind if kind in KINDS else "all", page, size)
    return dataclasses.asdict(result)


@router.get("/topics/{topic}", include_in_schema=False)
async def topic_view(request: Request, topic: str, sent: str = "") -> Response:
    console = console_of(request)
    detail = await topic_detail(console.backend_of(request), topic)
    return console.page(request, "topic.html", title=f"Topic {topic}", d=detail, sent=sent,
                        perm_read=PERM_READ, perm_write=PERM_WRITE)


@router.get("/api/topics/{topic}", tags=["topics"])
async def topic_api(request: Request, topic: str) -> dict[str, Any]:
    """Route, per-queue min / max offsets and last store times, consuming groups."""
    d = await topic_detail(console_of(request).backend_of(request), topic)
    route = d["route"]
    return {"topic": topic, "kind": d["kind"],
            "queue_datas": [dataclasses.asdict(q) for q in route.queue_datas],
            "broker_groups": [{"broker_name": g.broker_name, "addrs": g.addrs}
                              for g in route.broker_groups],
            "queues": [dataclasses.asdict(s) for s in d["status"]],
            "queues_error": d["status_error"], "groups": d["groups"]}


@router.post("/topics", include_in_schema=False)
async def create_topic(request: Request, topic: str = Form(...), read_queues: int = Form(8),
                       write_queues: int = Form(8), readable: str = Form(""),
                       writable: str = Form(""), order: str = Form("")) -> Response:
    backend = console_of(request).backend_of(request)
    topic = topic.strip()
    if not topic:
        raise AdminError("a topic needs a name")
    perm = (PERM_READ if readable else 0) | (PERM_WRITE if writable else 0)
    await backend.call(backend.admin.create_topic, topic, read_queue_nums=read_queues,
                       write_queue_nums=write_queues, perm=perm, order=bool(order), rpcs=4)
    backend.topics_changed()
    return RedirectResponse(f"/topics/{quote(topic, safe='')}", status_code=303)


@router.post("/topics/{topic}/delete", include_in_schema=False)
async def delete_topic(request: Request, topic: str, confirm: str = Form("")) -> Response:
    console = console_of(request)
    if confirm != topic:
        return console.page(request, "error.html", 400, title="Not deleted",
                            message=f"Type the topic's name ({topic}) to delete it.")
    backend = console.backend_of(request)
    await backend.call(backend.admin.delete_topic, topic, rpcs=4)
    backend.topics_changed()
    return RedirectResponse("/topics", status_code=303)


@router.post("/topics/{topic}/send", include_in_schema=False)
async def send_test(request: Request, topic: str, body: str = Form(""), keys: str = Form(""),
                    tag: str = Form("")) -> Response:
    backend = console_of(request).backend_of(request)
    result = await backend.call(backend.admin.send_message, topic, body.encode(),
                                keys=keys.split(), tag=tag.strip(), rpcs=3)
    return RedirectResponse(f"/topics/{quote(topic, safe='')}?sent="
                            f"{quote(result.offset_msg_id)}", status_code=303)
