"""Topic routes from the name servers (TopicRouteData, TopicPublishInfo, subscribe queues)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import grpc

from common.constants import MASTER_ID, PERM_READ, PERM_WRITE
from mqclient.constants import NAMESRV_CALL_TIMEOUT_S
from mqclient.loop import Channels
from mqclient.message import MessageQueue, MQClientError, code_name
from mqproto import common_pb2, namesrv_pb2

log = logging.getLogger(__name__)


def split_addresses(text: str | Sequence[str]) -> list[str]:
    """`host:port;host:port` (RocketMQ's namesrvAddr) or a list -> addresses, blanks
    dropped; ValueError naming the first that is not HOST:PORT."""
    items = text.split(";") if isinstance(text, str) else text
    addresses = [a.strip() for a in items if a.strip()]
    for a in addresses:
        host, sep, port = a.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 0xFFFF:
            raise ValueError(f"address {a!r} is not HOST:PORT")
    return addresses


def parse_namesrv_addr(namesrv_addr: str | list[str]) -> list[str]:
    """split_addresses, at least one; MQClientError(ILLEGAL_ARGUMENT) when not."""
    try:
        addresses = split_addresses(namesrv_addr)
    except ValueError as e:
        raise MQClientError("ILLEGAL_ARGUMENT", f"name server {e}") from None
    if not addresses:
        raise MQClientError("ILLEGAL_ARGUMENT", "no name server address given")
    return addresses


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerGroup:
    """A broker group: id 0 is its master, ids > 0 its slaves."""

    cluster: str
    broker_name: str
    addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.addrs.get(MASTER_ID)

    @property
    def read_addr(self) -> str:
        """The master, or its first slave while the master is gone."""
        return self.addrs[min(self.addrs)]

    def pull_addrs(self, preferred_id: int) -> list[str]:
        """Addresses to pull from, best first: the preferred id, the master, then slaves."""
        order = [preferred_id, MASTER_ID, *sorted(self.addrs)]
        out: list[str] = []
        for broker_id in order:
            addr = self.addrs.get(broker_id)
            if addr is not None and addr not in out:
                out.append(addr)
        return out

    def admin_addr(self) -> str | None:
        """Where offsets go: read_addr, None when the group has no live broker."""
        return self.read_addr if self.addrs else None


@dataclasses.dataclass(frozen=True, slots=True)
class TopicRoute:
    topic: str
    brokers: dict[str, BrokerGroup]
    # Writable queues of groups with a live master, in broker-name order (TopicPublishInfo).
    publish_queues: tuple[MessageQueue, ...]
    # Readable queues of groups with any live broker (what consumers rebalance over).
    subscribe_queues: tuple[MessageQueue, ...]
    # The publish queues and the write queues of groups whose master is away (only their
    # slave is listed): what ordered sends pick from, so that a key keeps its queue while
    # the queue's master is away (its sends fail until the master is back, and its order
    # holds) instead of moving to another queue; a group that leaves the route moves keys.
    ordered_queues: tuple[MessageQueue, ...] = ()

    @classmethod
    def from_proto(cls, topic: str, data: namesrv_pb2.TopicRouteData,
                   max_queue_nums: int | None = None) -> TopicRoute:
        """`max_queue_nums` caps queue counts (the route of TBW102 used for a new topic)."""
        brokers = {b.broker_name: BrokerGroup(b.cluster, b.broker_name, dict(b.broker_addrs))
                   for b in data.broker_datas}
        publish: list[MessageQueue] = []
        subscribe: list[MessageQueue] = []
        ordered: list[MessageQueue] = []
        for qd in sorted(data.queue_datas, key=lambda q: q.broker_name):
            group = brokers.get(qd.broker_name)
            if group is None or not group.addrs:
                continue
            writes, reads = qd.write_queue_nums, qd.read_queue_nums
            if max_queue_nums is not None:
                writes = reads = min(max_queue_nums, reads)
            writable = [MessageQueue(topic, qd.broker_name, i) for i in range(writes)]
            if group.master_addr is None:  # the name server took its write perm (no master)
                ordered.extend(writable)
            elif qd.perm & PERM_WRITE:
                ordered.extend(writable)
                publish.extend(writable)
            if qd.perm & PERM_READ:
                subscribe.extend(MessageQueue(topic, qd.broker_name, i) for i in range(reads))
        return cls(topic, brokers, tuple(publish), tuple(subscribe), tuple(ordered))

    def same_as(self, other: TopicRoute | None) -> bool:
        return (other is not None and self.brokers == other.brokers
                and self.publish_queues == other.publish_queues
                and self.subscribe_queues == other.subscribe_queues
                and self.ordered_queues == other.ordered_queues)


class NameServerClient:
    """Asks one name server at a time; on a failure the next one (on the client loop)."""

    def __init__(self, addresses: list[str], channels: Channels) -> None:
        self.addresses = addresses
        self.channels = channels
        self._current = 0

    async def get_routes(self, topics: list[str]) -> namesrv_pb2.GetRouteInfoByTopicsResponse:
        """The routes of `topics` in one call (topics that do not exist are left out);
        MQClientError when no name server answered, UNIMPLEMENTED when it has no batched
        lookup."""
        errors: list[str] = []
        request = namesrv_pb2.GetRouteInfoByTopicsRequest(topics=topics)
        for _ in range(len(self.addresses)):
            address = self.addresses[self._current]
            try:
                response = await self.channels.namesrv(address).GetRouteInfoByTopics(
                    request, timeout=NAMESRV_CALL_TIMEOUT_S + len(topics) / 20_000)
            except grpc.RpcError as e:
                code = e.code()  # type: ignore[attr-defined]
                if code == grpc.StatusCode.UNIMPLEMENTED:
                    raise MQClientError("UNIMPLEMENTED", f"{address} has no batched route "
                                        "lookup") from None
                errors.append(f"{address}: {code.name}")
                self._current = (self._current + 1) % len(self.addresses)
                continue
            if response.status.code != common_pb2.SUCCESS:
                raise MQClientError(code_name(response.status.code), response.status.remark)
            return response
        raise MQClientError("UNAVAILABLE", f"no name server answered the routes of "
                            f"{len(topics)} topics: " + "; ".join(errors))

    async def get_route(self, topic: str) -> namesrv_pb2.TopicRouteData | None:
        """The route, None when the topic does not exist; MQClientError when no name
        server answered."""
        errors: list[str] = []
        for _ in range(len(self.addresses)):
            address = self.addresses[self._current]
            try:
                response = await self.channels.namesrv(address).GetRouteInfoByTopic(
                    namesrv_pb2.GetRouteInfoByTopicRequest(topic=topic),
                    timeout=NAMESRV_CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                errors.append(f"{address}: {e.code().name}")  # type: ignore[attr-defined]
                self._current = (self._current + 1) % len(self.addresses)
                continue
            code = response.status.code
            if code == common_pb2.SUCCESS:
                return response.topic_route_data
            if code == common_pb2.TOPIC_NOT_EXIST:
                return None
            raise MQClientError(code_name(code), response.status.remark)
        raise MQClientError("UNAVAILABLE",
                            f"no name server answered the route of {topic}: "
                            + "; ".join(errors))
