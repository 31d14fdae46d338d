"""Consumer groups: the list sortable by lag, one group's queues (broker offset, committed
offset, message lag, time lag), members, statuses and lag history from the analytics
tables, and offset resets (to a time, or skipping the backlog) with a confirmation step."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import Response

from console.analytics import AnalyticsTables, history_svg
from console.app import Console, console_of
from console.backend import GroupDetail, GroupRow, client_address, client_kind
from mqclient.admin import RESET_EARLIEST, RESET_LATEST
from mqclient.admin_types import AdminError

router = APIRouter()
PAGE_SIZE = 100
SORTS = {"lag": lambda g: g.message_lag, "time_lag": lambda g: g.time_lag_s,
         "name": lambda g: g.group, "tps": lambda g: g.consume_tps,
         "consumers": lambda g: g.online_consumers}


def analytics_of(console: Console) -> AnalyticsTables | None:
    directory = console.config.analytics_dir
    if directory is None:
        return None
    tables: AnalyticsTables | None = getattr(console, "_analytics", None)
    if tables is None:
        tables = AnalyticsTables(directory)
        console._analytics = tables  # type: ignore[attr-defined]
    return tables


def sorted_groups(rows: list[GroupRow], q: str, sort: str, order: str) -> list[GroupRow]:
    needle = q.strip().lower()
    picked = [g for g in rows if not needle or needle in g.group.lower()]
    key = SORTS.get(sort, SORTS["lag"])
    return sorted(picked, key=key, reverse=order != "asc")


def group_row_json(g: GroupRow) -> dict[str, Any]:
    return {"group": g.group, "message_lag": g.message_lag, "time_lag_s": g.time_lag_s,
            "consume_tps": g.consume_tps, "online_consumers": g.online_consumers,
            "topics": sorted(g.topics), "brokers": sorted(g.brokers)}


@router.get("/groups", include_in_schema=False)
async def groups_page(request: Request, q: str = "", sort: str = "lag", order: str = "desc",
                      page: int = 1) -> Response:
    console = console_of(request)
    table = await console.backend_of(request).group_table()
    groups = sorted_groups(list(table.rows.values()), q, sort, order)
    pages = max(1, -(-len(groups) // PAGE_SIZE))
    page = min(max(page, 1), pages)
    statuses = {}
    tables = analytics_of(console)
    if tables is not None:
        statuses = {r["group"]: r["status"] for r in tables.group_statuses()
                    if r["topic_kind"] == "normal"}
    return console.page(request, "groups.html", title="Consumer groups",
                        groups=groups[(page - 1) * PAGE_SIZE:page * PAGE_SIZE],
                        total=len(groups), page=page, pages=pages, q=q, sort=sort,
                        order=order, unreachable=table.unreachable, statuses=statuses)


@router.get("/api/groups", tags=["groups"])
async def groups_api(request: Request, q: str = "", sort: str = "lag", order: str = "desc",
                     page: int = Query(1, ge=1), size: int = Query(PAGE_SIZE, ge=1, le=5000)
                     ) -> dict[str, Any]:
    """Every consumer group with its total message lag, oldest unconsumed message's age,
    consume TPS and online consumers; `sort` is lag, time_lag, name, tps or consumers."""
    table = await console_of(request).backend_of(request).group_table()
    groups = sorted_groups(list(table.rows.values()), q, sort, order)
    return {"total": len(groups), "page": page,
            "groups": [group_row_json(g) for g in groups[(page - 1) * size:page * size]],
            "unreachable": [dataclasses.asdict(u) for u in table.unreachable]}


def detail_json(d: GroupDetail) -> dict[str, Any]:
    return {"group": d.group, "message_lag": d.message_lag, "time_lag_s": d.time_lag_s,
            "consume_tps": d.consume_tps, "online_consumers": d.online_consumers,
            "queues": [dataclasses.asdict(q) for q in d.queues],
            "members": [{"client_id": c, "kind": client_kind(c), "address": client_address(c),
                         "brokers": b} for c, b in sorted(d.members.items())],
            "unreachable": [dataclasses.asdict(u) for u in d.unreachable]}


@router.get("/groups/{group}", include_in_schema=False)
async def group_view(request: Request, group: str) -> Response:
    console = console_of(request)
    detail = await console.backend_of(request).group_detail(group)
    tables = analytics_of(console)
    status = tables.status_of(group) if tables is not None else []
    history = tables.history_of(group) if tables is not None else []
    chart = None
    if history:
        try:
            chart = await console.backend.call(history_svg, history,
                                               f"{group}: lag history", rpcs=5)
            chart = chart[chart.find("<svg"):]  # inline: no XML prolog
        except ImportError:  # matplotlib (the console extra) is not installed
            chart = None
    topics = sorted({q.topic for q in detail.queues if not q.topic.startswith("%RETRY%")})
    return console.page(request, "group.html", title=f"Group {group}", d=detail,
                        members=detail_json(detail)["members"], status=status, chart=chart,
                        history=history, topics=topics)


@router.get("/api/groups/{group}", tags=["groups"])
async def group_api(request: Request, group: str) -> dict[str, Any]:
    """Per queue: broker offset, committed offset (-1: never), message lag (`diff`) and time
    lag (`lag_seconds`: the age of the first unconsumed message); members by client id."""
    return detail_json(await console_of(request).backend_of(request).group_detail(group))


def reset_target(mode: str, when: str) -> int | str:
    if mode == "skip":
        return RESET_LATEST
    if mode == "earliest":
        return RESET_EARLIEST
    text = when.strip()
    if text.isdigit():
        return int(text)
    try:
        t = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise AdminError(f"reset to {text!r}: give a time as YYYY-MM-DDTHH:MM[:SS] "
                         "(the console's local time) or epoch milliseconds") from None
    return int(t.timestamp() * 1000)


@router.post("/groups/{group}/reset", include_in_schema=False)
async def reset(request: Request, group: str, topic: str = Form(...), mode: str = Form("time"),
                when: str = Form(""), force: str = Form(""), confirm: str = Form("")
                ) -> Response:
    console = console_of(request)
    target = reset_target(mode, when)
    backend = console.backend_of(request)
    if confirm != "yes":
        detail = await backend.group_detail(group)
        queues = [q for q in detail.queues if q.topic == topic]
        return console.page(request, "reset_confirm.html", title=f"Reset {group}?",
                            group=group, topic=topic, mode=mode, when=when, force=force,
                            target=target, queues=queues)
    done = await backend.call(backend.admin.reset_offset_by_time, group, topic, target,
                              force=bool(force), rpcs=6)
    backend.groups_changed()
    return console.page(request, "reset_done.html", title=f"Reset {group}", group=group,
                        topic=topic, done=done)
