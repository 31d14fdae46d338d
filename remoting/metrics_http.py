"""The `/metrics` endpoint of brokers and name servers: a small HTTP/1.1 server on asyncio
that serves Prometheus' text exposition format (prometheus_client.generate_latest).

A scrape has two halves so that the event loop never does the per-queue work:
`snapshot()` runs on the loop and copies what the owner's tables say (cheap, no loop over
queues); the thunk it returns renders the exposition text in this server's one worker
thread (the per-queue store reads, formatting, gzip). One scrape renders at a time.

Only `GET` / `HEAD` of `/metrics` is served; anything else gets a clear HTTP error and the
connection is closed: a malformed request line 400, another path 404, another method 405,
a request head over HttpLimits.max_head_bytes 431, a head not complete in
HttpLimits.head_timeout_s 408, more than HttpLimits.max_connections at once 503. Every
answer closes the connection (`Connection: close`), so an idle client holds nothing.
Bad requests are logged at most once per 10 s (a port scanner must not flood the log).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import gzip
import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from remoting.serving import RateLimitedLog

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
# The classic text format, which every Prometheus (2.x and 3.x) parses; our metric names
# are all legacy-valid, so generate_latest's output is exactly that format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A scrape's rendering (a worker thread) lets the event loop take the GIL this often.
GIL_YIELD_LINES = 1000
# RocketMQ 5's metricsPromExporterPort: the port our compose cluster gives every process.
DEFAULT_PROM_PORT = 5557

Render = Callable[[], bytes]
"""Renders the exposition text; runs in the server's worker thread."""
Snapshot = Callable[[], Render]
"""Runs on the event loop: copies what the scrape needs, returns the renderer."""


@dataclasses.dataclass(frozen=True)
class HttpLimits:
    max_head_bytes: int = 8192  # request line + headers
    max_headers: int = 100
    head_timeout_s: float = 5.0  # the whole request head must arrive within this
    write_timeout_s: float = 10.0  # the client must take the answer within this
    render_timeout_s: float = 30.0  # waiting for, and rendering, one scrape
    max_connections: int = 32
    gzip_min_bytes: int = 1024  # smaller answers go uncompressed


class ExpositionRenderer:
    """The process metrics of prometheus_client (process_*: CPU, memory, open fds, start
    time; python_info; python_gc_*) and the families a scrape builds, as exposition text.

    The scrape's own families are written by `exposition_text`, not generate_latest: their
    label names are ours (valid by construction), and generate_latest's per-label
    validation and escaping made 65,000 per-queue series cost ~4 s of CPU (while holding
    the GIL the event loop needs)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)

    def render(self, families: Iterable[Metric]) -> bytes:
        """Worker thread only (one scrape at a time)."""
        return exposition_text(families).encode() + generate_latest(self.registry)


def _escape_label_value(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def exposition_text(families: Iterable[Metric], yield_every: int = GIL_YIELD_LINES) -> str:
    """Prometheus' text format (0.0.4) of gauge, counter and histogram families whose label
    names are valid; as generate_latest writes them, minus its per-label checks. Every
    `yield_every` samples it lets other threads (the event loop) take the GIL."""
    out: list[str] = []
    written = 0
    for m in families:
        name = m.name + "_total" if m.type == "counter" else m.name
        doc = m.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {m.type}\n")
        for sample in m.samples:
            if sample.labels:
                labels = ",".join(f'{k}="{_escape_label_value(v)}"'
                                  for k, v in sample.labels.items())
                out.append(f"{sample.name}{{{labels}}} {floatToGoString(sample.value)}\n")
            else:
                out.append(f"{sample.name} {floatToGoString(sample.value)}\n")
            written += 1
            if written % yield_every == 0:
                time.sleep(0)
    return "".join(out)


def histogram_family(name: str, documentation: str, labels: dict[str, str],
                     cumulative: list[tuple[float, int]], total: float) -> HistogramMetricFamily:
    """A histogram of one series from (le, observations <= le) pairs ending with +Inf."""
    family = HistogramMetricFamily(name, documentation, labels=list(labels))
    family.add_metric(list(labels.values()),
                      [("+Inf" if le == float("inf") else repr(le), n) for le, n in cumulative],
                      sum_value=total)
    return family


class HttpError(Exception):
    def __init__(self, status: int, reason: str, detail: str,
                 headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(detail)
        self.status = status
        self.reason = reason
        self.detail = detail
        self.headers = headers


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased

    @property
    def accepts_gzip(self) -> bool:
        return "gzip" in self.headers.get("accept-encoding", "").lower()


def parse_request_head(head: bytes, limits: HttpLimits) -> Request:
    """A request line and headers (without the final blank line); HttpError when bad."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise HttpError(400, "Bad Request", "undecodable request head") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1].startswith("/"):
        raise HttpError(400, "Bad Request", "expected a request line like "
                                            "'GET /metrics HTTP/1.1'")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise HttpError(505, "HTTP Version Not Supported", f"{version[:16]!r} is not HTTP/1.x")
    if len(lines) - 1 > limits.max_headers:
        raise HttpError(431, "Request Header Fields Too Large",
                        f"more than {limits.max_headers} header lines")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "Bad Request", "malformed header line")
        headers[name.lower()] = value.strip()
    return Request(method, target.partition("?")[0], headers)


