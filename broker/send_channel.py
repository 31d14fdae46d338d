"""The broker's send channel: SendBatch requests as frames on plain TCP (remoting/framing.py).

Each request is handled as the gRPC SendBatch is (send.py), concurrently with the others of
its connection, and answered by id as soon as it is done: those done as one read is handled
go out in one write at its end, those that had to wait in one write per loop turn. A
connection with MAX_INFLIGHT_PER_CONNECTION requests unanswered is not read until some are
answered. Bytes that are not frames close the connection (logged).

Limits (ChannelLimits, broker.conf sendChannel* keys): at most sendChannelMaxConnections
connections (one more is closed at once; fewer when the open files limit is lower), a
connection idle sendChannelIdleTimeoutMills (120 s: no request in flight, nothing
received) is closed, as is one whose frame is incomplete sendChannelFrameTimeoutMills
(30 s) after its first byte; a sweep task looks once a second. Read buffers are allocated at
the first read, 16 KiB, grown on demand and freed after 5 s idle. Refusals and timeouts log
at most a line per 10 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import resource
import ssl
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from acl.config import Account
from acl.decision import Denied, decide
from acl.grpc_auth import Refusal, ServerAuth
from acl.resources import MESSAGING, requirement
from acl.signing import ACCESS_KEY_MD, NONCE_MD, SIGNATURE_MD, TIMESTAMP_MD
from broker.constants import (
    DEFAULT_SEND_CHANNEL_FRAME_TIMEOUT_MS,
    DEFAULT_SEND_CHANNEL_IDLE_MS,
    DEFAULT_SEND_CHANNEL_MAX_CONNECTIONS,
)
from broker.convert import format_host
from broker.send import SEVERAL
from broker.status import RequestError, answer, unexpected
from mqproto import common_pb2, messaging_pb2
from remoting.framing import (
    KIND_AUTH,
    KIND_SEND_BATCH,
    KIND_SEND_BATCHES,
    SEND_CHANNEL_AUTH_METHOD,
    FrameError,
    FrameReader,
    encode_frame,
)
from remoting.serving import RateLimitedLog
from remoting.tls_server import TlsServerProtocol

if TYPE_CHECKING:
    from broker.send import SendProcessor

log = logging.getLogger(__name__)
T = TypeVar("T")
SEND_BATCH_METHOD = MESSAGING + "SendBatch"
MAX_INFLIGHT_PER_CONNECTION = 1024
LISTEN_BACKLOG = 1024  # asyncio's default, 100, drops SYNs of a burst (1 s retransmits)
FD_RESERVE = 1024  # descriptors kept for the store's files, gRPC and HA (at most half)
INITIAL_READ_BYTES = 16 * 1024  # grown on demand (FrameReader)
SHRINK_AFTER_S = 5.0  # an idle connection's read buffer is freed after this
SWEEP_INTERVAL_S = 1.0
GROUPED_SLICE = 256  # batches of a SEND_BATCHES frame stored together (SendProcessor)
TLS_HANDSHAKE_TIMEOUT_S = 10.0
MAX_KEPT_DECISIONS = 1024  # access control: topics a connection keeps its decision for


def _failed(code: int, why: str) -> messaging_pb2.SendBatchResponse:
    """A batch's answer when it is not stored: `code` with `why`."""
    return messaging_pb2.SendBatchResponse(status=common_pb2.Status(code=code, remark=why))


def _refused(kind: int, why: str) -> bytes:
    """The answer to a frame of `kind` refused with NO_PERMISSION."""
    refused = _failed(common_pb2.NO_PERMISSION, why)
    if kind == KIND_SEND_BATCHES:
        return messaging_pb2.SendBatchesResponse(responses=[refused]).SerializeToString()
    return refused.SerializeToString()


async def answer_all(count: int,
                     grouped: Coroutine[Any, Any, list[messaging_pb2.SendBatchResponse | None]]
                     ) -> list[messaging_pb2.SendBatchResponse | None]:
    """`grouped`'s `count` answers; a SYSTEM_ERROR answer each when it failed unexpectedly
    (the connection goes on serving)."""
    try:
        return await grouped
    except Exception as e:
        log.exception("%s failed", SEVERAL)
        return [messaging_pb2.SendBatchResponse(status=unexpected(SEVERAL, e))] * count


