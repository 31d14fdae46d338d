"""gRPC face of the name server: RocketMQ's DefaultRequestProcessor over NamesrvService.

Each RPC converts its request to RouteInfoManager arguments and the result back to
protobuf. The manager is synchronous and fast; the handlers run on the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc

from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from nameserver.constants import DEFAULT_MAX_TOPIC_QUEUE_NUMS
from nameserver.links import broker_links
from nameserver.routeinfo import (
    BrokerData,
    DataVersion,
    QueueData,
    RouteInfoManager,
    TopicConfig,
    TopicRouteData,
)
from nameserver.validation import register_problem

log = logging.getLogger(__name__)


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
                 max_topic_queue_nums: int = DEFAULT_MAX_TOPIC_QUEUE_NUMS) -> None:
        self.route_info_manager = route_info_manager
        self.max_topic_queue_nums = max_topic_queue_nums

    async def RegisterBroker(
        self, request: namesrv_pb2.RegisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> namesrv_pb2.RegisterBrokerResponse:
        problem = register_problem(request, self.max_topic_queue_nums)
        if problem is not None:  # refused whole: nothing of it is taken
            log.warning("registration of %s (%s, id %d) from %s refused: %s",
                        request.broker_addr[:100], request.broker_name[:100], request.broker_id,
                        context.peer(), problem)
            return namesrv_pb2.RegisterBrokerResponse(
                status=common_pb2.Status(
                    code=common_pb2.INVALID_PARAMETER,
                    remark=f"registration refused, nothing registered: {problem}",
                )
            )
        result = self.route_info_manager.register_broker(
            cluster_name=request.cluster_name,
            broker_addr=request.broker_addr,
            broker_name=request.broker_name,
            broker_id=request.broker_id,
            ha_server_addr=request.ha_server_addr,
            data_version=data_version_from_proto(request.data_version),
            # Converted only if read: only a master with a new data version reads them.
            topic_configs=(topic_config_from_proto(tc) for tc in request.topic_configs),
            peer=context.peer() or "",
        )
        return namesrv_pb2.RegisterBrokerResponse(
            status=ok_status(),
            master_addr=result.master_addr,
            ha_server_addr=result.ha_server_addr,
        )

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
