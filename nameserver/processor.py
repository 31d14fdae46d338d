"""gRPC face of the name server: RocketMQ's DefaultRequestProcessor over NamesrvService.

Each RPC converts its request to RouteInfoManager arguments and the result back to
protobuf. The manager is synchronous and fast; the handlers run on the event loop.

A registration carrying a large topic table (tens of thousands of topics) is inflated and
parsed in a worker thread (zlib lets go of the GIL; the parse is one C call of a few
milliseconds), then compared with the group's previous table and checked on the loop,
DIFF_SLICE topics per turn, and only the differences applied, APPLY_CHUNK per turn. The
comparison is pure Python: in a worker thread it held the GIL in 5 ms turns (the loop
waited that long each time it wanted it back) and its allocations set off full garbage
collections, which stalled the loop 30-100 ms at 50,000 topics. A keep-alive
(body_omitted) costs what a heartbeat costs. A batched route lookup answers from per-topic
entries serialized once and cached until the topic's queue data change.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import AsyncIterator, Generator, Sequence

import grpc

from common.constants import MASTER_ID, PERM_WRITE
from common.route import BrokerData, QueueData, TopicRouteData
from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from nameserver.constants import DEFAULT_MAX_RECEIVE_MESSAGE_BYTES, DEFAULT_MAX_TOPIC_QUEUE_NUMS
from nameserver.links import broker_links
from nameserver.routeinfo import DataVersion, QueueDataDiff, RouteInfoManager, TopicConfig
from nameserver.validation import first_topic_problem, header_problem
from remoting.serving import run_steps, run_steps_on_loop

log = logging.getLogger(__name__)
APPLY_CHUNK = 2000  # queue data changes applied per loop turn
DIFF_SLICE = 1000  # topics of a table compared and checked per loop turn (~1 ms)
LOOKUP_CHUNK = 200  # topics of a batched route lookup answered per loop turn
INLINE_TOPICS = 256  # tables this small are decoded and compared on the loop


class TableRefused(ValueError):
    """A registration's topic table cannot be taken (the reason is the message)."""


def decode_topic_table(request: namesrv_pb2.RegisterBrokerRequest, max_bytes: int
                       ) -> Sequence[common_pb2.TopicConfig]:
    """The request's topic table (plain or compressed), not checked (pure: any thread).
    The repeated field itself, its elements read one by one by `table_diff_steps` (`list()`
    of a whole repeated field is one C call holding the GIL, tens of milliseconds at
    50,000 topics)."""
    if not request.compressed_topic_configs:
        return request.topic_configs
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(request.compressed_topic_configs, max_bytes)
    except zlib.error as e:
        raise TableRefused(f"compressed_topic_configs is not zlib data: {e}") from None
    if inflater.unconsumed_tail or not inflater.eof:
        raise TableRefused(f"compressed_topic_configs inflates to more than {max_bytes} "
                           "bytes (the name server's receive limit) or is cut off")
    try:
        table: Sequence[common_pb2.TopicConfig] = namesrv_pb2.TopicConfigTable.FromString(
            raw).topic_configs
    except Exception:  # protobuf's DecodeError
        raise TableRefused("compressed_topic_configs is not a TopicConfigTable") from None
    return table


