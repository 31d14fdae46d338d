"""Failover runs (mqchaos results under --chaos DIR: result.json, summary.txt, chart.png) and
the lag analytics' statuses (--analytics DIR)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, Response

from console.app import console_of
from console.pages_groups import analytics_of

router = APIRouter()
RESULT_FILE = "result.json"  # chaos.constants: the console reads the files, imports no chaos
SUMMARY_FILE = "summary.txt"
CHART_FILE = "chart.png"
MAX_RUNS = 500


def find_runs(root: Path) -> list[dict[str, Any]]:
    """Every directory under `root` (itself included) holding a result.json, newest first."""
    runs = []
    for result in sorted(root.rglob(RESULT_FILE), key=lambda p: p.stat().st_mtime,
                         reverse=True)[:MAX_RUNS]:
        run_dir = result.parent
        try:
            data = json.loads(result.read_text())
        except (OSError, ValueError) as e:
            runs.append({"id": _run_id(root, run_dir), "error": f"unreadable: {e}"})
            continue
        run = data.get("run", {})
        verdict = data.get("scenario") or {}
        queue = data.get("queue", {})
        windows = data.get("recovery", {}).get("windows", [])
        runs.append({
            "id": _run_id(root, run_dir), "scenario": run.get("scenario", "?"),
            "target": run.get("target", "?"), "passed": verdict.get("passed"),
            "description": verdict.get("description", ""),
            "lost": queue.get("lost_count"), "duplicated": queue.get("duplicate_count"),
            "out_of_order": data.get("order", {}).get("violation_count"),
            "faults": [{"fault": w.get("fault"), "node": w.get("node"),
                        "start": w.get("start"), "duration_s": w.get("duration_s"),
                        "healed": w.get("healed"),
                        "rto_s": (w.get("consume") or {}).get("next_consume_s")}
                       for w in windows],
            "has_chart": (run_dir / CHART_FILE).is_file(), "error": None})
    return runs


def _run_id(root: Path, run_dir: Path) -> str:
    rel = run_dir.relative_to(root).as_posix()
    return rel if rel != "." else "_"


def _run_dir(root: Path, run_id: str) -> Path:
    run_dir = (root if run_id == "_" else root / run_id).resolve()
    if not run_dir.is_relative_to(root.resolve()) or not (run_dir / RESULT_FILE).is_file():
        raise HTTPException(404, f"no failover run {run_id}")
    return run_dir


def _chaos_root(request: Request) -> Path:
    root = console_of(request).config.chaos_dir
    if root is None:
        raise HTTPException(404, "no failover runs: start mqconsole with --chaos DIR")
    return root


@router.get("/failover", include_in_schema=False)
async def runs_page(request: Request) -> Response:
    root = _chaos_root(request)
    return console_of(request).page(request, "runs.html", title="Failover runs",
                                    runs=find_runs(root), root=root)


@router.get("/api/failover", tags=["failover"])
async def runs_api(request: Request) -> list[dict[str, Any]]:
    """mqchaos runs: scenario, verdict, lost / duplicated / out of order, faults with the
    time to the next consume after each (RTO)."""
    return find_runs(_chaos_root(request))


@router.get("/failover/{run_id:path}/chart.png", include_in_schema=False)
async def run_chart(request: Request, run_id: str) -> Response:
    chart = _run_dir(_chaos_root(request), run_id) / CHART_FILE
    if not chart.is_file():
        raise HTTPException(404, "this run has no chart")
    return FileResponse(chart, media_type="image/png")


@router.get("/failover/{run_id:path}", include_in_schema=False)
async def run_page(request: Request, run_id: str) -> Response:
    root = _chaos_root(request)
    run_dir = _run_dir(root, run_id)
    summary = run_dir / SUMMARY_FILE
    run = next((r for r in find_runs(run_dir) if r["id"] == "_"), None)
    return console_of(request).page(
        request, "run.html", title=f"Failover run {run_id}", run_id=run_id, run=run,
        summary=summary.read_text() if summary.is_file() else None)


@router.get("/lag", include_in_schema=False)
async def lag_page(request: Request) -> Response:
    console = console_of(request)
    tables = analytics_of(console)
    if tables is None:
        raise HTTPException(404, "no lag analytics: start mqconsole with --analytics DIR")
    rows = await console.backend.call(tables.group_statuses, rpcs=5)
    return console.page(request, "lag.html", title="Lag statuses", rows=rows,
                        directory=tables.directory)


@router.get("/api/lag", tags=["lag"])
async def lag_api(request: Request) -> list[dict[str, Any]]:
    """group_status of the lag analytics: per cluster, group and topic kind, the worst
    status of its queues (OK / WARN / STALL / STOP / ERR / REWIND) and its lag."""
    tables = analytics_of(console_of(request))
    if tables is None:
        raise HTTPException(404, "no lag analytics: start mqconsole with --analytics DIR")
    rows = tables.group_statuses()
    for r in rows:
        r["snapshot_time"] = str(r["snapshot_time"])
    return rows
