"""The broker's calls to the name servers (RocketMQ's BrokerOuterAPI): register with every
name server (at start, every 30 s, after a topic change) and unregister on a clean stop.

A registration carries the whole topic table (compressed) only to a name server that does
not hold the broker's current data version; to the others it is a keep-alive without the
table (RocketMQ 4.9 skips unchanged bodies too). A name server that answers body_required
(it restarted, or lost the broker) gets the table at once. A name server that refuses a
registration (INVALID_PARAMETER, a table over its receive limit) is logged as an ERROR
that says the broker's topics are not routable there.

While the broker runs it also keeps a link (a `WatchBrokerLink` stream) open to every name
server over the channel it registers on: the name server drops the broker at once when that
connection closes (the process exited), and the link coming back up after a name server
outage or restart has the broker register at once instead of at its next period. On a
slave's link the name server also says when the group's master registers anew (restarted):
the slave links to it at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from acl.grpc_auth import ClientAuth
from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from remoting.tls import ClientTls, aio_channel

log = logging.getLogger(__name__)

# The clients' reconnect backoff (mqclient/loop.py): a name server that comes back is
# reached within 2 s (gRPC's default backoff grows to 120 s, and every call in between fails
# at once with UNAVAILABLE).
INITIAL_RECONNECT_BACKOFF_MS = 200
MAX_RECONNECT_BACKOFF_MS = 2000
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", INITIAL_RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
    ("grpc.max_send_message_length", -1),
    ("grpc.use_local_subchannel_pool", 1),  # as the clients' (mqclient/loop.py)
]
# gRPC codes of a name server that received the registration and would not take it (a
# server-side size limit answers RESOURCE_EXHAUSTED): retrying the same body cannot help.
REFUSAL_CODES = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT,
                           # a name server with --cluster-key, and a wrong or no clusterKey
                           grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED})


class RegistrationRefused(RuntimeError):
    """Every name server refused the broker's registration."""


