"""Real `python -m nameserver` processes: registration over gRPC, independence, SIGTERM."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from common.constants import MASTER_ID
from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.nameserver.registration import (
    CLUSTER,
    MASTER_A,
    SLAVE_A,
    TOPIC,
    ha_addr,
    register_request,
)
from tests.support.processes import Process, Processes

RPC_TIMEOUT_S = 5.0
MASTER_A_HA = ha_addr(MASTER_A)


@pytest.fixture
def start_namesrv(tmp_path: Path) -> Iterator[Callable[[], Process]]:
    """Starts name servers on free loopback ports; every one is stopped at the end."""
    processes = Processes(tmp_path)
    try:
        yield processes.namesrv
    finally:
        processes.stop_all()


def test_two_independent_name_servers(start_namesrv: Callable[[], Process]) -> None:
    first = start_namesrv()
    second = start_namesrv()
    assert first.address != second.address

    with grpc.insecure_channel(first.address) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        master = stub.RegisterBroker(
            register_request(MASTER_A, MASTER_ID), timeout=RPC_TIMEOUT_S
        )
        assert master.status.code == common_pb2.SUCCESS
        slave = stub.RegisterBroker(
            register_request(SLAVE_A, 1), timeout=RPC_TIMEOUT_S
        )
        assert slave.status.code == common_pb2.SUCCESS
        assert (slave.master_addr, slave.ha_server_addr) == (MASTER_A, MASTER_A_HA)

        route = stub.GetRouteInfoByTopic(
            namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC), timeout=RPC_TIMEOUT_S
        )
        assert route.status.code == common_pb2.SUCCESS
        [queue_data] = route.topic_route_data.queue_datas
        assert (queue_data.broker_name, queue_data.read_queue_nums,
                queue_data.write_queue_nums, queue_data.perm) == ("broker-a", 4, 4, 6)
        [broker_data] = route.topic_route_data.broker_datas
        assert (broker_data.cluster, broker_data.broker_name) == (CLUSTER, "broker-a")
        assert dict(broker_data.broker_addrs) == {0: MASTER_A, 1: SLAVE_A}

        info = stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=RPC_TIMEOUT_S)
        assert info.status.code == common_pb2.SUCCESS
        assert {c: list(n.broker_names) for c, n in info.cluster_info.cluster_addr_table.items()
                } == {CLUSTER: ["broker-a"]}
        assert dict(info.cluster_info.broker_addr_table["broker-a"].broker_addrs) == {
            0: MASTER_A, 1: SLAVE_A,
        }
        topics = stub.GetAllTopicList(namesrv_pb2.GetAllTopicListRequest(),
                                      timeout=RPC_TIMEOUT_S)
        assert list(topics.topic_list) == [TOPIC]

    with grpc.insecure_channel(second.address) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        route = stub.GetRouteInfoByTopic(
            namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC), timeout=RPC_TIMEOUT_S
        )
        assert route.status.code == common_pb2.TOPIC_NOT_EXIST
        info = stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=RPC_TIMEOUT_S)
        assert dict(info.cluster_info.cluster_addr_table) == {}
        assert dict(info.cluster_info.broker_addr_table) == {}
        topics = stub.GetAllTopicList(namesrv_pb2.GetAllTopicListRequest(),
                                      timeout=RPC_TIMEOUT_S)
        assert list(topics.topic_list) == []

    assert first.stop(signal.SIGTERM) == 0
    assert second.stop(signal.SIGINT) == 0
    first_log = first.log_text()
    assert first_log.count("new broker registered") == 2
    assert "received SIGTERM" in first_log
    assert "new broker registered" not in second.log_text()


def test_unregister_over_grpc_then_sigterm(start_namesrv: Callable[[], Process]) -> None:
    namesrv = start_namesrv()
    with grpc.insecure_channel(namesrv.address) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        stub.RegisterBroker(register_request(MASTER_A, MASTER_ID),
                            timeout=RPC_TIMEOUT_S)
        response = stub.UnregisterBroker(
            namesrv_pb2.UnregisterBrokerRequest(
                cluster_name=CLUSTER, broker_name="broker-a",
                broker_addr=MASTER_A, broker_id=MASTER_ID,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        assert response.status.code == common_pb2.SUCCESS
        route = stub.GetRouteInfoByTopic(
            namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC), timeout=RPC_TIMEOUT_S
        )
        assert route.status.code == common_pb2.TOPIC_NOT_EXIST
    assert namesrv.stop() == 0
    assert f"unregisterBroker {MASTER_A}" in namesrv.log_text()
