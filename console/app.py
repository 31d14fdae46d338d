"""The console's web application: FastAPI with Jinja2 pages and a JSON API under /api
(OpenAPI at /api/docs), sessions, CSRF checks on every POST, the login of ACL clusters, and
error pages that say what failed (never a stack trace).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from console.backend import DEFAULT_BUDGET_S, ClusterBackend, Unanswered
from console.sessions import COOKIE, CSRF_FIELD, CSRF_HEADER, Session, Sessions, csrf_ok
from mqclient.admin_types import AdminError

HERE = Path(__file__).resolve().parent
log = logging.getLogger("mqconsole")
PUBLIC_PATHS = ("/login", "/static/", "/api/docs", "/api/openapi.json", "/healthz")


@dataclasses.dataclass(frozen=True)
class ConsoleConfig:
    namesrv: str
    budget_s: float = DEFAULT_BUDGET_S
    analytics_dir: Path | None = None
    chaos_dir: Path | None = None
    login: bool = False  # the cluster has aclEnable: every user signs in with an account
    tls_ca: str | None = None


class Forbidden(Exception):
    """A POST without the session's CSRF token."""


def human_time(ms: int | float | None) -> str:
    if not ms or ms <= 0:
        return "-"
    t = datetime.datetime.fromtimestamp(ms / 1000)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{int(ms) % 1000:03d}"


def human_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def make_templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    env = templates.env
    env.filters.update(time=human_time, bytes=human_bytes, secs=seconds,
                       q=lambda s: quote(str(s), safe=""))
    return templates


class Console:
    """What the routes share: the config, the console's own backend, the sessions."""

    def __init__(self, config: ConsoleConfig) -> None:
        self.config = config
        self.backend = ClusterBackend(config.namesrv, budget_s=config.budget_s,
                                      tls_ca=config.tls_ca)
        self.sessions = Sessions()
        self.templates = make_templates()

    def close(self) -> None:
        self.sessions.close()
        self.backend.close()

    def backend_of(self, request: Request) -> ClusterBackend:
        session: Session | None = request.state.session
        if session is not None and session.backend is not None:
            return session.backend
        return self.backend

    def page(self, request: Request, name: str, status_code: int = 200, **context: Any
             ) -> HTMLResponse:
        session: Session | None = request.state.session
        context.update(request=request, csrf_field=CSRF_FIELD,
                       csrf_token=session.csrf if session else "",
                       account=session.access_key if session else "",
                       login=self.config.login, analytics=self.config.analytics_dir is not None,
                       chaos=self.config.chaos_dir is not None, path=request.url.path)
        return self.templates.TemplateResponse(request, name, context, status_code=status_code)


def console_of(request: Request) -> Console:
    return request.app.state.console


def create_app(config: ConsoleConfig) -> FastAPI:
    console = Console(config)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Channels opened and lists gathered before the first page asks (not awaited: a
        # cluster that is down must not hold the console's start).
        warming = asyncio.ensure_future(console.backend.warm()) if not config.login else None
        yield
        if warming is not None:
            warming.cancel()
        console.close()

    app = FastAPI(title="mqconsole", summary="The pyrocketmq-cluster web console's JSON API",
                  docs_url="/api/docs", openapi_url="/api/openapi.json", redoc_url=None,
                  lifespan=lifespan, dependencies=[Depends(check_csrf)])
    app.state.console = console
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    @app.middleware("http")
    async def sessions_and_login(request: Request, call_next: Any) -> Response:
        started = time.perf_counter()
        path = request.url.path
        session = console.sessions.get(request.cookies.get(COOKIE))
        fresh = session is None
        if session is None:
            session = console.sessions.new()
        request.state.session = session
        public = path == "/login" or any(path.startswith(p) for p in PUBLIC_PATHS[1:])
        if config.login and session.backend is None and not public:
            if path.startswith("/api/"):
                response: Response = JSONResponse({"error": "sign in first (POST /login)"},
                                                  status_code=401)
            else:
                response = RedirectResponse(f"/login?next={quote(path)}", status_code=303)
        else:
            response = await call_next(request)
        if fresh:
            response.set_cookie(COOKIE, session.token, httponly=True, samesite="strict")
        response.headers.setdefault("Cache-Control", "no-store")
        response.headers.setdefault("X-Frame-Options", "DENY")
        # The server's time for the page (bench.console reads it; browsers show it).
        response.headers["Server-Timing"] = (
            f"app;dur={(time.perf_counter() - started) * 1000:.1f}")
        return response

    @app.exception_handler(Forbidden)
    async def forbidden(request: Request, exc: Forbidden) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc)}, status_code=403)
        return console.page(request, "error.html", 403, title="Refused", message=str(exc))

    @app.exception_handler(AdminError)
    async def admin_error(request: Request, exc: AdminError) -> Response:
        status = 504 if isinstance(exc, Unanswered) else 502
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc)}, status_code=status)
        return console.page(request, "error.html", status, title="The cluster said no",
                            message=str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)
        return console.page(request, "error.html", exc.status_code, title="Not here",
                            message=str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed: %s: %s", request.method, request.url.path,
                  type(exc).__name__, exc)
        message = "The console failed on this request; its log says why."
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=500)
        return HTMLResponse(f"<!doctype html><title>Error</title><h1>Error</h1><p>{message}"
                            "</p><p><a href='/'>Back</a></p>", status_code=500)

    from console import (
        pages_cluster,
        pages_dlq,
        pages_groups,
        pages_messages,
        pages_runs,
        pages_topics,
    )
    for module in (pages_cluster, pages_topics, pages_groups, pages_dlq, pages_messages,
                   pages_runs):
        app.include_router(module.router)
    return app


async def check_csrf(request: Request) -> None:
    """Every POST (the sign-in too) carries the session's CSRF token, in the form or in the
    X-CSRF-Token header (the form is parsed once: the route reads the same one)."""
    if request.method != "POST":
        return
    given = request.headers.get(CSRF_HEADER)
    if given is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")):
        given = str((await request.form()).get(CSRF_FIELD) or "")
    if not csrf_ok(request.state.session, given):
        raise Forbidden("This form is stale or came from another site (missing CSRF token): "
                        "reload the page and retry.")