def table_diff_steps(route_info_manager: RouteInfoManager, broker_name: str,
                     configs: Sequence[common_pb2.TopicConfig], read_only: bool,
                     max_queue_nums: int) -> Generator[None, None, QueueDataDiff]:
    """Compares the table with the group's and checks it, DIFF_SLICE topics per step (a
    generator: the caller runs it through, or yields to its event loop between steps);
    returns the topics new or changed, and that none is listed twice (those the group
    holds as they are were checked when they were taken); TableRefused with the first
    problem. A topic unchanged keeps the group's QueueData object, and topics new or changed
    alike share one: a registration that changes one topic of 50,000 makes one object, not
    50,000, and a table of 50,000 topics of 8 queues one (the garbage collector's full
    passes over 50,000 more objects held the event loop 30-100 ms)."""
    base = route_info_manager.queue_data_of(broker_name)
    get = base.get
    mask = ~PERM_WRITE if read_only else -1
    table: dict[str, QueueData] = {}
    upserts: list[tuple[str, QueueData]] = []
    changed: list[common_pb2.TopicConfig] = []
    made: dict[tuple[int, int, int, int], QueueData] = {}
    listed_twice = False
    for start in range(0, len(configs), DIFF_SLICE):
        if start:
            yield
        # One element at a time, not a slice: the garbage collector's young passes catch a
        # slice's thousand wrappers alive and age them (a full pass follows sooner).
        for i in range(start, min(start + DIFF_SLICE, len(configs))):
            c = configs[i]
            name = c.topic_name
            read, write, perm, flag = (c.read_queue_nums, c.write_queue_nums, c.perm & mask,
                                       c.topic_sys_flag)
            old = get(name)
            if name in table:
                listed_twice = True
            if (old is not None and old.read_queue_nums == read
                    and old.write_queue_nums == write and old.perm == perm
                    and old.topic_sys_flag == flag):
                table[name] = old
                continue
            key = (read, write, perm, flag)
            queue_data = made.get(key)
            if queue_data is None:  # topics alike share one (immutable) QueueData
                queue_data = made[key] = QueueData(broker_name, read, write, perm, flag)
            table[name] = queue_data
            upserts.append((name, queue_data))
            changed.append(c)
    # A topic listed twice, or all new: check all, in order.
    checked = configs if listed_twice or len(changed) == len(configs) else changed
    seen: set[str] = set()
    for start in range(0, len(checked), DIFF_SLICE):
        if start:
            yield
        problem = first_topic_problem(checked[start:start + DIFF_SLICE], max_queue_nums, seen)
        if problem is not None:
            raise TableRefused(problem)
    if listed_twice:  # the check above found it; kept as a guard
        raise TableRefused("a topic is listed twice")
    return route_info_manager.queue_data_diff(base, table, upserts)


def table_diff(route_info_manager: RouteInfoManager, broker_name: str,
               request: namesrv_pb2.RegisterBrokerRequest, max_queue_nums: int,
               max_bytes: int) -> QueueDataDiff:
    """`table_diff_steps` of the request's table, at once (small tables, tests)."""
    configs = decode_topic_table(request, max_bytes)
    return run_steps(table_diff_steps(route_info_manager, broker_name, configs,
                                      request.broker_id != MASTER_ID, max_queue_nums))


def ok_status() -> common_pb2.Status:
    return common_pb2.Status(code=common_pb2.SUCCESS)


def data_version_from_proto(pb: common_pb2.DataVersion) -> DataVersion:
    return DataVersion(timestamp=pb.timestamp, counter=pb.counter)


def topic_config_from_proto(pb: common_pb2.TopicConfig) -> TopicConfig:
    return TopicConfig(
        topic_name=pb.topic_name,
        read_queue_nums=pb.read_queue_nums,
        write_queue_nums=pb.write_queue_nums,
        perm=pb.perm,
        topic_sys_flag=pb.topic_sys_flag,
    )


def queue_data_to_proto(queue_data: QueueData) -> common_pb2.QueueData:
    return common_pb2.QueueData(
        broker_name=queue_data.broker_name,
        read_queue_nums=queue_data.read_queue_nums,
        write_queue_nums=queue_data.write_queue_nums,
        perm=queue_data.perm,
        topic_sys_flag=queue_data.topic_sys_flag,
    )


def broker_data_to_proto(broker_data: BrokerData) -> common_pb2.BrokerData:
    return common_pb2.BrokerData(
        cluster=broker_data.cluster,
        broker_name=broker_data.broker_name,
        broker_addrs=broker_data.broker_addrs,
    )


def topic_route_data_to_proto(route: TopicRouteData) -> namesrv_pb2.TopicRouteData:
    return namesrv_pb2.TopicRouteData(
        queue_datas=[queue_data_to_proto(qd) for qd in route.queue_datas],
        broker_datas=[broker_data_to_proto(bd) for bd in route.broker_datas],
    )


