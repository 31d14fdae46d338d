"""RocketMQ 4.x remoting over asyncio: one connection carries many requests both ways,
answers paired with requests by `opaque`.

A connection is an asyncio Protocol: the bytes it receives are cut into frames as they
arrive; a request is handed to the handler in a task of its own (answers go out as they
are ready, in any order), an answer resolves the `request()` waiting on its opaque. A
oneway request is not answered. Limits: a frame over `max_frame_bytes` or one that does
not decode closes the connection (the stream is out of step; one log line); so does a
frame whose first byte came but whose rest does not within `frame_timeout_s`, and a
connection silent for `idle_timeout_s` with nothing in flight (0: never) (a server's sweep
looks a few times per timeout); a connection with `max_inflight` requests in its handlers
is not read until some are answered; a server closes connections past `max_connections`
at once. Log lines of refusals: at most one per 10 s per server, counting the others.

`RemotingServer` accepts connections on a port, or takes over a stream whose first bytes
were already read (`serve_stream(reader, writer, prefix)`: a port that serves two
protocols, remoting/shared_port.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections.abc import Awaitable, Callable

from remoting.command import (
    DEFAULT_MAX_FRAME_BYTES,
    FLAG_ONEWAY,
    CommandError,
    RemotingCommand,
    decode,
    encode,
    frame_length,
)
from remoting.serving import RateLimitedLog

log = logging.getLogger(__name__)

# ResponseCode / RequestCode numbers the transport itself answers with.
SYSTEM_ERROR = 1
REQUEST_CODE_NOT_SUPPORTED = 3

Handler = Callable[["RemotingConnection", RemotingCommand], Awaitable[RemotingCommand | None]]
_opaques = itertools.count(1)


class RemotingTimeout(TimeoutError):
    """No answer to a request in time."""


class ConnectionClosed(ConnectionError):
    """The connection closed before the answer came."""


@dataclasses.dataclass(frozen=True)
class RemotingLimits:
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    frame_timeout_s: float = 30.0  # the rest of a frame, once its first byte came
    idle_timeout_s: float = 0.0  # 0: an idle connection stays (clients heartbeat every 30 s)
    max_inflight: int = 1024  # requests handled at once per connection; more wait to be read
    max_connections: int = 10_000  # a server's open connections; one more is closed at once


def take_over(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
              protocol: asyncio.Protocol, prefix: bytes = b"") -> None:
    """Hands the transport of a stream pair to `protocol`, with `prefix` and whatever the
    StreamReader holds unread (CPython keeps it in `_buffer`) delivered to it first."""
    transport = writer.transport
    held = prefix + bytes(reader._buffer)  # noqa: SLF001
    reader._buffer.clear()  # noqa: SLF001
    transport.set_protocol(protocol)
    protocol.connection_made(transport)
    if held:
        protocol.data_received(held)
    if reader.at_eof():
        protocol.eof_received()


class RemotingConnection(asyncio.Protocol):
    def __init__(self, handler: Handler | None = None, *,
                 limits: RemotingLimits | None = None,
                 complaints: RateLimitedLog | None = None) -> None:
        self.handler = handler
        self.limits = limits or RemotingLimits()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._buffer = bytearray()
        self.frame_started = 0.0  # loop time of the first byte of an incomplete frame; 0: none
        self.last_received = 0.0
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._paused = False
        self._complaints = complaints or RateLimitedLog(log, logging.WARNING, 10.0)
        self.closed = asyncio.Event()
        # What the processors keep per connection (client ids seen in heartbeats, ...).
        self.attributes: dict[str, object] = {}
        self.on_close: list[Callable[[RemotingConnection], None]] = []

    # -- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.last_received = asyncio.get_running_loop().time()

    def data_received(self, data: bytes) -> None:
        if self.closed.is_set():
            return
        buf = self._buffer
        buf += data
        self.last_received = now = asyncio.get_running_loop().time()
        pos, end = 0, len(buf)
        try:
            while end - pos >= 4:
                total = frame_length(bytes(buf[pos:pos + 4]), self.limits.max_frame_bytes)
                if end - pos - 4 < total:
                    break
                cmd = decode(bytes(buf[pos + 4:pos + 4 + total]))
                pos += 4 + total
                self._dispatch(cmd)
        except CommandError as e:
            self.abort(str(e))
            return
        if pos:
            del buf[:pos]
        # the first byte of the frame still incomplete came now, or came before this chunk
        self.frame_started = 0.0 if not buf else now if pos else (self.frame_started or now)

    def eof_received(self) -> bool:
        if self._buffer:
            self._complaints.log("remoting connection from %s closed: stream ended inside a "
                                 "frame (%d bytes)", self.peer, len(self._buffer))
        return False  # the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed()

    def pause_writing(self) -> None:  # the peer does not read its answers: stop reading it
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self._paused:
            self.transport.resume_reading()

    # -- frames ----------------------------------------------------------------------------
    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            future = self._pending.get(cmd.opaque)
            if future is not None and not future.done():
                future.set_result(cmd)
            return
        task = asyncio.get_running_loop().create_task(self._handle(cmd))
        self._tasks.add(task)
        task.add_done_callback(self._handled)
        if len(self._tasks) >= self.limits.max_inflight and not self._paused:
            self._paused = True
            if self.transport is not None:
                self.transport.pause_reading()

    def _handled(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._paused and len(self._tasks) < self.limits.max_inflight // 2:
            self._paused = False
            if self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()

    async def _handle(self, cmd: RemotingCommand) -> None:
        try:
            if self.handler is None:
                answer: RemotingCommand | None = cmd.response(
                    REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} is not served here")
            else:
                answer = await self.handler(self, cmd)
        except CommandError as e:
            answer = cmd.response(SYSTEM_ERROR, f"request code {cmd.code}: {e}")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("request code %d from %s failed", cmd.code, self.peer)
            answer = cmd.response(SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        if answer is not None and not cmd.is_oneway:
            self.write(answer)

    @property
    def inflight(self) -> int:
        return len(self._tasks)

    # -- sending -------------------------------------------------------------------------
    def write(self, cmd: RemotingCommand) -> None:
        transport = self.transport
        if self.closed.is_set() or transport is None or transport.is_closing():
            return
        transport.write(encode(cmd))

    async def request(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Sends a request and waits for its answer (RemotingTimeout / ConnectionClosed)."""
        cmd.opaque = next(_opaques) & 0x7FFFFFFF
        cmd.flag &= ~1
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = future
        try:
            if self.closed.is_set():
                raise ConnectionClosed(f"connection to {self.peer} is closed")
            self.write(cmd)
            try:
                return await asyncio.wait_for(future, timeout_s)
            except TimeoutError:
                raise RemotingTimeout(f"no answer from {self.peer} to request code {cmd.code} "
                                      f"in {timeout_s:.1f} s") from None
        finally:
            self._pending.pop(cmd.opaque, None)

    def send_oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next(_opaques) & 0x7FFFFFFF
        cmd.flag = (cmd.flag | FLAG_ONEWAY) & ~1
        self.write(cmd)

    # -- closing ---------------------------------------------------------------------------
    def check_timeouts(self, now: float) -> None:
        """Closes the connection when a frame is late or it idled too long (the sweep)."""
        limits = self.limits
        if self.frame_started and now - self.frame_started > limits.frame_timeout_s:
            self.abort(f"frame incomplete {limits.frame_timeout_s:.0f} s after its first "
                       "byte")
        elif (limits.idle_timeout_s > 0 and not self._tasks and not self._pending
              and now - self.last_received > limits.idle_timeout_s):
            log.debug("remoting connection from %s idle %.0f s: closed", self.peer,
                      limits.idle_timeout_s)
            self._close_transport()

    def abort(self, why: str) -> None:
        """The stream is out of step (or too slow): one log line, the connection closed."""
        self._complaints.log("remoting connection from %s closed: %s", self.peer, why)
        self._close_transport()

    def _close_transport(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self._closed()

    def _closed(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        self._buffer.clear()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosed(f"connection to {self.peer} closed"))
        for task in list(self._tasks):
            task.cancel()
        for callback in self.on_close:
            try:
                callback(self)
            except Exception:
                log.exception("on_close of %s failed", self.peer)

    async def serve(self) -> None:
        """Waits until the connection is closed."""
        await self.closed.wait()

    async def close(self) -> None:
        self._close_transport()


async def connect(host: str, port: int, handler: Handler | None = None, *,
                  limits: RemotingLimits | None = None, timeout_s: float = 5.0
                  ) -> tuple[RemotingConnection, asyncio.Task[None]]:
    """A client connection and a task that ends when it closes."""
    loop = asyncio.get_running_loop()
    _, conn = await asyncio.wait_for(loop.create_connection(
        lambda: RemotingConnection(handler, limits=limits), host, port), timeout_s)
    return conn, asyncio.create_task(conn.serve())


class RemotingServer:
    """Serves remoting connections with one handler; a sweep task closes late frames and
    idle connections."""

    def __init__(self, handler: Handler, limits: RemotingLimits | None = None) -> None:
        self.handler = handler
        self.limits = limits or RemotingLimits()
        self.connections: set[RemotingConnection] = set()
        self.complaints = RateLimitedLog(log, logging.WARNING, 10.0)
        self._server: asyncio.Server | None = None
        self._sweep: asyncio.Task[None] | None = None

    def _new_connection(self) -> RemotingConnection:
        return _ServedConnection(self)

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._new_connection, host, port,
                                                backlog=1024)
        return int(self._server.sockets[0].getsockname()[1])

    def _ensure_sweep(self) -> None:
        if self._sweep is None or self._sweep.done():
            self._sweep = asyncio.get_running_loop().create_task(self._sweep_loop())

    async def _sweep_loop(self) -> None:
        limits = self.limits
        timeouts = [t for t in (limits.frame_timeout_s, limits.idle_timeout_s) if t > 0]
        interval = min([1.0, *(t / 4 for t in timeouts)])
        loop = asyncio.get_running_loop()
        while self.connections:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in list(self.connections):
                conn.check_timeouts(now)

    async def serve_stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           prefix: bytes = b"") -> None:
        """Serves a connection someone else accepted and began to read; returns when it
        closes."""
        conn = self._new_connection()
        take_over(reader, writer, conn, prefix)
        await conn.serve()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            await conn.close()
        if self._sweep is not None:
            self._sweep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweep
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None


class _ServedConnection(RemotingConnection):
    """A connection of a RemotingServer: counted, limited, swept."""

    def __init__(self, server: RemotingServer) -> None:
        super().__init__(server.handler, limits=server.limits, complaints=server.complaints)
        self.server = server

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        server = self.server
        if len(server.connections) >= server.limits.max_connections:
            server.complaints.log("remoting connection from %s refused: %d connections open "
                                  "(the limit)", self.peer, len(server.connections))
            self._close_transport()
            return
        server.connections.add(self)
        self.on_close.append(server.connections.discard)
        server._ensure_sweep()