class BrokerOuterAPI:
    """One gRPC channel per name server; every call goes to all of them at once."""

    def __init__(self, namesrv_addrs: list[str], timeout_s: float,
                 auth: ClientAuth | None = None, tls: ClientTls | None = None) -> None:
        self.namesrv_addrs = list(namesrv_addrs)
        self.auth = auth  # the cluster key's signature on every call
        self.tls = tls  # TLS to the name servers (the broker's tlsEnable)
        self.timeout_s = timeout_s
        self._stubs: dict[str, namesrv_pb2_grpc.NamesrvServiceStub] = {}
        self._channels: list[grpc.aio.Channel] = []
        self._failing: set[str] = set()  # name servers whose last call failed
        self._links: dict[str, asyncio.Task[None]] = {}
        self.linked: set[str] = set()  # name servers whose link is up
        # Per name server: the data version it took with the whole table, so the next
        # registration with that version is a keep-alive.
        self.accepted: dict[str, tuple[int, int]] = {}
        self.refused: dict[str, str] = {}  # name servers whose last answer was a refusal
        self.full_bodies_sent = 0
        self.keep_alives_sent = 0

    def _stub(self, addr: str) -> namesrv_pb2_grpc.NamesrvServiceStub:
        stub = self._stubs.get(addr)
        if stub is None:
            channel = aio_channel(
                addr, self.tls, options=CHANNEL_OPTIONS,
                interceptors=self.auth.aio_interceptors() if self.auth else None)
            self._channels.append(channel)
            stub = self._stubs[addr] = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        return stub

    async def register_broker_all(self, request: namesrv_pb2.RegisterBrokerRequest
                                  ) -> list[namesrv_pb2.RegisterBrokerResponse]:
        """Registers with every name server; returns the answers of those that succeeded."""
        answers = await asyncio.gather(*(self._register(a, request) for a in self.namesrv_addrs))
        return [a for a in answers if a is not None]

    async def _register(self, addr: str, request: namesrv_pb2.RegisterBrokerRequest
                        ) -> namesrv_pb2.RegisterBrokerResponse | None:
        version = (request.data_version.timestamp, request.data_version.counter)
        stub = self._stub(addr)
        response: namesrv_pb2.RegisterBrokerResponse | None = None
        try:
            if self.accepted.get(addr) == version:
                response = await stub.RegisterBroker(keep_alive(request), timeout=self.timeout_s)
                self.keep_alives_sent += 1
                if response.body_required:
                    log.info("name server %s asks for the topic table again", addr)
                    self.accepted.pop(addr, None)
                    response = None
            if response is None:
                self.full_bodies_sent += 1
                response = await stub.RegisterBroker(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as e:
            self.accepted.pop(addr, None)
            if e.code() in REFUSAL_CODES:
                self._refused(addr, f"{e.code().name} {e.details()}", request.ByteSize())
            else:
                self._failed(addr, f"registerBroker to name server {addr} failed: "
                                   f"{e.code().name} {e.details()}")
            return None
        if response.status.code != common_pb2.SUCCESS:
            self.accepted.pop(addr, None)
            self._refused(addr, f"{common_pb2.ResponseCode.Name(response.status.code)} "
                                f"{response.status.remark}", request.ByteSize())
            return None
        self.accepted[addr] = version
        if self.refused.pop(addr, None) is not None:
            log.info("registerBroker to name server %s accepted again", addr)
            self._failing.discard(addr)
        if addr in self._failing:
            self._failing.discard(addr)
            log.info("registerBroker to name server %s OK again", addr)
        else:
            log.debug("registerBroker to name server %s OK", addr)
        return response

    def _refused(self, addr: str, why: str, request_bytes: int) -> None:
        first = self.refused.get(addr) != why
        self.refused[addr] = why
        self._failing.add(addr)
        # The size hint only where the name server said the request was too large.
        hint = (" (for a size limit: raise its --max-receive-mib)"
                if why.startswith("RESOURCE_EXHAUSTED") else "")
        (log.error if first else log.debug)(
            "registerBroker REFUSED by name server %s: %s (request of %d bytes); this "
            "broker's topics are NOT routable through that name server until it takes a "
            "registration%s", addr, why, request_bytes, hint)

    def _failed(self, addr: str, message: str) -> None:
        # Warn on the first failure of a streak; the rest at debug level.
        if addr in self._failing:
            log.debug("%s", message)
        else:
            self._failing.add(addr)
            log.warning("%s", message)

    async def unregister_broker_all(self, request: namesrv_pb2.UnregisterBrokerRequest) -> int:
        """Unregisters from every name server; returns how many confirmed."""
        async def one(addr: str) -> bool:
            try:
                await self._stub(addr).UnregisterBroker(request, timeout=self.timeout_s)
            except grpc.aio.AioRpcError as e:
                log.warning("unregisterBroker from name server %s failed: %s %s", addr,
                            e.code().name, e.details())
                return False
            log.info("unregisterBroker from name server %s OK", addr)
            return True

        return sum(await asyncio.gather(*(one(a) for a in self.namesrv_addrs)))

    # -- links -----------------------------------------------------------------------------
    def start_links(self, broker_addr: str, on_back: Callable[[str], None],
                    on_master: Callable[[str, str], None] | None = None) -> None:
        """Keeps a link open to every name server; `on_back(addr)` runs (on the loop) each
        time a link comes up after it was down, or when the last registration there failed;
        `on_master(master_addr, ha_server_addr)` when a name server says the group's master
        registered anew."""
        for addr in self.namesrv_addrs:
            if addr not in self._links:
                self._links[addr] = asyncio.create_task(
                    self._link_loop(addr, broker_addr, on_back, on_master),
                    name=f"namesrvLink-{addr}")

    async def _link_loop(self, addr: str, broker_addr: str, on_back: Callable[[str], None],
                         on_master: Callable[[str, str], None] | None) -> None:
        request = namesrv_pb2.WatchBrokerLinkRequest(broker_addr=broker_addr)
        delay = INITIAL_RECONNECT_BACKOFF_MS / 1000
        was_down = False
        while True:
            try:
                call = self._stub(addr).WatchBrokerLink(request, wait_for_ready=True)
                async for event in call:
                    if event.master_addr:
                        if on_master is not None:
                            on_master(event.master_addr, event.ha_server_addr)
                        continue
                    self.linked.add(addr)
                    delay = INITIAL_RECONNECT_BACKOFF_MS / 1000
                    if was_down or addr in self._failing:
                        log.info("name server %s is reachable again: registering now", addr)
                        on_back(addr)
                    was_down = False
                reason = "the name server ended it"
            except grpc.aio.AioRpcError as e:
                reason = f"{e.code().name} {e.details()}"
            if addr in self.linked:
                log.info("link to name server %s lost: %s", addr, reason)
            self.linked.discard(addr)
            self.accepted.pop(addr, None)  # it may come back without our table
            was_down = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RECONNECT_BACKOFF_MS / 1000)

    @property
    def failing(self) -> bool:
        """The last registration with some name server failed (not refused: it may pass)."""
        return bool(self._failing)

    def all_refused(self) -> bool:
        """Every name server answered the last registration with a refusal."""
        return bool(self.namesrv_addrs) and all(a in self.refused for a in self.namesrv_addrs)

    async def close(self) -> None:
        links = list(self._links.values())
        self._links.clear()
        for task in links:
            task.cancel()
        if links:
            await asyncio.gather(*links, return_exceptions=True)
        self.linked.clear()
        for channel in self._channels:
            await channel.close()
        self._channels.clear()
        self._stubs.clear()


def keep_alive(request: namesrv_pb2.RegisterBrokerRequest) -> namesrv_pb2.RegisterBrokerRequest:
    """`request` without its topic table: a registration that only says "still here, data
    version unchanged"."""
    return namesrv_pb2.RegisterBrokerRequest(
        cluster_name=request.cluster_name, broker_name=request.broker_name,
        broker_addr=request.broker_addr, broker_id=request.broker_id,
        ha_server_addr=request.ha_server_addr, data_version=request.data_version,
        remoting_addr=request.remoting_addr, body_omitted=True)
