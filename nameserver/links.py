"""Brokers' links to the name server (issue 16): a running broker keeps a `WatchBrokerLink`
stream open on the channel it registers over. When the stream's connection closes (the
broker process exited) the broker leaves the route at once, as RocketMQ's name server does
when a broker's channel closes, if its last registration came over that connection; a
silent broker (partition, SIGSTOP) keeps its connection and still expires after 120 s.

The stream also tells a group's slaves when their master registers anew (it started or
restarted), with its HA address: they link to it at once, so that a restarted SYNC_MASTER
has a slave in sync before its producers find it (RocketMQ 5's name server notifies a
group's brokers likewise when the group's min broker id changes)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import weakref
from collections.abc import AsyncIterator

from common.constants import MASTER_ID
from mqproto import common_pb2, namesrv_pb2
from nameserver.routeinfo import RouteInfoManager

# Events waiting for a link's stream; more are dropped (a slave that reads none still has
# its own reconnect attempts).
LINK_EVENTS_QUEUED = 8


@dataclasses.dataclass(eq=False)
class _Link:
    broker_addr: str
    events: asyncio.Queue[namesrv_pb2.BrokerLinkEvent | None] = dataclasses.field(
        default_factory=lambda: asyncio.Queue(LINK_EVENTS_QUEUED))


class BrokerLinks:
    """The open link streams of one name server (one route table)."""

    def __init__(self, manager: RouteInfoManager) -> None:
        self.manager = manager
        self._open: set[_Link] = set()
        self.stopping = False

    async def watch(self, broker_addr: str, peer: str
                    ) -> AsyncIterator[namesrv_pb2.BrokerLinkEvent]:
        """One event, then the group's master registrations, until the connection closes
        (the call is cancelled)."""
        link = _Link(broker_addr)
        self._open.add(link)
        try:
            yield namesrv_pb2.BrokerLinkEvent(status=common_pb2.Status(code=common_pb2.SUCCESS))
            while (event := await link.events.get()) is not None:
                yield event
        finally:
            self._open.discard(link)
            if not self.stopping and broker_addr:
                self.manager.broker_link_closed(broker_addr, peer)

    def master_registered(self, broker_name: str, master_addr: str, ha_server_addr: str) -> int:
        """Tells the open links of the group's slaves that its master registered anew;
        returns how many were told."""
        group = self.manager.broker_addr_table.get(broker_name)
        if group is None:
            return 0
        slaves = {addr for broker_id, addr in group.broker_addrs.items()
                  if broker_id != MASTER_ID}
        event = namesrv_pb2.BrokerLinkEvent(
            status=common_pb2.Status(code=common_pb2.SUCCESS), master_addr=master_addr,
            ha_server_addr=ha_server_addr)
        told = 0
        for link in self._open:
            if link.broker_addr in slaves:
                with contextlib.suppress(asyncio.QueueFull):
                    link.events.put_nowait(event)
                    told += 1
        return told

    def end_all(self) -> None:
        """At shutdown: ends every stream; nobody is removed for it."""
        self.stopping = True
        for link in self._open:
            if link.events.full():  # a reader that reads nothing: room for the end
                link.events.get_nowait()
            link.events.put_nowait(None)


_links: weakref.WeakKeyDictionary[RouteInfoManager, BrokerLinks] = (
    weakref.WeakKeyDictionary())


def broker_links(manager: RouteInfoManager) -> BrokerLinks:
    """The links of the name server serving `manager`."""
    links = _links.get(manager)
    if links is None:
        links = _links[manager] = BrokerLinks(manager)
    return links
