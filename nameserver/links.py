"""Brokers' links to the name server (issue 16): a running broker keeps a `WatchBrokerLink`
stream open on the channel it registers over. When the stream's connection closes (the
broker process exited) the broker leaves the route at once, as RocketMQ's name server does
when a broker's channel closes, if its last registration came over that connection; a
silent broker (partition, SIGSTOP) keeps its connection and still expires after 120 s."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator

from mqproto import common_pb2, namesrv_pb2
from nameserver.routeinfo import RouteInfoManager


class BrokerLinks:
    """The open link streams of one name server (one route table)."""

    def __init__(self, manager: RouteInfoManager) -> None:
        self.manager = manager
        self._open: set[asyncio.Future[None]] = set()
        self.stopping = False

    async def watch(self, broker_addr: str, peer: str
                    ) -> AsyncIterator[namesrv_pb2.BrokerLinkEvent]:
        """One event, then open until the connection closes (the call is cancelled)."""
        link: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._open.add(link)
        try:
            yield namesrv_pb2.BrokerLinkEvent(status=common_pb2.Status(code=common_pb2.SUCCESS))
            await link
        finally:
            self._open.discard(link)
            if not self.stopping and broker_addr:
                self.manager.broker_link_closed(broker_addr, peer)

    def end_all(self) -> None:
        """At shutdown: ends every stream; nobody is removed for it."""
        self.stopping = True
        for link in self._open:
            if not link.done():
                link.set_result(None)


_links: weakref.WeakKeyDictionary[RouteInfoManager, BrokerLinks] = (
    weakref.WeakKeyDictionary())


def broker_links(manager: RouteInfoManager) -> BrokerLinks:
    """The links of the name server serving `manager`."""
    links = _links.get(manager)
    if links is None:
        links = _links[manager] = BrokerLinks(manager)
    return links
