"""One producer's or consumer's link to the cluster (RocketMQ's MQClientInstance): its client
id, channels, route cache refreshed from the name servers, and heartbeats to the brokers.
Routes are refreshed every POLL_NAME_SERVER_INTERVAL_S; those that lost a master sooner
(route_watch.py)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Callable

import grpc

from acl.grpc_auth import ClientAuth
from common.constants import AUTO_CREATE_TOPIC_KEY_TOPIC
from mqclient.constants import (
    ADMIN_CALL_TIMEOUT_S,
    HEARTBEAT_BROKER_INTERVAL_S,
    POLL_NAME_SERVER_INTERVAL_S,
    RETRY_GROUP_TOPIC_PREFIX,
    RETRY_QUEUE_NUMS,
    ROUTE_IDLE_ROUNDS,
    ROUTE_REFRESH_CHUNK,
)
from mqclient.loop import ACCESS_REFUSED, Channels, ClientLoop, cancel_and_wait
from mqclient.message import MessageQueue, MQClientError, code_name
from mqclient.route import BrokerGroup, NameServerClient, TopicRoute, parse_namesrv_addr
from mqclient.route_watch import RouteWatch
from mqproto import common_pb2, messaging_pb2, namesrv_pb2
from remoting.local_address import local_ip
from remoting.tls import ClientTls

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
                 client_ip: str = "", access_key: str | None = None,
                 secret_key: str | None = None, tls_ca: str | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        namesrv_addrs = parse_namesrv_addr(namesrv_addr)
        # Monotonic seconds of the consumer's timing (queue locks, pull addresses found
        # down, rebalance waits); tests pass one they move.
        self.clock = clock
        self.client_ip = resolve_client_ip(namesrv_addrs, client_ip)
        self.client_id = new_client_id(self.client_ip)
        self.loop = loop or ClientLoop.shared()
        try:  # explicit keys, else $MQ_ACCESS_KEY / $MQ_SECRET_KEY (none: unsigned)
            auth = ClientAuth.from_env(access_key, secret_key)
        except ValueError as e:
            raise MQClientError("ILLEGAL_ARGUMENT", str(e)) from None
        # TLS: the servers' CA (tls_ca, else $MQ_TLS_CA); None: plaintext
        self.channels = Channels(auth, ClientTls.from_env(tls_ca))
        self.namesrv = NameServerClient(namesrv_addrs, self.channels)
        self.producer_group = producer_group
        self.consumer_group = consumer_group
        self.subscriptions: dict[str, str] = {}  # topic -> tag expression (or SQL92)
        # topic -> the expression type of a subscription that is not by tags ("SQL92")
        self.expression_types: dict[str, str] = {}
        # broker address -> the status of its last heartbeat answer that was not SUCCESS
        self.heartbeat_refusals: dict[str, common_pb2.Status] = {}
        self.routes: dict[str, TopicRoute] = {}
        # topic -> the refresh round in which a send last used its route (see
        # `route_used`); routes unused for ROUTE_IDLE_ROUNDS rounds are not refreshed.
        self.route_rounds: dict[str, int] = {}
        self.refresh_round = 0
        self.last_refresh_s = 0.0  # how long the last refresh round took
        # What the last batched refresh answered per topic, serialized, and its broker
        # groups: a route whose answer did not change is not rebuilt.
        self._entries_seen: dict[str, bytes] = {}
        self._groups_seen = b""
        # Routes missing at a send, fetched together (fetch_route): topic -> its waiters.
        self._missing_routes: dict[str, asyncio.Future[TopicRoute | None]] = {}
        self._route_fetches: set[asyncio.Task[None]] = set()
        self.default_topic_queue_nums: int | None = None  # producers route new topics
        self.poll_name_server_interval_s = poll_name_server_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.route_listeners: list[Callable[[str, TopicRoute], None]] = []
        self.watch = RouteWatch(self.routes, self.loop, self._refresh, self.client_id,
                                clock)
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
        await self.watch.stop()
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
                self._route_gone(topic)
                self.watch.checked([topic])
                return self.routes.get(topic)
            route = self._route_by_default(topic, default)
        else:
            self.watch.checked([topic])
            return self.routes.get(topic)
        self._set_route(topic, route)
        self.watch.checked([topic])
        return route

    def _route_gone(self, topic: str) -> None:
        """A producer's route whose every broker group left the name servers (and there is
        no TBW102 to route it by): an empty route, so that its sends wait for a master to
        come back (the topic is watched) instead of going to addresses that are gone. A
        consumer keeps its last route, as RocketMQ's does."""
        if self.default_topic_queue_nums is not None and topic in self.routes:
            self._set_route(topic, TopicRoute(topic, {}, (), ()))

    async def fetch_route(self, topic: str) -> TopicRoute | None:
        """`update_route` for a send that found no route: the misses of one loop turn
        (async sends to thousands of new topics) are fetched in one batched call instead
        of one call each (which timed out sends spread over 5,000 new topics)."""
        waiter = self._missing_routes.get(topic)
        if waiter is None:
            if not self._missing_routes:
                task = asyncio.get_running_loop().create_task(self._fetch_missing())
                self._route_fetches.add(task)
                task.add_done_callback(self._route_fetches.discard)
            waiter = asyncio.get_running_loop().create_future()
            self._missing_routes[topic] = waiter
        return await asyncio.shield(waiter)

    async def _fetch_missing(self) -> None:
        await asyncio.sleep(0)  # the misses of this turn and the next join
        waiters, self._missing_routes = self._missing_routes, {}
        topics = list(waiters)
        try:
            if len(topics) == 1:
                await self.update_route(topics[0])
            else:
                try:
                    await self._update_routes_batched(topics)
                except MQClientError as e:
                    if e.code != "UNIMPLEMENTED":
                        raise
                    await asyncio.gather(*(self.update_route(t) for t in topics))
        except asyncio.CancelledError:  # the client shuts down
            for waiter in waiters.values():
                waiter.cancel()
            raise
        except Exception as e:  # every waiter learns it; nobody else awaits this task
            for waiter in waiters.values():
                if not waiter.done():
                    waiter.set_exception(e)
                    waiter.exception()  # a waiter given up (timed out) is not an error
            return
        for topic, waiter in waiters.items():
            if not waiter.done():
                waiter.set_result(self.routes.get(topic))

    def _set_route(self, topic: str, route: TopicRoute) -> None:
        old = self.routes.get(topic)
        if not route.same_as(old):
            self.routes[topic] = route
            if old is not None or len(self.routes) <= 100:  # not thousands of lines at start
                log.info("route of %s changed: %s", topic,
                         {b.broker_name: b.addrs for b in route.brokers.values()})
            self.watch.route_changed(topic, old, route)
            for listener in self.route_listeners:
                listener(topic, route)

    async def _refresh(self, topics: list[str]) -> None:
        """The routes of `topics`: batched, or one by one from a name server without it."""
        try:
            await self._update_routes_batched(topics)
        except MQClientError as e:
            if e.code != "UNIMPLEMENTED":
                raise
            for topic in topics:
                await self.update_route(topic)

    def route_used(self, topic: str) -> None:
        """A send used the cached route of `topic` (any thread: one dict store)."""
        self.route_rounds[topic] = self.refresh_round

    def routes_in_use(self) -> list[str]:
        """Subscribed topics and those whose route a send used in the last
        ROUTE_IDLE_ROUNDS rounds; the routes of the others leave the cache."""
        oldest = self.refresh_round - ROUTE_IDLE_ROUNDS
        rounds = self.route_rounds
        idle = [t for t in list(self.routes)
                if t not in self.subscriptions and rounds.get(t, self.refresh_round) < oldest]
        for topic in idle:
            self.routes.pop(topic, None)
            rounds.pop(topic, None)
            self._entries_seen.pop(topic, None)
            self.watch.forget(topic)
        if idle:
            log.info("%d routes unused for %d refresh rounds dropped from the cache",
                     len(idle), ROUTE_IDLE_ROUNDS)
        return sorted({*self.routes, *self.subscriptions})

    async def update_routes(self, topics: list[str]) -> None:
        """Fetches the routes of `topics` in one batched call and counts them in use (a
        producer that knows its topics warms its cache this way)."""
        for topic in topics:
            self.route_rounds[topic] = self.refresh_round
        await self._update_routes_batched(topics)

    async def update_all_routes(self) -> None:
        """One refresh round: the routes in use, in one batched call (per name server
        tried); a name server without the batched call is asked topic by topic."""
        started = time.monotonic()
        for topic in self.routes:
            self.route_rounds.setdefault(topic, self.refresh_round)
        self.refresh_round += 1
        topics = self.routes_in_use()
        if not topics:
            return
        try:
            await self._update_routes_batched(topics)
        except MQClientError as e:
            if e.code != "UNIMPLEMENTED":
                log.warning("routes of %d topics not refreshed: %s", len(topics), e)
                return
            for topic in topics:
                try:
                    await self.update_route(topic)
                except MQClientError as e:
                    log.warning("route of %s not refreshed: %s", topic, e)
        finally:
            self.last_refresh_s = time.monotonic() - started

    async def _update_routes_batched(self, topics: list[str]) -> None:
        default_route: namesrv_pb2.TopicRouteData | None = None
        asked = topics
        if self.default_topic_queue_nums is not None:
            asked = [*topics, AUTO_CREATE_TOPIC_KEY_TOPIC]
        response = await self.namesrv.get_routes(asked)
        groups = {b.broker_name: b for b in response.broker_datas}
        groups_seen = b"".join(b.SerializeToString(deterministic=True)
                               for b in response.broker_datas)
        same_groups, self._groups_seen = groups_seen == self._groups_seen, groups_seen
        seen = self._entries_seen
        found: set[str] = set()
        for i, entry in enumerate(response.routes):
            if i and i % ROUTE_REFRESH_CHUNK == 0:
                await asyncio.sleep(0)
            topic = entry.topic
            found.add(topic)
            raw = entry.SerializeToString()
            if same_groups and seen.get(topic) == raw and topic in self.routes:
                continue  # unchanged
            seen[topic] = raw
            data = namesrv_pb2.TopicRouteData(
                queue_datas=entry.queue_datas,
                broker_datas=[groups[q.broker_name] for q in entry.queue_datas
                              if q.broker_name in groups])
            if entry.topic == AUTO_CREATE_TOPIC_KEY_TOPIC and self.default_topic_queue_nums:
                default_route = data
                if entry.topic not in self.routes and entry.topic not in self.subscriptions:
                    continue
            self._set_route(entry.topic, TopicRoute.from_proto(entry.topic, data))
        if self.default_topic_queue_nums is not None:
            for topic in topics:  # a producer routes a topic no broker has yet by TBW102
                if topic in found:
                    continue
                if default_route is not None:
                    self._set_route(topic, self._route_by_default(topic, default_route))
                else:
                    self._route_gone(topic)
        self.watch.checked(topics)  # the cache holds their answers now

    def _route_by_default(self, topic: str, default: namesrv_pb2.TopicRouteData) -> TopicRoute:
        """The route of a topic no broker has yet, by TBW102's brokers: the producer's
        default queue count, but a retry topic's own (a broker creates it with that many
        whatever a send asks, so a queue past it would be refused)."""
        queue_nums = (RETRY_QUEUE_NUMS if topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                      else self.default_topic_queue_nums)
        return TopicRoute.from_proto(topic, default, queue_nums)

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
            code = e.code()  # type: ignore[attr-defined]
            if code in ACCESS_REFUSED:
                if address not in self.heartbeat_refusals:  # access control: once
                    log.error("broker %s refused the heartbeat of %s: %s: %s", address,
                              self.client_id, code.name, e.details())  # type: ignore[attr-defined]
                self.heartbeat_refusals[address] = common_pb2.Status(
                    code=common_pb2.NO_PERMISSION, remark=str(e.details()))  # type: ignore[attr-defined]
            else:
                log.debug("heartbeat to %s failed: %s", address, code)
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