class MetricsHttpServer:
    """Serves `GET /metrics` on `host:port` (port 0: any free port) until `stop()`."""

    def __init__(self, snapshot: Snapshot, *, name: str,
                 limits: HttpLimits | None = None) -> None:
        self.snapshot = snapshot
        self.name = name
        self.limits = limits or HttpLimits()
        self.port = 0
        self.scrapes = 0
        self.rejected = 0
        self._server: asyncio.Server | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._render_lock = asyncio.Lock()
        self._connections: set[asyncio.Task[None]] = set()
        self._bad_request_log = RateLimitedLog(log, logging.INFO)

    async def start(self, host: str, port: int) -> int:
        """Binds and serves; returns the bound port. OSError when the port is taken."""
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"{self.name}-metrics")
        try:
            self._server = await asyncio.start_server(
                self._on_connect, host, port, limit=self.limits.max_head_bytes)
        except OSError:
            self._executor.shutdown(wait=False)
            self._executor = None
            raise
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        executor, self._executor = self._executor, None
        if executor is not None:
            # A render in progress reads the owner's state (a broker's store, about to be
            # closed): wait for it, within the render timeout.
            done = asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True)
            try:
                await asyncio.wait_for(done, self.limits.render_timeout_s)
            except TimeoutError:
                log.warning("%s metrics: a scrape still renders after %g s; stopping anyway",
                            self.name, self.limits.render_timeout_s)

    async def _on_connect(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.limits.max_connections:
            self.rejected += 1
            await self._answer_error(writer, HttpError(
                503, "Service Unavailable",
                f"more than {self.limits.max_connections} scrapes at once"))
            return
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            self._connections.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await self._read_request(reader)
            if request.path != METRICS_PATH:
                raise HttpError(404, "Not Found", f"only {METRICS_PATH} is served here")
            if request.method not in ("GET", "HEAD"):
                raise HttpError(405, "Method Not Allowed", f"{METRICS_PATH} takes GET or HEAD",
                                (("Allow", "GET, HEAD"),))
            body, encoding = await self._render(request.accepts_gzip)
        except HttpError as e:
            peer = writer.get_extra_info("peername")
            self._bad_request_log.log("%s metrics: %d %s from %s: %s", self.name, e.status,
                                      e.reason, peer, e.detail)
            await self._answer_error(writer, e)
            return
        headers = [("Content-Type", CONTENT_TYPE)]
        if encoding:
            headers.append(("Content-Encoding", encoding))
        self.scrapes += 1
        await self._answer(writer, 200, "OK", headers, body,
                           send_body=request.method == "GET")

    async def _read_request(self, reader: asyncio.StreamReader) -> Request:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                          self.limits.head_timeout_s)
        except TimeoutError:
            raise HttpError(408, "Request Timeout", "the request head did not arrive in "
                                                    f"{self.limits.head_timeout_s:g} s") from None
        except asyncio.LimitOverrunError:
            raise HttpError(431, "Request Header Fields Too Large",
                            f"request head over {self.limits.max_head_bytes} bytes") from None
        except asyncio.IncompleteReadError:
            raise HttpError(400, "Bad Request", "connection closed inside the request "
                                                "head") from None
        return parse_request_head(head[:-4], self.limits)

    async def _render(self, gzip_ok: bool) -> tuple[bytes, str]:
        executor = self._executor
        if executor is None:
            raise HttpError(503, "Service Unavailable", "shutting down")
        loop = asyncio.get_running_loop()

        async def render() -> tuple[bytes, str]:
            async with self._render_lock:
                renderer = self.snapshot()  # on the loop: copies only
                return await loop.run_in_executor(executor, _render_body, renderer,
                                                  gzip_ok, self.limits.gzip_min_bytes)

        try:
            return await asyncio.wait_for(render(), self.limits.render_timeout_s)
        except TimeoutError:
            raise HttpError(503, "Service Unavailable",
                            f"the scrape took over {self.limits.render_timeout_s:g} s") from None
        except (RuntimeError, concurrent.futures.CancelledError) as e:
            # The executor shut down under us (stop()).
            raise HttpError(503, "Service Unavailable", f"shutting down ({e})") from None
        except Exception as e:
            log.exception("%s metrics: rendering failed", self.name)
            raise HttpError(500, "Internal Server Error", f"rendering failed: {e!r}") from None

    async def _answer_error(self, writer: asyncio.StreamWriter, e: HttpError) -> None:
        body = f"{e.status} {e.reason}: {e.detail}\n".encode()
        await self._answer(writer, e.status, e.reason,
                           [("Content-Type", "text/plain; charset=utf-8"), *e.headers], body)

    async def _answer(self, writer: asyncio.StreamWriter, status: int, reason: str,
                      headers: list[tuple[str, str]], body: bytes, send_body: bool = True
                      ) -> None:
        head = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers),
                f"Content-Length: {len(body)}", "Connection: close", "", ""]
        try:
            writer.write("\r\n".join(head).encode("latin-1"))
            if send_body:
                writer.write(body)
            await asyncio.wait_for(writer.drain(), self.limits.write_timeout_s)
        except (OSError, TimeoutError):
            pass  # the client went away or does not read: nothing more to tell it
        finally:
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), self.limits.write_timeout_s)


class MetricsEndpoint:
    """A process's `/metrics` (a broker's, a name server's): the server and the renderer;
    a subclass's `_snapshot` copies its tables on the loop and returns the Render."""

    def __init__(self, name: str) -> None:
        self._renderer = ExpositionRenderer()
        self.server = MetricsHttpServer(self._snapshot, name=name)

    async def start(self, host: str, port: int) -> int:
        """Serves on host:port (-1 or 0: any free port); returns the bound port."""
        return await self.server.start(host, max(0, port))

    async def stop(self) -> None:
        await self.server.stop()

    def _snapshot(self) -> Render:
        raise NotImplementedError


def _render_body(renderer: Render, gzip_ok: bool, gzip_min_bytes: int) -> tuple[bytes, str]:
    body = renderer()
    if gzip_ok and len(body) >= gzip_min_bytes:
        return gzip.compress(body, compresslevel=1), "gzip"
    return body, ""


__all__ = ["DEFAULT_PROM_PORT", "GIL_YIELD_LINES", "METRICS_PATH", "ExpositionRenderer",
           "HttpError", "HttpLimits", "MetricsEndpoint", "MetricsHttpServer", "Render", "Snapshot",
           "exposition_text", "histogram_family", "parse_request_head"]
