"""RouteWatch (mqclient/route_watch.py) on a client loop, with routes set by the test: a
route that lost a master is watched until it is back, its return told once; sends wait
for it within their timeout; a suspect route is refreshed once. And the queues ordered
sends pick from, which keep a group whose master is away."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from mqclient.constants import ROUTE_WATCH_INTERVAL_S, ROUTE_WATCH_MAX_S
from mqclient.loop import ClientLoop
from mqclient.message import MessageQueue
from mqclient.route import BrokerGroup, TopicRoute
from mqclient.route_watch import RouteWatch
from mqproto import common_pb2, namesrv_pb2
from tests.support.clock import FakeClock

A, B = "10.0.0.1:10911", "10.0.0.2:10911"


def route(topic: str, **masters: str | None) -> TopicRoute:
    """A route of `topic` over groups broker name -> master address (None: only a slave)."""
    groups = {name: BrokerGroup("C", name, {0: addr} if addr else {1: "10.0.0.9:10911"})
              for name, addr in masters.items()}
    queues = tuple(MessageQueue(topic, name, 0) for name, addr in masters.items() if addr)
    return TopicRoute(topic, groups, queues, queues)


class Harness:
    """A RouteWatch whose refresh takes the next routes the test queued."""

    def __init__(self, loop: ClientLoop) -> None:
        self.loop = loop
        self.clock = FakeClock()
        self.routes: dict[str, TopicRoute] = {}
        self.refreshes: list[list[str]] = []
        self.next: dict[str, TopicRoute] = {}
        self.watch = RouteWatch(self.routes, loop, self.refresh, "test", self.clock.monotonic)
        self.returned: list[tuple[str, str]] = []
        self.watch.master_listeners.append(lambda name, addr: self.returned.append((name, addr)))

    async def refresh(self, topics: list[str]) -> None:
        self.refreshes.append(topics)
        for topic in topics:
            if topic in self.next:
                self.set(self.next.pop(topic))

    def set(self, new: TopicRoute) -> None:
        old = self.routes.get(new.topic)
        self.routes[new.topic] = new
        self.watch.route_changed(new.topic, old, new)

    def run(self, fn: object) -> object:
        async def call() -> object:
            return fn()  # type: ignore[operator]

        return self.loop.run(call())


@pytest.fixture
def harness() -> Iterator[Harness]:
    loop = ClientLoop("test-route-watch")
    h = Harness(loop)
    yield h
    loop.run(h.watch.stop())
    loop.loop.call_soon_threadsafe(loop.loop.stop)


def test_a_lost_master_is_watched_until_listed_again_and_its_return_told_once(
        harness: Harness) -> None:
    h = harness
    h.run(lambda: h.set(route("T1", **{"broker-a": A, "broker-b": B})))
    h.run(lambda: h.set(route("T2", **{"broker-a": A})))
    assert not h.watch.watching("T1")
    h.run(lambda: h.set(route("T1", **{"broker-a": None, "broker-b": B})))  # a's master gone
    assert h.watch.watching("T1") and not h.watch.watching("T2")
    time.sleep(3 * ROUTE_WATCH_INTERVAL_S)
    assert len(h.refreshes) >= 2 and all(r == ["T1"] for r in h.refreshes)
    assert h.watch.watching("T1")
    h.next["T1"] = route("T1", **{"broker-a": A, "broker-b": B})  # restarted, listed again
    deadline = time.monotonic() + 5
    while h.watch.watching("T1"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert h.returned == [("broker-a", A)]
    h.run(lambda: h.set(route("T2", **{"broker-a": A, "broker-b": B})))  # not news again
    assert h.returned == [("broker-a", A)]
    refreshed = len(h.refreshes)
    time.sleep(2 * ROUTE_WATCH_INTERVAL_S)
    assert len(h.refreshes) == refreshed  # nothing watched: nothing asked


def test_a_master_that_never_returns_is_watched_at_most_route_watch_max_s(
        harness: Harness) -> None:
    h = harness
    h.run(lambda: h.set(route("T", **{"broker-a": A})))
    h.run(lambda: h.set(route("T", **{"broker-a": None})))
    time.sleep(2 * ROUTE_WATCH_INTERVAL_S)
    assert h.watch.watching("T")
    h.clock.advance(ROUTE_WATCH_MAX_S)
    deadline = time.monotonic() + 5
    while h.watch.watching("T"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    asked = len(h.refreshes)
    time.sleep(2 * ROUTE_WATCH_INTERVAL_S)
    assert len(h.refreshes) == asked  # back to the periodic refresh only


def test_a_send_waits_for_the_return_within_its_timeout(harness: Harness) -> None:
    h = harness
    h.run(lambda: h.set(route("T", **{"broker-a": A})))
    h.run(lambda: h.set(route("T", **{"broker-a": None})))
    started = time.monotonic()
    waited = h.loop.run(h.watch.wait_publish_route("T", 0.3))
    assert waited is not None and not waited.publish_queues
    assert 0.3 <= time.monotonic() - started < 1.0
    waiting = h.loop.submit(h.watch.wait_publish_route("T", 10))
    time.sleep(0.1)
    back = route("T", **{"broker-a": A})
    h.next["T"] = back
    started = time.monotonic()
    assert waiting.result(timeout=5) is back
    assert time.monotonic() - started < 2 * ROUTE_WATCH_INTERVAL_S


def test_a_suspect_route_is_refreshed_once_and_a_fresh_one_not_asked_again(
        harness: Harness) -> None:
    h = harness
    h.run(lambda: h.set(route("T", **{"broker-a": A})))
    h.watch.suspect("T")  # from this (a sender's) thread
    deadline = time.monotonic() + 5
    while not h.refreshes or h.watch.watching("T"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert h.refreshes == [["T"]]  # still listed: not watched on
    h.watch.checked(["T"])
    assert h.watch.fresh("T")
    h.clock.advance(ROUTE_WATCH_INTERVAL_S)
    assert not h.watch.fresh("T")


def test_route_changes_wake_waiters_on_the_loop() -> None:
    async def scenario() -> None:
        routes: dict[str, TopicRoute] = {}

        async def refresh(topics: list[str]) -> None:
            return None

        watch = RouteWatch(routes, ClientLoop.shared(), refresh, "t")
        routes["T"] = route("T", **{"broker-a": None})
        watch.route_changed("T", route("T", **{"broker-a": A}), routes["T"])
        waiter = asyncio.ensure_future(watch.wait_publish_route("T", 10))
        await asyncio.sleep(0.01)
        routes["T"] = route("T", **{"broker-a": A})
        watch.route_changed("T", None, routes["T"])
        assert (await asyncio.wait_for(waiter, 1)).publish_queues
        await watch.stop()

    asyncio.run(scenario())


def test_ordered_queues_keep_a_masterless_group_so_keys_do_not_move() -> None:
    """The name server strips a masterless group's write perm (its slave's read-only data):
    publish queues leave it, ordered sends keep picking among the same queues (a key on it
    fails until its master is back rather than moving and breaking its order). A group
    whose master made the topic read-only leaves both."""
    def data(a_master: bool, a_perm: int, b_perm: int = 6) -> namesrv_pb2.TopicRouteData:
        return namesrv_pb2.TopicRouteData(
            queue_datas=[common_pb2.QueueData(broker_name="broker-a", read_queue_nums=4,
                                              write_queue_nums=4, perm=a_perm),
                         common_pb2.QueueData(broker_name="broker-b", read_queue_nums=4,
                                              write_queue_nums=4, perm=b_perm)],
            broker_datas=[common_pb2.BrokerData(
                cluster="C", broker_name="broker-a",
                broker_addrs={0: A, 1: "10.0.0.9:1"} if a_master else {1: "10.0.0.9:1"}),
                common_pb2.BrokerData(cluster="C", broker_name="broker-b",
                                      broker_addrs={0: B})])

    both = TopicRoute.from_proto("T", data(True, 6))
    away = TopicRoute.from_proto("T", data(False, 4))
    assert both.ordered_queues == both.publish_queues and len(both.publish_queues) == 8
    assert {q.broker_name for q in away.publish_queues} == {"broker-b"}
    assert away.ordered_queues == both.ordered_queues  # no key moves
    assert not away.same_as(both)
    drained = TopicRoute.from_proto("T", data(True, 4))
    assert {q.broker_name for q in drained.ordered_queues} == {"broker-b"}