class NamesrvServicer(namesrv_pb2_grpc.NamesrvServiceServicer):
    """Method names are the RPC names of namesrv.proto (CamelCase, as gRPC wants)."""

    def __init__(self, route_info_manager: RouteInfoManager,
                 max_topic_queue_nums: int = DEFAULT_MAX_TOPIC_QUEUE_NUMS,
                 max_table_bytes: int = DEFAULT_MAX_RECEIVE_MESSAGE_BYTES) -> None:
        self.route_info_manager = route_info_manager
        self.max_topic_queue_nums = max_topic_queue_nums
        self.max_table_bytes = max_table_bytes
        self._table_locks: dict[str, asyncio.Lock] = {}  # one table change per group at once

    def _refuse(self, request: namesrv_pb2.RegisterBrokerRequest, peer: str,
                problem: str) -> namesrv_pb2.RegisterBrokerResponse:
        log.warning("registration of %s (%s, id %d) from %s refused: %s",
                    request.broker_addr[:100], request.broker_name[:100], request.broker_id,
                    peer, problem)
        return namesrv_pb2.RegisterBrokerResponse(
            status=common_pb2.Status(
                code=common_pb2.INVALID_PARAMETER,
                remark=f"registration refused, nothing registered: {problem}",
            )
        )

    async def RegisterBroker(
        self, request: namesrv_pb2.RegisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> namesrv_pb2.RegisterBrokerResponse:
        peer = context.peer() or ""
        problem = header_problem(request)
        if problem is not None:  # refused whole: nothing of it is taken
            return self._refuse(request, peer, problem)
        rim = self.route_info_manager
        version = data_version_from_proto(request.data_version)
        name, addr, broker_id = request.broker_name, request.broker_addr, request.broker_id
        if request.body_omitted:
            if not rim.holds_version(addr, name, broker_id, version):
                return namesrv_pb2.RegisterBrokerResponse(status=ok_status(), body_required=True)
        else:
            lock = self._table_locks.setdefault(name, asyncio.Lock())
            async with lock:
                try:
                    await self._take_table(request, name)
                except TableRefused as e:
                    return self._refuse(request, peer, str(e))
        # A master not live here before (it started, or restarted after its link closed).
        new_master = broker_id == MASTER_ID and addr not in rim.broker_live_table
        result = rim.register_broker(
            cluster_name=request.cluster_name,
            broker_addr=addr,
            broker_name=name,
            broker_id=broker_id,
            ha_server_addr=request.ha_server_addr,
            data_version=version,
            topic_configs=None,  # taken above
            peer=peer,
            remoting_addr=request.remoting_addr,
        )
        if new_master:  # its slaves link to it now
            broker_links(rim).master_registered(name, addr, request.ha_server_addr)
        return namesrv_pb2.RegisterBrokerResponse(
            status=ok_status(),
            master_addr=result.master_addr,
            ha_server_addr=result.ha_server_addr,
        )

    async def _take_table(self, request: namesrv_pb2.RegisterBrokerRequest, name: str) -> None:
        """Checks the table (always: a bad one is refused whole) and, when it is a master's
        with a new data version, makes it the group's queue data."""
        rim = self.route_info_manager
        small = len(request.topic_configs) <= INLINE_TOPICS and not request.compressed_topic_configs
        if small:
            diff = table_diff(rim, name, request, self.max_topic_queue_nums,
                              self.max_table_bytes)
        else:
            configs = (await asyncio.to_thread(decode_topic_table, request, self.max_table_bytes)
                       if request.compressed_topic_configs else request.topic_configs)
            diff = await run_steps_on_loop(table_diff_steps(
                rim, name, configs, request.broker_id != MASTER_ID, self.max_topic_queue_nums))
        if not rim.needs_table(request.broker_addr, name, request.broker_id,
                               data_version_from_proto(request.data_version)):
            return
        while True:
            applied = True
            for start in range(0, max(len(diff.upserts), 1), APPLY_CHUNK):
                if start:
                    await asyncio.sleep(0)
                applied = rim.apply_queue_data_diff(name, diff, start, start + APPLY_CHUNK,
                                                    source_addr=request.broker_addr)
                if not applied:  # the group left (or changed) meanwhile: compare again
                    break
            if applied:
                return
            diff = rim.diff_queue_data(name, diff.table)

    async def UnregisterBroker(
        self, request: namesrv_pb2.UnregisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> namesrv_pb2.UnregisterBrokerResponse:
        known = self.route_info_manager.unregister_broker(
            cluster_name=request.cluster_name,
            broker_addr=request.broker_addr,
            broker_name=request.broker_name,
            broker_id=request.broker_id,
        )
        if not known:
            return namesrv_pb2.UnregisterBrokerResponse(status=common_pb2.Status(
                code=common_pb2.QUERY_NOT_FOUND,
                remark=f"no broker {request.broker_name[:100]!r} id {request.broker_id} is "
                       f"registered at {request.broker_addr[:100]!r}; nothing removed"))
        return namesrv_pb2.UnregisterBrokerResponse(status=ok_status())

    async def GetRouteInfoByTopic(
        self, request: namesrv_pb2.GetRouteInfoByTopicRequest, context: grpc.aio.ServicerContext
    ) -> namesrv_pb2.GetRouteInfoByTopicResponse:
        route = self.route_info_manager.pickup_topic_route_data(request.topic)
        if route is None:
            return namesrv_pb2.GetRouteInfoByTopicResponse(
                status=common_pb2.Status(
                    code=common_pb2.TOPIC_NOT_EXIST,
                    remark=f"No topic route info in name server for the topic: {request.topic}",
                )
            )
        return namesrv_pb2.GetRouteInfoByTopicResponse(
            status=ok_status(), topic_route_data=topic_route_data_to_proto(route)
        )

    async def GetRouteInfoByTopics(
        self, request: namesrv_pb2.GetRouteInfoByTopicsRequest,
        context: grpc.aio.ServicerContext
    ) -> bytes:
        """Answered serialized: cached per-topic entries joined (repeated fields of
        concatenated messages append), then the broker groups once."""
        rim = self.route_info_manager
        table, entries, groups = rim.topic_queue_table, rim.route_entries, rim.broker_addr_table
        parts: list[bytes] = []
        names: set[str] = set()
        for i, topic in enumerate(request.topics):
            if i and i % LOOKUP_CHUNK == 0:
                await asyncio.sleep(0)
            entry = entries.get(topic)
            if entry is None:
                queue_datas = table.get(topic)
                if not queue_datas:
                    continue
                entry = entries[topic] = (
                    namesrv_pb2.GetRouteInfoByTopicsResponse(routes=[
                        namesrv_pb2.TopicQueueDatas(topic=topic, queue_datas=[
                            queue_data_to_proto(queue_datas[n]) for n in sorted(queue_datas)])
                    ]).SerializeToString(),
                    frozenset(queue_datas))
            raw, brokers = entry
            if not any(n in groups for n in brokers):
                continue  # as GetRouteInfoByTopic: no live group serves it
            parts.append(raw)
            names.update(brokers)
        head = namesrv_pb2.GetRouteInfoByTopicsResponse(
            status=ok_status(),
            broker_datas=[broker_data_to_proto(groups[n]) for n in sorted(names) if n in groups])
        return head.SerializeToString() + b"".join(parts)

    async def GetClusterInfo(
        self, request: namesrv_pb2.GetClusterInfoRequest, context: grpc.aio.ServicerContext
    ) -> namesrv_pb2.GetClusterInfoResponse:
        cluster_info = self.route_info_manager.get_all_cluster_info()
        return namesrv_pb2.GetClusterInfoResponse(
            status=ok_status(),
            cluster_info=namesrv_pb2.ClusterInfo(
                broker_addr_table={
                    name: broker_data_to_proto(bd)
                    for name, bd in cluster_info.broker_addr_table.items()
                },
                cluster_addr_table={
                    cluster: namesrv_pb2.BrokerNameSet(broker_names=sorted(names))
                    for cluster, names in cluster_info.cluster_addr_table.items()
                },
            ),
        )

    async def GetAllTopicList(
        self, request: namesrv_pb2.GetAllTopicListRequest, context: grpc.aio.ServicerContext
    ) -> namesrv_pb2.GetAllTopicListResponse:
        return namesrv_pb2.GetAllTopicListResponse(
            status=ok_status(), topic_list=self.route_info_manager.get_all_topic_list()
        )

    async def WatchBrokerLink(
        self, request: namesrv_pb2.WatchBrokerLinkRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[namesrv_pb2.BrokerLinkEvent]:
        """Open while the broker's connection is (nameserver/links.py)."""
        links = broker_links(self.route_info_manager)
        async for event in links.watch(request.broker_addr, context.peer() or ""):
            yield event
