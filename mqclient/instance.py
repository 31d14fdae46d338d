"""One producer's or consumer's link to the cluster (RocketMQ's MQClientInstance): its client
id, channels, route cache refreshed from the name servers, and heartbeats to the brokers."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Callable

import grpc

from mqclient.constants import (
    ADMIN_CALL_TIMEOUT_S,
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    HEARTBEAT_BROKER_INTERVAL_S,
    POLL_NAME_SERVER_INTERVAL_S,
)
from mqclient.loop import Channels, ClientLoop, cancel_and_wait
from mqclient.message import MessageQueue, MQClientError, code_name
from mqclient.route import BrokerGroup, NameServerClient, TopicRoute, parse_namesrv_addr
from mqproto import common_pb2, messaging_pb2
from mqproto.local_address import local_ip

log = logging.getLogger(__name__)
_instance_counter = itertools.count()


CLIENT_IP_ENV = "MQCLIENT_IP"  # overrides the address in client ids and message ids


def resolve_client_ip(namesrv_addrs: list[str], configured: str = "") -> str:
    """The client's address (RocketMQ's clientIP): `configured`, else $MQCLIENT_IP, else the
    local address of a socket connected to a name server."""
    return configured or os.environ.get(CLIENT_IP_ENV, "") or local_ip(namesrv_addrs)


def new_client_id(ip: str = "") -> str:
    """ip@pid#n: unique per client object, so several consumers of a group may share a
    process (RocketMQ's ip@instanceName)."""
    return f"{ip or local_ip()}@{os.getpid()}#{next(_instance_counter)}"


class ClientInstance:
    """Owned by one Producer or PushConsumer. Methods marked "loop" run on the client loop;
    `routes` may be read from any thread (entries are replaced, never changed)."""

    def __init__(self, namesrv_addr: str | list[str], *, producer_group: str = "",
                 consumer_group: str = "", loop: ClientLoop | None = None,
                 poll_name_server_interval_s: float = POLL_NAME_SERVER_INTERVAL_S,
                 heartbeat_interval_s: float = HEARTBEAT_BROKER_INTERVAL_S,
                 client_ip: str = "") -> None:
        namesrv_addrs = parse_namesrv_addr(namesrv_addr)
        self.client_ip = resolve_client_ip(namesrv_addrs, client_ip)
        self.client_id = new_client_id(self.client_ip)
        self.loop = loop or ClientLoop.shared()
        self.channels = Channels()
        self.namesrv = NameServerClient(namesrv_addrs, self.channels)
        self.producer_group = producer_group
        self.consumer_group = consumer_group
        self.subscriptions: dict[str, str] = {}  # topic -> tag expression (or SQL92)
        # topic -> the expression type of a subscription that is not by tags ("SQL92")
        self.expression_types: dict[str, str] = {}
        # broker address -> the status of its last heartbeat answer that was not SUCCESS
        self.heartbeat_refusals: dict[str, common_pb2.Status] = {}
        self.routes: dict[str, TopicRoute] = {}
        self.default_topic_queue_nums: int | None = None  # producers route new topics
        self.poll_name_server_interval_s = poll_name_server_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.route_listeners: list[Callable[[str, TopicRoute], None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.running = False

    # -- lifecycle (loop) ----------------------------------------------------------------------
    async def start(self) -> None:
        self.running = True
        self._tasks = [asyncio.create_task(self._periodic(self.update_all_routes,
                                                          self.poll_name_server_interval_s)),
                       asyncio.create_task(self._periodic(self.heartbeat_all,
                                                          self.heartbeat_interval_s))]

    async def shutdown(self) -> None:
        self.running = False
        await cancel_and_wait(self._tasks, ADMIN_CALL_TIMEOUT_S, f"client {self.client_id}")
        await self.unregister_all()
        await self.channels.close()

    async def _periodic(self, action: Callable[[], object], interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await action()  # type: ignore[misc]
            except Exception:
                log.exception("%s failed", getattr(action, "__name__", action))

    # -- routes (loop) -------------------------------------------------------------------------
    async def update_route(self, topic: str) -> TopicRoute | None:
        """Fetches the route of `topic`; for a topic no broker has yet, a producer routes by
        TBW102 (auto-create). None when there is no route."""
        data = await self.namesrv.get_route(topic)
        if data is not None:
            route = TopicRoute.from_proto(topic, data)
        elif self.default_topic_queue_nums is not None:
            default = await self.namesrv.get_route(AUTO_CREATE_TOPIC_KEY_TOPIC)
            if default is None:
                return self.routes.get(topic)
            route = TopicRoute.from_proto(topic, default, self.default_topic_queue_nums)
        else:
            return self.routes.get(topic)
        old = self.routes.get(topic)
        if not route.same_as(old):
            self.routes[topic] = route
            log.info("route of %s changed: %s", topic,
                     {b.broker_name: b.addrs for b in route.brokers.values()})
            for listener in self.route_listeners:
                listener(topic, route)
        return route

    async def update_all_routes(self) -> None:
        for topic in list({*self.routes, *self.subscriptions}):
            try:
                await self.update_route(topic)
            except MQClientError as e:
                log.warning("route of %s not refreshed: %s", topic, e)

    def broker_group(self, mq: MessageQueue) -> BrokerGroup | None:
        """The broker group serving `mq` in the cached route of its topic."""
        route = self.routes.get(mq.topic)
        return route.brokers.get(mq.broker_name) if route is not None else None

    def master_addr(self, broker_name: str) -> str | None:
        """The master of a broker group, from any cached route that has it."""
        for route in list(self.routes.values()):
            group = route.brokers.get(broker_name)
            if group is not None and group.master_addr is not None:
                return group.master_addr
        return None

    def broker_addrs(self) -> set[str]:
        return {addr for route in list(self.routes.values())
                for group in route.brokers.values() for addr in group.addrs.values()}

    # -- heartbeats (loop) ---------------------------------------------------------------------
    def heartbeat_request(self) -> messaging_pb2.HeartbeatRequest:
        return messaging_pb2.HeartbeatRequest(
            client_id=self.client_id, producer_group=self.producer_group,
            consumer_group=self.consumer_group,
            subscriptions=[messaging_pb2.ConsumerSubscription(
                topic=t, sub_string=s, expression_type=self.expression_types.get(t, ""))
                for t, s in self.subscriptions.items()])

    async def heartbeat(self, address: str) -> bool:
        try:
            r = await self.channels.messaging(address).Heartbeat(
                self.heartbeat_request(), timeout=ADMIN_CALL_TIMEOUT_S)
        except grpc.RpcError as e:
            log.debug("heartbeat to %s failed: %s", address, e.code())  # type: ignore[attr-defined]
            return False
        if r.status.code != common_pb2.SUCCESS:
            if address not in self.heartbeat_refusals:
                log.error("broker %s refused the heartbeat of %s: %s %s", address,
                          self.client_id, code_name(r.status.code), r.status.remark)
            self.heartbeat_refusals[address] = r.status
            return False
        self.heartbeat_refusals.pop(address, None)
        return True

    async def heartbeat_all(self) -> None:
        addrs = sorted(self.broker_addrs())
        await asyncio.gather(*(self.heartbeat(a) for a in addrs))

    async def unregister_all(self) -> None:
        """Tells every broker this client left (so its group rebalances at once)."""
        request = messaging_pb2.UnregisterClientRequest(
            client_id=self.client_id, producer_group=self.producer_group,
            consumer_group=self.consumer_group)

        async def unregister(address: str) -> None:
            try:
                await self.channels.messaging(address).UnregisterClient(
                    request, timeout=ADMIN_CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                log.debug("unregister from %s failed: %s", address,
                          e.code())  # type: ignore[attr-defined]

        await asyncio.gather(*(unregister(a) for a in sorted(self.broker_addrs())))
