"""The cluster view (name servers, broker groups, HA links) and the sign-in of ACL clusters."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from console.app import console_of
from console.backend import BrokerRow, ClusterBackend, Overview
from mqclient.admin_types import AdminError, BrokerUnreachable

router = APIRouter()


def broker_json(b: BrokerRow) -> dict[str, Any]:
    out: dict[str, Any] = {"cluster": b.cluster, "broker_name": b.broker_name,
                           "broker_id": b.broker_id, "addr": b.addr, "listed": b.listed,
                           "reachable": b.reachable, "error": b.error}
    rt = b.runtime
    if rt is not None:
        out.update(role=rt.broker_role, version=rt.table.get("brokerVersion"),
                   disk_used_ratio=_float(rt.table.get("commitLogDiskRatio")),
                   put_tps=rt.put_tps, get_tps=rt.get_total_tps,
                   commit_log_max_offset=rt.commit_log_max_offset,
                   dispatch_behind_bytes=rt.dispatch_behind_bytes,
                   slaves=[dataclasses.asdict(s) for s in rt.slaves],
                   master_link={k: rt.table.get(k) for k in ("haMasterAddr",
                                                             "haMasterConnected",
                                                             "haAckOffset")
                                if k in rt.table} or None)
    return out


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def overview_json(o: Overview) -> dict[str, Any]:
    return {"namesrvs": [dataclasses.asdict(n) for n in o.namesrvs], "error": o.error,
            "brokers": [broker_json(b) for b in o.brokers],
            "unreachable": [b.addr for b in o.unreachable],
            "controller": None}


@router.get("/", include_in_schema=False)
async def home() -> Response:
    return RedirectResponse("/cluster", status_code=303)


@router.get("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/cluster", include_in_schema=False)
async def cluster_page(request: Request) -> Response:
    console = console_of(request)
    backend = console.backend_of(request)
    overview, transactions = await asyncio.gather(backend.overview(),  # one budget for both
                                                  pending_transactions(backend))
    groups: dict[tuple[str, str], list[BrokerRow]] = {}
    for b in overview.brokers:
        groups.setdefault((b.cluster, b.broker_name), []).append(b)
    return console.page(request, "cluster.html", title="Cluster", overview=overview,
                        transactions=transactions,
                        groups=groups, disk=lambda b: _float(b.value("commitLogDiskRatio",
                                                                     "")))


async def pending_transactions(backend: ClusterBackend) -> dict[str, Any]:
    """Half messages waiting for their outcome, per master and producer group."""
    try:
        answers = await backend.call(backend.admin.pending_transactions_of_cluster)
    except AdminError as e:
        return {"rows": [], "problems": [str(e)]}
    rows = [row for a in answers if isinstance(a, list) for row in a if row.pending]
    problems = [f"{a.broker_name} ({a.broker_addr}): {a.error}" for a in answers
                if isinstance(a, BrokerUnreachable)]
    return {"rows": rows, "problems": problems}


@router.get("/api/cluster", tags=["cluster"])
async def cluster_api(request: Request) -> dict[str, Any]:
    """Name servers, every broker (listed now or remembered) with its runtime figures or
    why it is unreachable; `controller` is null until controller mode exists."""
    return overview_json(await console_of(request).backend_of(request).overview())


@router.get("/login", include_in_schema=False)
async def login_page(request: Request, next: str = "/cluster") -> Response:
    return console_of(request).page(request, "login.html", title="Sign in", next=_local(next),
                                    problem=None)


@router.post("/login", include_in_schema=False)
async def login(request: Request, access_key: str = Form(...), secret_key: str = Form(...),
                next: str = Form("/cluster")) -> Response:
    console = console_of(request)
    session = request.state.session
    backend = ClusterBackend(console.config.namesrv, budget_s=console.config.budget_s,
                             access_key=access_key.strip(), secret_key=secret_key,
                             tls_ca=console.config.tls_ca)
    problem = await _check_account(backend)
    if problem is not None:
        backend.close()
        return console.page(request, "login.html", 401, title="Sign in", next=_local(next),
                            problem=problem)
    if session.backend is not None:
        session.backend.close()
    session.backend, session.access_key = backend, access_key.strip()
    return RedirectResponse(_local(next), status_code=303)


@router.post("/logout", include_in_schema=False)
async def logout(request: Request) -> Response:
    console_of(request).sessions.drop(request.state.session)
    return RedirectResponse("/login", status_code=303)


async def _check_account(backend: ClusterBackend) -> str | None:
    """None when the brokers take the account (a refusal of one RPC for lack of rights is
    still an account); else what is wrong, without echoing the secret."""
    try:
        overview = await backend.overview()
    except AdminError as e:
        return str(e)
    errors = [b.error or "" for b in overview.brokers if not b.reachable]
    if any("UNAUTHENTICATED" in e for e in errors):
        return "the brokers do not know this access key and secret"
    if overview.error is not None:
        return overview.error
    return None


def _local(target: str) -> str:
    """Only a path on this console (never an open redirect)."""
    return target if target.startswith("/") and not target.startswith("//") else "/cluster"