async def _resume(coro: Coroutine[Any, Any, T], waiting: Any) -> T:
    """Drives, as its task would, a coroutine started outside one and now suspended on
    the future `waiting` (or on a bare yield, None); returns its result."""
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
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


def _wake(woken: asyncio.Future[None], _: object) -> None:
    if not woken.done():
        woken.set_result(None)


@dataclasses.dataclass(frozen=True)
class ChannelLimits:
    """Connection limits of a send channel (broker.conf keys sendChannel*)."""

    max_connections: int = DEFAULT_SEND_CHANNEL_MAX_CONNECTIONS
    # A connection with no request in flight and nothing received for this long is closed.
    idle_timeout_s: float = DEFAULT_SEND_CHANNEL_IDLE_MS / 1000
    # A frame not complete this long after its first byte closes its connection.
    frame_timeout_s: float = DEFAULT_SEND_CHANNEL_FRAME_TIMEOUT_MS / 1000
    backlog: int = LISTEN_BACKLOG


class SendChannelServer:
    def __init__(self, send: SendProcessor, limits: ChannelLimits | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 auth: ServerAuth | None = None) -> None:
        self.send = send
        # aclEnable: a connection's first frame is AUTH (its account then sends, each batch
        # checked for topic PUB); None: no access control.
        self.auth = auth
        self.limits = limits or ChannelLimits()
        self.clock = clock
        self.max_connections = self.limits.max_connections  # lowered by the fd limit
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self.refused = RateLimitedLog(log, interval_s=10.0)
        self.timed_out = RateLimitedLog(log, logging.INFO, interval_s=10.0)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self, host: str, port: int, ssl_context: ssl.SSLContext | None = None
                    ) -> int:
        """Listens; returns the bound port."""
        loop = asyncio.get_running_loop()
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        reserve = min(FD_RESERVE, soft // 2)
        if soft != resource.RLIM_INFINITY and self.max_connections > soft - reserve:
            # Past the limit, accept() fails and so do the store's file opens: keep room.
            self.max_connections = max(16, soft - reserve)
            log.warning("send channel: at most %d connections (sendChannelMaxConnections %d, "
                        "but the open files limit is %d)", self.max_connections,
                        self.limits.max_connections, soft)
        connection = functools.partial(_Connection, self)
        factory: Callable[[], asyncio.BaseProtocol] = connection
        if ssl_context is not None:  # TLS in remoting.tls_server, not asyncio's: see there
            factory = functools.partial(TlsServerProtocol, ssl_context, connection,
                                        TLS_HANDSHAKE_TIMEOUT_S)
        self._server = await loop.create_server(factory, host, port,
                                                backlog=self.limits.backlog)
        self._sweeper = loop.create_task(self._sweep(), name="sendChannelSweep")
        return int(self._server.sockets[0].getsockname()[1])

    async def _sweep(self) -> None:
        """Closes idle connections and those stuck in a frame; frees idle read buffers."""
        limits = self.limits
        interval = min(SWEEP_INTERVAL_S, limits.idle_timeout_s / 4, limits.frame_timeout_s / 4)
        while True:
            await asyncio.sleep(interval)
            now = self.clock()
            for connection in list(self._connections):
                connection.check(now, limits)

    async def stop(self, grace: float) -> None:
        """Stops accepting, lets requests in flight finish for up to `grace` seconds (their
        answers still go out), then closes every connection."""
        if self._server is None:
            return
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
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
        self.reader = FrameReader(initial_bytes=INITIAL_READ_BYTES)
        self.tasks: set[asyncio.Task[None]] = set()
        self.transport: asyncio.Transport | None = None
        self.peer: tuple[str, int] = ("127.0.0.1", 0)
        self._out: list[bytes] = []
        self._reading = False  # in buffer_updated: its answers go out at its end
        self._paused = False
        self.last_active = server.clock()
        self.frame_started = 0.0  # when the pending frame's first byte came; 0: none
        # Access control: whether the AUTH frame was accepted, and its account as it was
        # then (None: the cluster key, which may do anything). Each batch is checked
        # against the account table as it is now (the file may have been reloaded).
        self.authenticated = server.auth is None
        self.account: Account | None = None
        # Access control: by topic, the account object the decision was made for and why it
        # refused ("": allowed). Valid while the account table holds that very object (a
        # reload makes new ones): decide() and requirement() cost ~10 us a batch, a look-up
        # well under one.
        self._decisions: dict[str, tuple[Account, str]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (str(peer[0]), int(peer[1]))
        server = self.server
        if len(server._connections) >= server.max_connections:
            server.refused.log("send channel: connection from %s refused: %d connections, "
                               "the most allowed (sendChannelMaxConnections)",
                               format_host(self.peer), len(server._connections))
            transport.abort()
            return
        server._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.server._connections.discard(self)

    def check(self, now: float, limits: ChannelLimits) -> None:
        """The sweep's look at this connection (see ChannelLimits)."""
        if self.frame_started and now - self.frame_started > limits.frame_timeout_s:
            self.server.timed_out.log(
                "send channel: closing the connection of %s: a frame of it is incomplete "
                "after %.0f s (%d bytes received)", format_host(self.peer),
                now - self.frame_started, self.reader.pending)
            self.close()
        elif self.tasks or self.reader.pending:
            return
        elif now - self.last_active > limits.idle_timeout_s:
            self.server.timed_out.log("send channel: closing the connection of %s: idle for "
                                      "%.0f s", format_host(self.peer), now - self.last_active)
            self.close()
        elif now - self.last_active > SHRINK_AFTER_S:
            self.reader.shrink()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        reader = self.reader
        try:
            frames = reader.received(nbytes)
        except FrameError as e:
            log.warning("send channel: closing the connection of %s: %s",
                        format_host(self.peer), e)
            self.close()
            return
        self.last_active = now = self.server.clock()
        if not reader.pending:
            self.frame_started = 0.0
        elif frames or not self.frame_started:  # a frame began in this read
            self.frame_started = now
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
        if not self.tasks:  # idle from its last answer on, not from its last read
            self.last_active = self.server.clock()
        if self._paused and len(self.tasks) < MAX_INFLIGHT_PER_CONNECTION // 2:
            self._paused = False
            if self.transport is not None:
                self.transport.resume_reading()

    async def _handle(self, request_id: int, kind: int, payload: bytes) -> None:
        if kind == KIND_AUTH:
            self._authenticate(request_id, payload)
            return
        if not self.authenticated:
            refusal = ("UNAUTHENTICATED: send channel: access control is on: authenticate "
                       "first (AUTH frame)")
            self._reply(encode_frame(request_id, kind, _refused(kind, refusal)))
            return
        if kind == KIND_SEND_BATCHES:
            answer_bytes = await self._send_batches(payload)
        else:
            assert kind == KIND_SEND_BATCH  # the only other kind FrameReader lets through
            response = await answer(messaging_pb2.SendBatchResponse,
                                    "SendBatch (send channel)", self._send_batch(payload))
            answer_bytes = response.SerializeToString()
        self._reply(encode_frame(request_id, kind, answer_bytes))

    def _authenticate(self, request_id: int, payload: bytes) -> None:
        auth = self.server.auth
        status = common_pb2.Status(code=common_pb2.SUCCESS)
        try:
            if auth is None:
                raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                              "access control is off here: no AUTH frame is needed")
            try:
                data = json.loads(payload)
                md = {ACCESS_KEY_MD: str(data["accessKey"]),
                      TIMESTAMP_MD: str(data["timestamp"]), NONCE_MD: str(data["nonce"]),
                      SIGNATURE_MD: str(data["signature"])}
            except (ValueError, KeyError, TypeError):
                raise Refusal(grpc.StatusCode.UNAUTHENTICATED, "bad AUTH frame") from None
            self.account = auth.authenticate(SEND_CHANNEL_AUTH_METHOD, md, self.peer[0])
            self.authenticated = True
        except Refusal as r:
            if auth is not None:
                auth.log_refusal("send channel AUTH", f"ipv4:{format_host(self.peer)}", r)
            status = common_pb2.Status(code=common_pb2.NO_PERMISSION,
                                       remark=f"{r.code.name}: {r}")
        self._reply(encode_frame(request_id, KIND_AUTH, status.SerializeToString()))
        if status.code != common_pb2.SUCCESS:
            self._flush()
            self.close()

    def _current_account(self) -> Account:
        """This connection's account as the account table has it now (reloaded since the
        AUTH frame, maybe). Raises Refusal when it was removed or its secret changed."""
        authed = self.account
        assert authed is not None
        auth = self.server.auth
        store = auth.store if auth is not None else None
        if store is None:
            return authed
        current = store.config.accounts.get(authed.access_key)
        if current is None:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                          f"account {authed.access_key} no longer exists (removed from the "
                          "ACL file after this connection authenticated)")
        if current.secret_key != authed.secret_key:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                          f"the secret key of account {authed.access_key} changed after this "
                          "connection authenticated: reconnect with the new one")
        return current

    def _denied(self, request: messaging_pb2.SendBatchRequest) -> str:
        """Why this connection's account may not send `request`; "" when it may."""
        if self.account is None:
            return ""
        try:
            account = self._current_account()
            why = self._decision(account, request)
            if why:
                raise Refusal(grpc.StatusCode.PERMISSION_DENIED, why)
        except Refusal as r:
            auth = self.server.auth
            if auth is not None:
                auth.log_refusal("SendBatch", f"ipv4:{format_host(self.peer)}", r)
            return f"{r.code.name}: {r}"  # the prefix tells clients not to retry
        return ""

    def _decision(self, account: Account, request: messaging_pb2.SendBatchRequest) -> str:
        """Why `account` may not send `request` ("": it may), as decide() says; kept by
        topic (what a SendBatch's requirement depends on) for this account object."""
        topic = request.topic
        kept = self._decisions.get(topic)
        if kept is not None and kept[0] is account:
            return kept[1]
        try:
            decide(account, requirement(SEND_BATCH_METHOD, request))
            why = ""
        except Denied as e:
            why = f"{e} for SendBatch (send channel)"
        if len(self._decisions) >= MAX_KEPT_DECISIONS:
            self._decisions.clear()
        self._decisions[topic] = (account, why)
        return why

    async def _send_batches(self, payload: bytes) -> bytes:
        """A SendBatchesResponse: each batch stored or refused as a SendBatch frame of its own
        would be, those of topics in the table together (SendProcessor.send_grouped)."""
        try:
            request = messaging_pb2.SendBatchesRequest.FromString(payload)
        except Exception:  # protobuf's DecodeError
            refused = _failed(common_pb2.INVALID_PARAMETER,
                              "the frame is not a SendBatchesRequest")
            return messaging_pb2.SendBatchesResponse(responses=[refused]).SerializeToString()
        send, peer = self.server.send, self.peer
        batches: Sequence[messaging_pb2.SendBatchRequest] = request.batches
        # Access control: each batch is stored or refused on its own (none checked when off).
        denials = [self._denied(b) for b in batches] if self.account is not None else []
        refusing = any(denials)
        if refusing:
            batches = [b for b, why in zip(batches, denials, strict=True) if not why]
        grouped: list[messaging_pb2.SendBatchResponse | None] = []
        for first in range(0, len(batches), GROUPED_SLICE):
            if first:  # a frame may carry thousands of batches: the loop gets a turn
                await asyncio.sleep(0)
            part = batches[first:first + GROUPED_SLICE]
            grouped += await answer_all(len(part), send.send_grouped(part, peer))
        rest = [b for b, r in zip(batches, grouped, strict=True) if r is None]
        if rest:  # topics created by the send, retry topics: each on its own
            others = iter(await asyncio.gather(*(
                answer(messaging_pb2.SendBatchResponse, SEVERAL, send.send_batch(batch, peer))
                for batch in rest)))
            grouped = [r if r is not None else next(others) for r in grouped]
        responses: list[messaging_pb2.SendBatchResponse] = grouped  # type: ignore[assignment]
        if refusing:
            stored = iter(responses)
            responses = [_failed(common_pb2.NO_PERMISSION, why) if why else next(stored)
                         for why in denials]
        return messaging_pb2.SendBatchesResponse(responses=responses).SerializeToString()

    async def _send_batch(self, payload: bytes) -> messaging_pb2.SendBatchResponse:
        try:
            request = messaging_pb2.SendBatchRequest.FromString(payload)
        except Exception:  # protobuf's DecodeError
            raise RequestError(common_pb2.INVALID_PARAMETER,
                               "the frame is not a SendBatchRequest") from None
        why = self._denied(request)
        if why:
            raise RequestError(common_pb2.NO_PERMISSION, why)
        return await self.server.send.send_batch(request, self.peer)

    def _reply(self, frame: bytes) -> None:
        if not self._out and not self._reading:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out.append(frame)

    def _flush(self) -> None:
        out, self._out = self._out, []
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))
