"""The broker's calls to the name servers (RocketMQ's BrokerOuterAPI): register with every
name server (at start, every 30 s, after a topic change) and unregister on a clean stop."""

from __future__ import annotations

import asyncio
import logging

import grpc

from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger(__name__)


class BrokerOuterAPI:
    """One gRPC channel per name server; every call goes to all of them at once."""

    def __init__(self, namesrv_addrs: list[str], timeout_s: float) -> None:
        self.namesrv_addrs = list(namesrv_addrs)
        self.timeout_s = timeout_s
        self._stubs: dict[str, namesrv_pb2_grpc.NamesrvServiceStub] = {}
        self._channels: list[grpc.aio.Channel] = []
        self._failing: set[str] = set()  # name servers whose last call failed

    def _stub(self, addr: str) -> namesrv_pb2_grpc.NamesrvServiceStub:
        stub = self._stubs.get(addr)
        if stub is None:
            channel = grpc.aio.insecure_channel(addr)
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

    async def close(self) -> None:
        for channel in self._channels:
            await channel.close()
        self._channels.clear()
        self._stubs.clear()
