"""brokerIP2 (RocketMQ's second broker address): a group whose clients' address (brokerIP1)
its slave cannot reach still replicates and syncs over brokerIP2, as in Docker where
brokerIP1 is 127.0.0.1 on the host and brokerIP2 the container's name on the network.

Real name server and broker processes on loopback. The master serves on 127.0.0.1 only
and advertises 127.0.0.2 to clients: nothing listens there, so anything dialled at
brokerIP1 is refused."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from broker.slave_sync import master_admin_address
from mqproto import admin_pb2, common_pb2, messaging_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.support.brokers import RPC_TIMEOUT_S, Node, broker_props, write_conf
from tests.support.processes import Processes
from tests.support.waiting import wait_until

A = admin_pb2
C = common_pb2
M = messaging_pb2
TOPIC = "Ip2Topic"
UNREACHABLE_IP1 = "127.0.0.2"


@pytest.mark.parametrize(("master_addr", "ha_addr", "expected"), [
    ("127.0.0.1:10911", "broker-a-0:10912", "broker-a-0:10911"),
    ("127.0.0.1:10911", "127.0.0.1:10912", "127.0.0.1:10911"),
    ("[::1]:10911", "[fd00::5]:10912", "[fd00::5]:10911"),
    ("127.0.0.1:10911", "", "127.0.0.1:10911"),  # HA address not known yet
    ("", "broker-a-0:10912", ""),  # no master: nothing to call
])
def test_master_admin_address_is_the_ha_host_with_the_listen_port(
        master_addr: str, ha_addr: str, expected: str) -> None:
    assert master_admin_address(master_addr, ha_addr) == expected


def cluster_info(namesrv_addr: str) -> namesrv_pb2.ClusterInfo:
    with grpc.insecure_channel(namesrv_addr) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        return stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(),
                                   timeout=RPC_TIMEOUT_S).cluster_info


def topic_names(node: Node) -> set[str]:
    r = node.admin.GetTopicList(A.GetTopicListRequest(), timeout=RPC_TIMEOUT_S)
    return {c.topic_name for c in r.topic_configs}


def test_replication_and_slave_sync_use_broker_ip2(processes: Processes, tmp_path: Path,
                                                   nodes: list[Node]) -> None:
    namesrv = processes.namesrv()
    master_proc = processes.broker(write_conf(tmp_path / "master.conf", broker_props(
        tmp_path / "master", brokerRole="SYNC_MASTER", namesrvAddr=namesrv.address,
        brokerIP1=UNREACHABLE_IP1, brokerIP2="127.0.0.1")))
    # Clients are told brokerIP1; the test itself dials the port on loopback.
    host, _, port = master_proc.address.rpartition(":")
    assert host == UNREACHABLE_IP1
    master = Node(f"127.0.0.1:{port}")
    nodes.append(master)
    ha_addr = master.runtime().table["haServerAddr"]
    assert ha_addr.startswith("127.0.0.1:") and ha_addr != f"127.0.0.1:{port}"
    master.create_topic(TOPIC, 2)

    slave_proc = processes.broker(write_conf(tmp_path / "slave.conf", broker_props(
        tmp_path / "slave", brokerRole="SLAVE", brokerId=1, namesrvAddr=namesrv.address)))
    slave = Node(slave_proc.address)
    nodes.append(slave)

    # The name servers hand out brokerIP1 to clients...
    group = cluster_info(namesrv.address).broker_addr_table["broker-a"]
    assert dict(group.broker_addrs) == {0: master_proc.address, 1: slave_proc.address}
    # ...and the slave replicates from brokerIP2 and copies the master's tables there.
    wait_until(lambda: master.ha_status().in_sync_slave_nums == 1, timeout=15,
               message="the slave in sync over brokerIP2")
    assert slave.ha_status().ha_client_info.master_addr == ha_addr
    wait_until(lambda: TOPIC in topic_names(slave), timeout=15,
               message="the master's topic configs on the slave")

    r = master.messaging.SendMessage(M.SendMessageRequest(
        message=M.Message(topic=TOPIC, body=b"over ip2"), queue_id=0), timeout=RPC_TIMEOUT_S)
    assert r.status.code == C.SUCCESS, r.status  # SYNC_MASTER: the slave acked it
    master_max = master.runtime().commit_log_max_offset
    assert slave.runtime().commit_log_max_offset == master_max
