"""Topic routes for v2 clients: the name servers' route with every broker's v2 endpoint.

The name servers know each broker's address (its mqcluster.v1 port), not its v2 port: a
broker answers its `grpcProxyAddr` in its runtime table (admin GetRuntimeInfo), which is
asked once per broker address and kept for a while. A broker without a name server (alone)
answers from its own topic table.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import TYPE_CHECKING

import grpc

from broker.registration import CHANNEL_OPTIONS
from common.constants import MASTER_ID, PERM_READ, PERM_WRITE
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc
from mqproto.v2 import definition_pb2 as D
from proxy.convert import V2Error
from remoting.tls import ClientTls, aio_channel

if TYPE_CHECKING:
    from broker.context import BrokerContext

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 3.0
ENDPOINT_TTL_S = 30.0  # a broker's v2 address is asked again after this long


@dataclasses.dataclass(frozen=True)
class BrokerQueues:
    """One broker group's queues of a topic, served by its master at `v2_addr`."""

    broker_name: str
    v2_addr: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


def permission(perm: int, readable: bool, writable: bool) -> int:
    r = readable and bool(perm & PERM_READ)
    w = writable and bool(perm & PERM_WRITE)
    if r and w:
        return D.READ_WRITE
    if r:
        return D.READ
    if w:
        return D.WRITE
    return D.NONE


class RouteService:
    def __init__(self, broker: BrokerContext, tls: ClientTls | None = None) -> None:
        """`tls`: how to reach name servers and brokers when they serve TLS (tlsEnable)."""
        self.broker = broker
        self.tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._v2_addrs: dict[str, tuple[float, str]] = {}  # broker addr -> (when, v2 addr)

    def _channel(self, addr: str) -> grpc.aio.Channel:
        channel = self._channels.get(addr)
        if channel is None:
            # The broker's reconnect backoff (200 ms - 2 s) for name servers and brokers.
            channel = self._channels[addr] = aio_channel(addr, self.tls, CHANNEL_OPTIONS)
        return channel

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    async def topic_route(self, topic: str) -> list[BrokerQueues]:
        """The topic's queues per broker group with a master that serves v2."""
        broker = self.broker
        namesrvs = broker.config.namesrv_addr_list
        if not namesrvs:
            return self._local_route(topic)
        route, last_error = None, ""
        for addr in namesrvs:
            stub = namesrv_pb2_grpc.NamesrvServiceStub(self._channel(addr))
            try:
                answer = await stub.GetRouteInfoByTopic(
                    namesrv_pb2.GetRouteInfoByTopicRequest(topic=topic), timeout=CALL_TIMEOUT_S)
            except grpc.aio.AioRpcError as e:
                last_error = f"name server {addr}: {e.code().name} {e.details()}"
                continue
            if answer.status.code == common_pb2.TOPIC_NOT_EXIST:
                raise V2Error(D.TOPIC_NOT_FOUND,
                              f"topic {topic} does not exist in the cluster: create it first "
                              "(mqadmin updateTopic -t TOPIC -c CLUSTER)")
            if answer.status.code != common_pb2.SUCCESS:
                last_error = f"name server {addr}: {answer.status.remark}"
                continue
            route = answer.topic_route_data
            break
        if route is None:
            raise V2Error(D.INTERNAL_SERVER_ERROR,
                          f"no name server answered the route of {topic}: {last_error}")
        masters = {b.broker_name: b.broker_addrs.get(MASTER_ID, "") for b in route.broker_datas}
        found = await asyncio.gather(*(self._v2_addr(masters.get(q.broker_name, ""))
                                       for q in route.queue_datas))
        result = []
        for q, v2_addr in zip(route.queue_datas, found, strict=True):
            if v2_addr:
                result.append(BrokerQueues(q.broker_name, v2_addr, q.read_queue_nums,
                                           q.write_queue_nums, q.perm))
        if not result:
            raise V2Error(D.INTERNAL_SERVER_ERROR,
                          f"no master of the brokers of {topic} serves the v2 protocol now")
        return result

    def _local_route(self, topic: str) -> list[BrokerQueues]:
        broker = self.broker
        config = broker.topics.get(topic)
        if config is None:
            raise V2Error(D.TOPIC_NOT_FOUND, f"topic {topic} does not exist on this broker")
        perm = config.perm & broker.config.broker_permission
        return [BrokerQueues(broker.config.broker_name, broker.addresses.grpc_proxy_addr,
                             config.read_queue_nums, config.write_queue_nums, perm)]

    async def _v2_addr(self, broker_addr: str) -> str:
        """A master's v2 address ('' when it has none or does not answer)."""
        if not broker_addr:
            return ""
        if broker_addr == self.broker.addresses.broker_addr:
            return self.broker.addresses.grpc_proxy_addr
        now = time.monotonic()
        cached = self._v2_addrs.get(broker_addr)
        if cached is not None and now - cached[0] < ENDPOINT_TTL_S:
            return cached[1]
        stub = admin_pb2_grpc.AdminServiceStub(self._channel(broker_addr))
        try:
            info = await stub.GetRuntimeInfo(admin_pb2.GetRuntimeInfoRequest(),
                                             timeout=CALL_TIMEOUT_S)
            addr = info.table.get("grpcProxyAddr", "")
        except grpc.aio.AioRpcError as e:
            log.warning("broker %s did not say its v2 address: %s", broker_addr, e.code().name)
            return cached[1] if cached is not None else ""
        self._v2_addrs[broker_addr] = (now, addr)
        return addr
