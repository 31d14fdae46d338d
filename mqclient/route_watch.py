"""Routes of lost masters, refreshed soon (a ClientInstance's): a topic whose route lost a
group's master (the name servers dropped it: its process died), or whose send found the
broker unreachable, is refreshed every ROUTE_WATCH_INTERVAL_S instead of every
POLL_NAME_SERVER_INTERVAL_S, until the master is listed again. Sends to a route left without
any master wait for that (within their timeout) instead of failing at once, and the return
of a master is told to `master_listeners` (a producer then sends to it at once)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable

from mqclient.constants import ROUTE_WATCH_INTERVAL_S, ROUTE_WATCH_MAX_S
from mqclient.loop import ClientLoop, cancel_and_wait
from mqclient.message import MQClientError
from mqclient.route import TopicRoute

log = logging.getLogger(__name__)


class RouteWatch:
    """Methods run on the client loop unless marked "any thread"."""

    def __init__(self, routes: dict[str, TopicRoute], loop: ClientLoop,
                 refresh: Callable[[list[str]], Awaitable[None]], name: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.routes = routes  # the instance's route cache (read here, never written)
        self.loop = loop
        self.clock = clock  # monotonic seconds (the instance's)
        self.refresh = refresh  # fetches the routes of topics into the cache
        self.name = name
        # (broker name, master address) of a group whose master a route had lost and lists
        # again (restarted): called once per return.
        self.master_listeners: list[Callable[[str, str], None]] = []
        self._masterless: set[str] = set()  # groups whose master a route lost
        # Topics watched: since when, and the groups whose master their route lost.
        self._watched: dict[str, tuple[float, set[str]]] = {}
        self._checked: dict[str, float] = {}  # topic -> when its route was last fetched
        self._changed = asyncio.Event()  # set (and replaced) at every route change
        self._task: asyncio.Task[None] | None = None
        self.running = True

    async def stop(self) -> None:
        self.running = False
        if self._task is not None:
            await cancel_and_wait([self._task], 3.0, f"route watch of {self.name}")

    # -- what the cache tells ------------------------------------------------------------------
    def checked(self, topics: Iterable[str]) -> None:
        """The routes of `topics` were just fetched (any thread)."""
        now = self.clock()
        for topic in topics:
            self._checked[topic] = now

    def forget(self, topic: str) -> None:
        self._checked.pop(topic, None)

    def fresh(self, topic: str) -> bool:
        """The route of `topic` was fetched within ROUTE_WATCH_INTERVAL_S (any thread): a
        send to it without a master fails from the cache, without asking again."""
        checked = self._checked.get(topic)
        return checked is not None and self.clock() - checked < ROUTE_WATCH_INTERVAL_S

    def route_changed(self, topic: str, old: TopicRoute | None, new: TopicRoute) -> None:
        """A group whose master left the route: the topic is watched. A group whose master a
        route had lost, listed again: its master returned (restarted)."""
        for name, group in new.brokers.items():
            addr = group.master_addr
            if addr is not None and name in self._masterless:
                self._masterless.discard(name)
                log.info("master %s of %s is listed again", addr, name)
                for listener in self.master_listeners:
                    listener(name, addr)
        self._changed.set()
        self._changed = asyncio.Event()
        if old is None:
            return
        lost = [name for name, group in old.brokers.items() if group.master_addr is not None
                and (name not in new.brokers or new.brokers[name].master_addr is None)]
        if lost:
            self._masterless.update(lost)
            self.watch(topic, lost)

    # -- watching ------------------------------------------------------------------------------
    def suspect(self, topic: str) -> None:
        """A send to `topic` found its broker unreachable (any thread): the route is
        refreshed within ROUTE_WATCH_INTERVAL_S, and watched while it lacks a master."""
        if topic in self._watched or not self.running:
            return
        if self.loop.in_loop_thread():
            self.watch(topic)
        else:
            self.loop.loop.call_soon_threadsafe(self.watch, topic)

    def watch(self, topic: str, lost: Iterable[str] = ()) -> None:
        """Refreshes the route of `topic` soon, and until the groups in `lost` have a
        master in it again."""
        self._watched.setdefault(topic, (self.clock(), set()))[1].update(lost)
        if self.running and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"watchRoutes-{self.name}")

    def watching(self, topic: str) -> bool:
        """The route of `topic` is watched: a master it lost may be listed again soon."""
        return topic in self._watched

    async def wait_publish_route(self, topic: str, timeout_s: float) -> TopicRoute | None:
        """The route of `topic`, once it has queues to publish to, waiting at most
        `timeout_s` while it is watched (its master lost, maybe restarting)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            route = self.routes.get(topic)
            remaining = deadline - loop.time()
            if (route is not None and route.publish_queues) or remaining <= 0 \
                    or topic not in self._watched:
                return route
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, ROUTE_WATCH_INTERVAL_S)):
                    await self._changed.wait()

    async def _run(self) -> None:
        """Refreshes the watched topics (one batched call) every ROUTE_WATCH_INTERVAL_S,
        jittered so that the clients of a lost broker do not ask in step. A topic leaves
        when its route has the masters it lost again (at once when it lost none: a send
        found the broker unreachable, but the name servers still list it), or after
        ROUTE_WATCH_MAX_S."""
        failed = False
        while self._watched:
            await asyncio.sleep(ROUTE_WATCH_INTERVAL_S * random.uniform(0.8, 1.2))
            topics = list(self._watched)
            try:
                await self.refresh(topics)
                failed = False
            except MQClientError as e:
                (log.debug if failed else log.warning)(
                    "routes of %d watched topics not refreshed: %s", len(topics), e)
                failed = True
            now = self.clock()
            for topic in topics:
                since, lost = self._watched[topic]
                route = self.routes.get(topic)
                groups = route.brokers if route is not None else {}
                lost.difference_update([name for name in lost
                                        if name in groups and groups[name].master_addr])
                if not lost or now - since >= ROUTE_WATCH_MAX_S:
                    del self._watched[topic]
