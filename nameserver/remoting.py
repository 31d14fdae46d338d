"""The name server's face for RocketMQ 4.x clients (remoting): route lookups (105), cluster
info (106) and the topic list (206), read from the same route tables as the gRPC face.

Routes name each broker by its remoting address (registered by the broker, see
RegisterBrokerRequest.remoting_addr): a broker that serves no remoting port is left out
of what 4.x clients see, and so are the queues of a group left with no address.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from common.route import BrokerData
from nameserver.routeinfo import RouteInfoManager
from remoting import codes
from remoting.command import RemotingCommand
from remoting.connection import RemotingConnection

log = logging.getLogger(__name__)


def _json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class NamesrvRemotingProcessor:
    def __init__(self, route_info_manager: RouteInfoManager) -> None:
        self.rim = route_info_manager

    async def __call__(self, conn: RemotingConnection, cmd: RemotingCommand
                       ) -> RemotingCommand | None:
        if cmd.code == codes.GET_ROUTEINFO_BY_TOPIC:
            return self.route(cmd)
        if cmd.code == codes.GET_BROKER_CLUSTER_INFO:
            return self.cluster_info(cmd)
        if cmd.code == codes.GET_ALL_TOPIC_LIST_FROM_NAMESERVER:
            return cmd.response(codes.SUCCESS, None,
                                body=_json({"topicList": self.rim.get_all_topic_list()}))
        return cmd.response(codes.REQUEST_CODE_NOT_SUPPORTED,
                            f"request code {cmd.code} is not supported by this name server")

    def remoting_addrs(self, broker_data: BrokerData) -> dict[str, str]:
        """brokerId (as a string key) -> the broker's remoting address, for those that
        registered one."""
        live = self.rim.broker_live_table
        out = {}
        for broker_id, addr in sorted(broker_data.broker_addrs.items()):
            info = live.get(addr)
            if info is not None and info.remoting_addr:
                out[str(broker_id)] = info.remoting_addr
        return out

    def route(self, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_str("topic")
        route = self.rim.pickup_topic_route_data(topic)
        broker_datas = []
        names = set()
        if route is not None:
            for bd in route.broker_datas:
                addrs = self.remoting_addrs(bd)
                if addrs:
                    names.add(bd.broker_name)
                    broker_datas.append({"cluster": bd.cluster, "brokerName": bd.broker_name,
                                         "brokerAddrs": addrs})
        if route is None or not broker_datas:
            return cmd.response(codes.TOPIC_NOT_EXIST,
                                f"No topic route info in name server for the topic: {topic}")
        body = {
            "orderTopicConf": None,
            "queueDatas": [{"brokerName": q.broker_name, "readQueueNums": q.read_queue_nums,
                            "writeQueueNums": q.write_queue_nums, "perm": q.perm,
                            "topicSynFlag": q.topic_sys_flag}
                           for q in route.queue_datas if q.broker_name in names],
            "brokerDatas": broker_datas,
            "filterServerTable": {},
        }
        return cmd.response(codes.SUCCESS, None, body=_json(body))

    def cluster_info(self, cmd: RemotingCommand) -> RemotingCommand:
        info = self.rim.get_all_cluster_info()
        body = {
            "brokerAddrTable": {
                name: {"cluster": bd.cluster, "brokerName": name,
                       "brokerAddrs": self.remoting_addrs(bd)}
                for name, bd in sorted(info.broker_addr_table.items())},
            "clusterAddrTable": {cluster: sorted(names)
                                 for cluster, names in sorted(info.cluster_addr_table.items())},
        }
        return cmd.response(codes.SUCCESS, None, body=_json(body))
