"""The broker's calls to the name servers (RocketMQ's BrokerOuterAPI): register with every
name server (at start, every 30 s, after a topic change) and unregister on a clean stop.

While the broker runs it also keeps a link (a `WatchBrokerLink` stream) open to every name
server over the channel it registers on: the name server drops the broker at once when that
connection closes (the process exited), and the link coming back up after a name server
outage or restart has the broker register at once instead of at its next period.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger(__name__)

# The clients' reconnect backoff (mqclient/loop.py): a name server that comes back is
# reached within 2 s (gRPC's default backoff grows to 120 s, and every call in between fails
# at once with UNAVAILABLE).
INITIAL_RECONNECT_BACKOFF_MS = 200
MAX_RECONNECT_BACKOFF_MS = 2000
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", INITIAL_RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
]


class BrokerOuterAPI:
    """One gRPC channel per name server; every call goes to all of them at once."""

    def __init__(self, namesrv_addrs: list[str], timeout_s: float) -> None:
        self.namesrv_addrs = list(namesrv_addrs)
        self.timeout_s = timeout_s
        self._stubs: dict[str, namesrv_pb2_grpc.NamesrvServiceStub] = {}
        self._channels: list[grpc.aio.Channel] = []
        self._failing: set[str] = set()  # name servers whose last call failed
        self._links: dict[str, asyncio.Task[None]] = {}
        self.linked: set[str] = set()  # name servers whose link is up

    def _stub(self, addr: str) -> namesrv_pb2_grpc.NamesrvServiceStub:
        stub = self._stubs.get(addr)
        if stub is None:
            channel = grpc.aio.insecure_channel(addr, options=CHANNEL_OPTIONS)
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
        try:
            response = await self._stub(addr).RegisterBroker(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as e:
            self._failed(addr, f"registerBroker to name server {addr} failed: "
                               f"{e.code().name} {e.details()}")
            return None
        if response.status.code != common_pb2.SUCCESS:
            self._failed(addr, f"registerBroker to name server {addr} refused: "
                               f"{common_pb2.ResponseCode.Name(response.status.code)} "
                               f"{response.status.remark}")
            return None
        if addr in self._failing:
            self._failing.discard(addr)
            log.info("registerBroker to name server %s OK again", addr)
        else:
            log.debug("registerBroker to name server %s OK", addr)
        return response

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
    def start_links(self, broker_addr: str, on_back: Callable[[str], None]) -> None:
        """Keeps a link open to every name server; `on_back(addr)` runs (on the loop) each
        time a link comes up after it was down, or when the last registration there failed."""
        for addr in self.namesrv_addrs:
            if addr not in self._links:
                self._links[addr] = asyncio.create_task(
                    self._link_loop(addr, broker_addr, on_back), name=f"namesrvLink-{addr}")

    async def _link_loop(self, addr: str, broker_addr: str,
                         on_back: Callable[[str], None]) -> None:
        request = namesrv_pb2.WatchBrokerLinkRequest(broker_addr=broker_addr)
        delay = INITIAL_RECONNECT_BACKOFF_MS / 1000
        was_down = False
        while True:
            try:
                call = self._stub(addr).WatchBrokerLink(request, wait_for_ready=True)
                async for _event in call:
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
            was_down = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RECONNECT_BACKOFF_MS / 1000)

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
