"""The client's I/O thread and its gRPC channels.

All network work of producers and consumers (route refreshes, heartbeats, async sends,
pulls, rebalancing) runs on one asyncio event loop in a daemon thread shared by every client
of the process; people call the sync API from their own threads. Sync sends skip the hop to
that thread: they use blocking connections on the caller's thread (lower latency, and no
contention with the loop thread for the GIL).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc

from acl.grpc_auth import ClientAuth
from mqclient.message import MQClientError
from mqclient.send_channel import BlockingSendConnections, SendChannel, SendChannelClosed
from mqproto import messaging_pb2, messaging_pb2_grpc, namesrv_pb2_grpc
from remoting.tls import ClientTls, aio_channel, grpc_channel

T = TypeVar("T")
log = logging.getLogger(__name__)
# gRPC codes of a call refused by access control (acl/): credentials or permission, which
# no retry elsewhere changes.
ACCESS_REFUSED = frozenset({grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.enable_retries", 0),
    # A restarted broker is reached again within a second or two (gRPC's default backoff
    # grows to 120 s, and every send in between fails at once with UNAVAILABLE).
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    # Each client its own connections: gRPC otherwise shares a connection among every channel
    # of the process with the same address and options, and a new client inherits another's
    # reconnect backoff (its first call fails at once with UNAVAILABLE although the server
    # is up, e.g. a name server restarted at the same address).
    ("grpc.use_local_subchannel_pool", 1),
]

CHANNEL_CLOSE_TIMEOUT_S = 5.0
# After a broker's send channel failed (refused or reset: e.g. the broker at
# sendChannelMaxConnections or out of file descriptors, or restarting), sends to it go by
# gRPC for this long, then the channel is tried again.
SEND_CHANNEL_FALLBACK_S = 10.0


class ClientLoop:
    """An event loop running forever in a daemon thread."""

    _shared: ClientLoop | None = None
    _shared_lock = threading.Lock()

    def __init__(self, name: str = "mqclient-io") -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    @classmethod
    def shared(cls) -> ClientLoop:
        with cls._shared_lock:
            if cls._shared is None or not cls._shared.thread.is_alive():
                cls._shared = cls()
            return cls._shared

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs `coro` on the loop and waits for it; not callable from the loop itself."""
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("a blocking client call was made on the client's I/O thread "
                               "(inside an async listener or callback); await the async "
                               "variant instead")
        return self.submit(coro).result(timeout)


