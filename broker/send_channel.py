"""The broker's send channel: SendBatch requests as frames on plain TCP (mqproto/framing.py).

Each request is handled as the gRPC SendBatch is (send.py), concurrently with the others of
its connection, and answered by id as soon as it is done: those done as one read is handled
go out in one write at its end, those that had to wait in one write per loop turn. A
connection with MAX_INFLIGHT_PER_CONNECTION requests unanswered is not read until some are
answered. Bytes that are not frames close the connection (logged).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from broker.convert import format_host
from broker.status import RequestError, answer
from mqproto import common_pb2, messaging_pb2
from mqproto.framing import KIND_SEND_BATCH, FrameError, FrameReader, encode_frame

if TYPE_CHECKING:
    from broker.send import SendProcessor

log = logging.getLogger(__name__)
MAX_INFLIGHT_PER_CONNECTION = 1024


async def _resume(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    """Drives, as its task would, a coroutine started outside one and now suspended on
    the future `waiting` (or on a bare yield, None)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                waiting._asyncio_future_blocking = False
                woken = loop.create_future()
                waiting.add_done_callback(functools.partial(_wake, woken))
                await woken
        except asyncio.CancelledError:
            if waiting is not None:
                waiting.cancel()
            step = functools.partial(coro.throw, asyncio.CancelledError())
        else:
            step = functools.partial(coro.send, None)
        try:
            waiting = step()
        except StopIteration:
            return


def _wake(woken: asyncio.Future[None], _: object) -> None:
    if not woken.done():
        woken.set_result(None)


class SendChannelServer:
    def __init__(self, send: SendProcessor) -> None:
        self.send = send
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()

    async def start(self, host: str, port: int) -> int:
        """Listens; returns the bound port."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self, grace: float) -> None:
        """Stops accepting, lets requests in flight finish for up to `grace` seconds (their
        answers still go out), then closes every connection."""
        if self._server is None:
            return
        self._server.close()
        tasks = [t for c in self._connections for t in c.tasks]
        if tasks:
            await asyncio.wait(tasks, timeout=grace)
        for connection in list(self._connections):
            connection.close()
        await self._server.wait_closed()
        self._server = None


class _Connection(asyncio.BufferedProtocol):
    def __init__(self, server: SendChannelServer) -> None:
        self.server = server
        self.reader = FrameReader()
        self.tasks: set[asyncio.Task[None]] = set()
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] = ("127.0.0.1", 0)
        self._out: list[bytes] = []
        self._reading = False  # in buffer_updated: its answers go out at its end
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (str(peer[0]), int(peer[1]))
        self.server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.server._connections.discard(self)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.reader.received(nbytes)
        except FrameError as e:
            log.warning("send channel: closing the connection of %s: %s",
                        format_host(self.peer), e)
            self.close()
            return
        loop = asyncio.get_running_loop()
        self._reading = True
        for request_id, kind, payload in frames:
            coro = self._handle(request_id, kind, payload)
            # Started here, not in a new task: under ASYNC_FLUSH with no slave to wait for,
            # a request completes without suspending (measured: ~8 % less broker CPU per
            # batch of 32). Only one that waits (flush, slave) gets a task.
            try:
                waiting = coro.send(None)
            except StopIteration:
                continue
            except Exception:  # _handle answers every error; this is a bug: keep serving
                log.exception("send channel: request %d failed", request_id)
                continue
            task = loop.create_task(_resume(coro, waiting))
            self.tasks.add(task)
            task.add_done_callback(self._done)
        self._reading = False
        if self._out:  # at once, not a loop turn later: most requests complete as read
            self._flush()
        if len(self.tasks) >= MAX_INFLIGHT_PER_CONNECTION and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if self._paused and len(self.tasks) < MAX_INFLIGHT_PER_CONNECTION // 2:
            self._paused = False
            if self.transport is not None:
                self.transport.resume_reading()

    async def _handle(self, request_id: int, kind: int, payload: bytes) -> None:
        assert kind == KIND_SEND_BATCH  # the only kind FrameReader lets through
        response = await answer(messaging_pb2.SendBatchResponse, "SendBatch (send channel)",
                                self._send_batch(payload))
        self._reply(encode_frame(request_id, kind, response.SerializeToString()))

    async def _send_batch(self, payload: bytes) -> messaging_pb2.SendBatchResponse:
        try:
            request = messaging_pb2.SendBatchRequest.FromString(payload)
        except Exception:  # protobuf's DecodeError
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               "the frame is not a SendBatchRequest") from None
        return await self.server.send.send_batch(request, self.peer)

    def _reply(self, frame: bytes) -> None:
        if not self._out and not self._reading:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(frame)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))
