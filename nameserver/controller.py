"""NamesrvController: the route tables, their gRPC server and the scan of silent brokers.

With `remoting` (the default) the listen port serves RocketMQ 4.x clients too: a front on
it (remoting/shared_port.py) serves remoting connections itself (nameserver/remoting.py)
and relays gRPC ones, told apart by their first bytes, to the gRPC server on a loopback
port of its own. Without it the gRPC server listens on the port itself."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType

import grpc

from acl.grpc_auth import NAMESRV_BROKER_METHODS, ServerAuth
from mqproto import namesrv_pb2_grpc
from nameserver.constants import (
    DEFAULT_LISTEN,
    DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
    DEFAULT_MAX_TOPIC_QUEUE_NUMS,
    SCAN_NOT_ACTIVE_BROKER_INITIAL_DELAY_S,
    SCAN_NOT_ACTIVE_BROKER_INTERVAL_S,
    SHUTDOWN_GRACE_S,
)
from nameserver.links import broker_links
from nameserver.metrics import NamesrvMetrics
from nameserver.processor import NamesrvServicer
from nameserver.remoting import NamesrvRemotingProcessor
from nameserver.routeinfo import Clock, RouteInfoManager, wall_clock_ms
from remoting.connection import RemotingLimits, RemotingServer
from remoting.serving import add_servicer, watch_loop_stalls
from remoting.shared_port import SharedPort
from remoting.tls import ServerTls

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
"""Waits the given number of seconds; tests pass a fake that never really waits."""


def split_host_port(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[::1]:port"`` -> (host, port); ValueError when malformed."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port out of range in {address!r}")
    return host, port


class NamesrvController:
    """One name server. Several run side by side and never talk to each other.

    ``clock`` (ms) stamps registrations and drives expiry; ``sleep`` paces the scan task
    (first run after 5 s, then every 10 s).
    """

    def __init__(
        self,
        listen: str = DEFAULT_LISTEN,
        *,
        clock: Clock = wall_clock_ms,
        sleep: Sleep = asyncio.sleep,
        max_topic_queue_nums: int = DEFAULT_MAX_TOPIC_QUEUE_NUMS,
        max_receive_message_bytes: int = DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
        metrics_port: int = 0,
        cluster_key: str = "",
        tls: ServerTls | None = None,
        remoting: bool = True,
    ) -> None:
        self.listen = listen
        self.remoting = remoting
        self.front: SharedPort | None = None
        self.max_topic_queue_nums = max_topic_queue_nums
        self.max_receive_message_bytes = max_receive_message_bytes
        self.route_info_manager = RouteInfoManager(clock)
        # Prometheus /metrics on the listen host: 0 = off, -1 = any free port.
        self.metrics_port = metrics_port
        self.metrics: NamesrvMetrics | None = None
        if metrics_port:
            self.metrics = NamesrvMetrics(self.route_info_manager, clock)
        # Brokers prove the cluster key to register (acl/): a stranger cannot.
        self.auth: ServerAuth | None = None
        if cluster_key:
            self.auth = ServerAuth(None, cluster_key, protected=NAMESRV_BROKER_METHODS)
        self.tls = tls  # gRPC over TLS; None: plaintext
        self.metrics_address = ""
        """``host:port`` of /metrics; empty when off."""
        self._sleep = sleep
        self._server: grpc.aio.Server | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self._stall_watch: asyncio.Task[None] | None = None
        self.listen_address = ""
        """``host:port`` actually bound (the port is chosen when ``listen`` asks for 0)."""

    async def start(self) -> str:
        """Bind, serve and start the scan task; returns the bound ``host:port``."""
        host, _ = split_host_port(self.listen)
        # No SO_REUSEPORT: a second name server on a taken port must fail, not share it.
        interceptors: list[grpc.aio.ServerInterceptor] = (
            [self.metrics.interceptor] if self.metrics is not None else [])
        if self.auth is not None:
            interceptors.append(self.auth)
        server = grpc.aio.server(options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", self.max_receive_message_bytes),
            ("grpc.max_send_message_length", -1),
        ], interceptors=interceptors)
        # Requests that do not decode answer INVALID_ARGUMENT (one log line), not UNKNOWN.
        add_servicer(server, namesrv_pb2_grpc.add_NamesrvServiceServicer_to_server,
                     NamesrvServicer(self.route_info_manager, self.max_topic_queue_nums,
                                     self.max_receive_message_bytes), log)
        grpc_listen = "127.0.0.1:0" if self.remoting else self.listen
        try:
            port = (server.add_secure_port(grpc_listen, self.tls.grpc_credentials())
                    if self.tls is not None else server.add_insecure_port(grpc_listen))
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {grpc_listen}: {exc}") from exc
        if port == 0:
            raise OSError(f"cannot listen on {grpc_listen}")
        if self.remoting:
            # 4.x clients ask for routes every 30 s: one silent for 120 s is gone.
            front = SharedPort(RemotingServer(NamesrvRemotingProcessor(self.route_info_manager),
                                              RemotingLimits(idle_timeout_s=120.0)),
                               "127.0.0.1", port)
            try:
                port = await front.start(host.strip("[]"), split_host_port(self.listen)[1])
            except OSError as exc:
                await server.stop(None)
                raise OSError(f"cannot listen on {self.listen}: {exc}") from exc
            self.front = front
        if self.metrics is not None:
            try:
                metrics_port = await self.metrics.start(host, self.metrics_port)
            except OSError as exc:
                raise OSError(f"cannot listen on metrics port {self.metrics_port}: "
                              f"{exc}") from exc
            self.metrics_address = f"{host}:{metrics_port}"
            log.info("metrics served on http://%s/metrics", self.metrics_address)
        await server.start()
        self._server = server
        self.listen_address = f"{host}:{port}"
        self._scan_task = asyncio.create_task(
            self.scan_not_active_broker_loop(), name="scanNotActiveBroker"
        )
        self._stall_watch = watch_loop_stalls(log)
        log.info("name server listening on %s (%s)", self.listen_address,
                 "gRPC and RocketMQ 4.x remoting" if self.remoting else "gRPC")
        return self.listen_address

    async def scan_not_active_broker_loop(self) -> None:
        await self._sleep(SCAN_NOT_ACTIVE_BROKER_INITIAL_DELAY_S)
        while True:
            try:
                self.route_info_manager.scan_not_active_broker()
            except Exception:
                log.exception("scanNotActiveBroker failed; next scan in %ss",
                              SCAN_NOT_ACTIVE_BROKER_INTERVAL_S)
            await self._sleep(SCAN_NOT_ACTIVE_BROKER_INTERVAL_S)

    async def shutdown(self, grace: float = SHUTDOWN_GRACE_S) -> None:
        """Stop the scan task, then the server (in-flight RPCs get ``grace`` seconds)."""
        if self._stall_watch is not None:
            self._stall_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stall_watch
            self._stall_watch = None
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
            self._scan_task = None
        if self._server is not None:
            broker_links(self.route_info_manager).end_all()  # the streams end, nobody leaves
            await self._server.stop(grace)
            self._server = None
            log.info("name server on %s stopped", self.listen_address)
        if self.front is not None:
            await self.front.stop()
            self.front = None
        if self.metrics is not None:
            await self.metrics.stop()

    async def __aenter__(self) -> NamesrvController:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()