async def cancel_and_wait(tasks: list[asyncio.Task[Any]], timeout_s: float, what: str) -> bool:
    """Cancels `tasks` and waits for them at most `timeout_s` (shutdown paths: a task that
    ignores its cancellation is logged and abandoned, never waited for without a bound).
    True when all ended."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return True
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    if pending:
        log.error("%s: %d tasks did not end within %.1f s of their cancellation; abandoned: "
                  "%s", what, len(pending), timeout_s, [t.get_coro() for t in pending])
    return not pending


# While a retry waits for a refusing broker to take connections, how often it looks whether
# its group's route names another master meanwhile (a failover: controller mode).
READY_POLL_S = 0.02


class Channels:
    """One client's channels by address. The aio ones belong to the client loop (create and
    use them there only); the sync ones may be used from any thread."""

    def __init__(self, auth: ClientAuth | None = None, tls: ClientTls | None = None) -> None:
        # Access control (acl/): every call signed with these credentials; None: unsigned.
        self.auth = auth
        self.tls = tls  # TLS to brokers and name servers (their CA); None: plaintext
        self._aio: dict[str, grpc.aio.Channel] = {}
        self._sync: dict[str, grpc.Channel] = {}
        self._sync_stubs: dict[str, messaging_pb2_grpc.MessagingServiceStub] = {}
        self._aio_stubs: dict[str, messaging_pb2_grpc.MessagingServiceStub] = {}
        # Brokers' send channels, by the broker's gRPC address: where each listens ("": the
        # broker has none), the loop's connections, and blocking ones for sync sends.
        self._send_addresses: dict[str, str] = {}
        self._send_channels: dict[str, SendChannel] = {}
        self._opening: dict[str, asyncio.Future[SendChannel | None]] = {}
        self._send_channel_failed: dict[str, float] = {}  # until when gRPC is used instead
        self._closing: set[asyncio.Future[None]] = set()  # channels of reset brokers
        self._ssl = tls.ssl_context() if tls is not None else None  # the send channel's
        self.blocking = BlockingSendConnections(auth, self._ssl)
        self._lock = threading.Lock()
        self.closed = False

    def _aio_channel(self, address: str) -> grpc.aio.Channel:
        channel = self._aio.get(address)
        if channel is None:
            channel = self._aio[address] = aio_channel(
                address, self.tls, options=CHANNEL_OPTIONS,
                interceptors=self.auth.aio_interceptors() if self.auth else None)
        return channel

    def messaging(self, address: str) -> messaging_pb2_grpc.MessagingServiceStub:
        """The asyncio stub of a broker (on the client loop only)."""
        stub = self._aio_stubs.get(address)
        if stub is None:
            stub = self._aio_stubs[address] = messaging_pb2_grpc.MessagingServiceStub(
                self._aio_channel(address))
        return stub

    def namesrv(self, address: str) -> namesrv_pb2_grpc.NamesrvServiceStub:
        return namesrv_pb2_grpc.NamesrvServiceStub(self._aio_channel(address))

    def wait_ready(self, address: str, give_up: Callable[[], bool], timeout_s: float) -> bool:
        """Blocks until the blocking channel to `address` connects (True), or `give_up()`
        says to stop waiting (asked every READY_POLL_S), or `timeout_s` passed (False)."""
        self.sync_messaging(address)
        future = grpc.channel_ready_future(self._sync[address])
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                left = deadline - time.monotonic()
                try:
                    future.result(timeout=max(0.0, min(READY_POLL_S, left)))
                    return True
                except grpc.FutureTimeoutError:
                    pass
                if give_up() or time.monotonic() >= deadline:
                    return False
        finally:
            future.cancel()

    async def wait_ready_async(self, address: str, give_up: Callable[[], bool],
                               timeout_s: float) -> bool:
        """wait_ready for the client loop's channel to `address`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        ready = asyncio.ensure_future(self._aio_channel(address).channel_ready())
        try:
            while True:
                left = deadline - loop.time()
                done, _ = await asyncio.wait({ready}, timeout=max(0.0, min(READY_POLL_S,
                                                                           left)))
                if done:
                    return True
                if give_up() or loop.time() >= deadline:
                    return False
        finally:
            ready.cancel()

    def sync_messaging(self, address: str) -> messaging_pb2_grpc.MessagingServiceStub:
        """The blocking stub of a broker (any thread)."""
        stub = self._sync_stubs.get(address)
        if stub is not None:
            return stub
        with self._lock:
            if self.closed:
                raise RuntimeError("the client is shut down")
            stub = self._sync_stubs.get(address)
            if stub is None:
                channel = self._sync[address] = grpc_channel(
                    address, self.tls, options=CHANNEL_OPTIONS)
                signed = self.auth.intercept(channel) if self.auth else channel
                stub = self._sync_stubs[address] = messaging_pb2_grpc.MessagingServiceStub(
                    signed)
            return stub

    def known_send_address(self, address: str) -> str | None:
        """Where the broker at `address` has its send channel ("": none), if known (any
        thread)."""
        if self._falling_back(address):
            return ""
        return self._send_addresses.get(address)

    def _falling_back(self, address: str) -> bool:
        until = self._send_channel_failed.get(address)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        self._send_channel_failed.pop(address, None)
        return False

    def send_channel_failed(self, address: str) -> None:
        """A send over the broker's send channel failed without an answer (any thread):
        its sends go by gRPC for SEND_CHANNEL_FALLBACK_S (said once per fallback)."""
        if not self._falling_back(address):
            log.warning("send channel of broker %s failed: sending by gRPC for %.0f s",
                        address, SEND_CHANNEL_FALLBACK_S)
        self._send_channel_failed[address] = time.monotonic() + SEND_CHANNEL_FALLBACK_S

    async def send_channel_address(self, address: str, timeout: float) -> str:
        """Where the broker at `address` has its send channel; "" when it has none (then
        send by gRPC). SendChannelClosed when the broker cannot be asked (loop)."""
        if self._falling_back(address):
            return ""
        known = self._send_addresses.get(address)
        if known is not None:
            return known
        try:
            r = await self.messaging(address).GetSendChannel(
                messaging_pb2.GetSendChannelRequest(), timeout=timeout)
        except grpc.RpcError as e:
            if e.code() in ACCESS_REFUSED:  # type: ignore[attr-defined]  (no retry)
                raise MQClientError("NO_PERMISSION", f"{address}: {e.code().name}: "  # type: ignore[attr-defined]
                                    f"{e.details()}") from None  # type: ignore[attr-defined]
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:  # type: ignore[attr-defined]
                raise SendChannelClosed(f"{address}: {e.code().name}") from None  # type: ignore[attr-defined]
            r = messaging_pb2.GetSendChannelResponse()  # a broker without one
        self._send_addresses[address] = r.address
        return r.address

    async def send_channel(self, address: str, timeout: float) -> SendChannel | None:
        """The connected send channel of the broker at `address`, None when it has none
        (loop). SendChannelClosed when it cannot be reached."""
        channel = self._send_channels.get(address)
        if channel is not None and not channel.closed:
            return channel
        opening = self._opening.get(address)
        if opening is None:
            opening = self._opening[address] = asyncio.ensure_future(
                self._open_send_channel(address, timeout))
            opening.add_done_callback(lambda _: self._opening.pop(address, None))
        return await asyncio.shield(opening)

    async def _open_send_channel(self, address: str, timeout: float) -> SendChannel | None:
        target = await self.send_channel_address(address, timeout)
        if not target:
            return None
        channel = await SendChannel.connect(target, timeout, self.auth, self._ssl)
        if self.closed:
            channel.close()
            raise SendChannelClosed("the client is shut down")
        self._send_channels[address] = channel
        return channel

    def reset(self, address: str) -> None:
        """The broker at `address` came back (loop): its channels start afresh. A gRPC
        channel that failed to connect while it was down waits out its reconnect backoff
        (up to 2 s) before trying again, and sends after a send channel failure went by
        gRPC for SEND_CHANNEL_FALLBACK_S: both are dropped, the send channel asked anew.
        Calls still waiting on the old channels fail (and are retried)."""
        self._send_channel_failed.pop(address, None)
        self.forget_send_address(address)
        send_channel = self._send_channels.pop(address, None)
        if send_channel is not None:
            send_channel.close()
        with self._lock:
            sync = self._sync.pop(address, None)
            self._sync_stubs.pop(address, None)
        if sync is not None:
            sync.close()
        self._aio_stubs.pop(address, None)
        aio = self._aio.pop(address, None)
        if aio is not None:
            task = asyncio.ensure_future(aio.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def forget_send_address(self, address: str) -> None:
        """After a failed send (any thread): the next one asks the broker where its channel
        is again (it may have restarted elsewhere, or with one). The loop's connection
        needs nothing: one that failed is closed, and send_channel opens a new one."""
        target = self._send_addresses.pop(address, None)
        if target:
            self.blocking.forget(target)

    async def close(self) -> None:
        """On the client loop: closes every channel."""
        with self._lock:
            self.closed = True
            sync = list(self._sync.values())
            self._sync.clear()
            self._sync_stubs.clear()
        for channel in sync:
            channel.close()
        for send_channel in self._send_channels.values():
            send_channel.close()
        self._send_channels.clear()
        self.blocking.close()
        aio = list(self._aio.values())
        self._aio.clear()
        self._aio_stubs.clear()
        # grace=None cancels the calls in flight at once.
        for achannel in aio:
            try:
                async with asyncio.timeout(CHANNEL_CLOSE_TIMEOUT_S):
                    await achannel.close()
            except TimeoutError:
                log.error("a gRPC channel did not close within %s s; abandoned",
                          CHANNEL_CLOSE_TIMEOUT_S)
