"""One broker group's RegisterBrokerRequest, shared by the gRPC tests of the name server."""

from __future__ import annotations

from common.constants import PERM_READ, PERM_WRITE
from mqproto import common_pb2, namesrv_pb2

CLUSTER = "DefaultCluster"
TOPIC = "TopicTest"
MASTER_A = "127.0.0.1:10911"
SLAVE_A = "127.0.0.1:10921"


def ha_addr(broker_addr: str) -> str:
    """The HA address a broker at ``127.0.0.1:109xx`` registers: ``127.0.0.1:119xx``."""
    return broker_addr.replace(":109", ":119")


def register_request(
    broker_addr: str, broker_id: int, queues: int = 4
) -> namesrv_pb2.RegisterBrokerRequest:
    """broker-a at ``broker_addr`` with ``queues`` read and write queues of TOPIC."""
    return namesrv_pb2.RegisterBrokerRequest(
        cluster_name=CLUSTER,
        broker_name="broker-a",
        broker_addr=broker_addr,
        broker_id=broker_id,
        ha_server_addr=ha_addr(broker_addr),
        data_version=common_pb2.DataVersion(timestamp=1, counter=1),
        topic_configs=[
            common_pb2.TopicConfig(
                topic_name=TOPIC, read_queue_nums=queues, write_queue_nums=queues,
                perm=PERM_READ | PERM_WRITE,
            )
        ],
    )
