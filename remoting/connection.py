"""RocketMQ 4.x remoting over asyncio streams: one connection carries many requests both
ways, answers paired with requests by `opaque`.

`RemotingConnection.serve()` reads frames until the peer closes: a request is handed to
the handler in a task of its own (answers go out as they are ready, in any order), an
answer resolves the `request()` waiting on its opaque. A oneway request is not answered.
Limits: a frame over `max_frame_bytes` or one that does not decode closes the connection
(the stream is out of step; one log line); a frame whose first byte came but whose rest
does not within `frame_timeout_s` closes it too; a connection silent for `idle_timeout_s`
is closed (0: never); a server closes connections past `max_connections` at once. Log
lines of refusals: at most one per 10 s per server, counting the others.

`RemotingServer` accepts connections on a port, or is handed streams whose first bytes
were already read (`serve_stream(reader, writer, prefix)`: a port that serves two
protocols, see nameserver/).
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


class _PrefixedReader:
    """A StreamReader whose first bytes were already read by someone else."""

    def __init__(self, reader: asyncio.StreamReader, prefix: bytes) -> None:
        self.reader = reader
        self.prefix = prefix

    async def readexactly(self, n: int) -> bytes:
        if not self.prefix:
            return await self.reader.readexactly(n)
        taken, self.prefix = self.prefix[:n], self.prefix[n:]
        if len(taken) == n:
            return taken
        return taken + await self.reader.readexactly(n - len(taken))


class RemotingConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 handler: Handler | None = None, *, limits: RemotingLimits | None = None,
                 prefix: bytes = b"", complaints: RateLimitedLog | None = None) -> None:
        self._reader = _PrefixedReader(reader, prefix)
        self.writer = writer
        self.handler = handler
        self.limits = limits or RemotingLimits()
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(self.limits.max_inflight)
        self._complaints = complaints or RateLimitedLog(log, logging.WARNING, 10.0)
        self.closed = asyncio.Event()
        # What the processors keep per connection (client ids seen in heartbeats, ...).
        self.attributes: dict[str, object] = {}
        self.on_close: list[Callable[[RemotingConnection], None]] = []

    # -- sending -------------------------------------------------------------------------
    def write(self, cmd: RemotingCommand) -> None:
        if self.closed.is_set() or self.writer.is_closing():
            return
        self.writer.write(encode(cmd))

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

    # -- reading -------------------------------------------------------------------------
    async def _read_frame(self) -> bytes | None:
        """The bytes after a frame's length; None at a clean end of stream (or idle). One
        timer per frame (asyncio.timeout, moved from the idle to the frame deadline once
        the first byte came), no task."""
        limits = self.limits
        loop = asyncio.get_running_loop()
        idle = limits.idle_timeout_s
        async with asyncio.timeout(loop.time() + idle if idle > 0 else None) as deadline:
            try:
                first = await self._reader.readexactly(1)
            except asyncio.IncompleteReadError:
                return None
            except asyncio.CancelledError:
                if deadline.expired():
                    log.debug("remoting connection from %s idle %.0f s: closed", self.peer,
                              idle)
                    return None
                raise
            deadline.reschedule(loop.time() + limits.frame_timeout_s)
            try:
                prefix = first + await self._reader.readexactly(3)
                total = frame_length(prefix, limits.max_frame_bytes)
                return await self._reader.readexactly(total)
            except asyncio.CancelledError:
                if deadline.expired():
                    raise CommandError(f"frame incomplete {limits.frame_timeout_s:.0f} s "
                                       "after its first byte") from None
                raise
            except asyncio.IncompleteReadError as e:
                raise CommandError(f"stream ended inside a frame ({len(e.partial)} bytes "
                                   f"of {e.expected} read)") from None

    async def serve(self) -> None:
        """Reads and dispatches frames until the stream ends or goes out of step."""
        try:
            while True:
                frame = await self._read_frame()
                if frame is None:
                    return
                cmd = decode(frame)
                if cmd.is_response:
                    future = self._pending.get(cmd.opaque)
                    if future is not None and not future.done():
                        future.set_result(cmd)
                    continue
                await self._slots.acquire()
                task = asyncio.create_task(self._handle(cmd))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except CommandError as e:
            self._complaints.log("remoting connection from %s closed: %s", self.peer, e)
        except (ConnectionError, OSError) as e:
            log.debug("remoting connection from %s: %s", self.peer, e)
        finally:
            await self.close()

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
        finally:
            self._slots.release()
        if answer is not None and not cmd.is_oneway:
            self.write(answer)

    async def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
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
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


async def connect(host: str, port: int, handler: Handler | None = None, *,
                  limits: RemotingLimits | None = None, timeout_s: float = 5.0
                  ) -> tuple[RemotingConnection, asyncio.Task[None]]:
    """A client connection and the task reading it (cancel or close to end)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    conn = RemotingConnection(reader, writer, handler, limits=limits)
    return conn, asyncio.create_task(conn.serve())


class RemotingServer:
    """Serves remoting connections with one handler."""

    def __init__(self, handler: Handler, limits: RemotingLimits | None = None) -> None:
        self.handler = handler
        self.limits = limits or RemotingLimits()
        self.connections: set[RemotingConnection] = set()
        self.complaints = RateLimitedLog(log, logging.WARNING, 10.0)
        self._server: asyncio.Server | None = None
        self.on_connection: list[Callable[[RemotingConnection], None]] = []

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self.serve_stream, host, port,
                                                  backlog=1024)
        return int(self._server.sockets[0].getsockname()[1])

    async def serve_stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           prefix: bytes = b"") -> None:
        if len(self.connections) >= self.limits.max_connections:
            self.complaints.log("remoting connection from %s refused: %d connections open "
                                "(the limit)", writer.get_extra_info("peername"),
                                len(self.connections))
            writer.close()
            return
        conn = RemotingConnection(reader, writer, self.handler, limits=self.limits,
                                  prefix=prefix, complaints=self.complaints)
        self.connections.add(conn)
        for callback in self.on_connection:
            callback(conn)
        try:
            await conn.serve()
        finally:
            self.connections.discard(conn)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            await conn.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
