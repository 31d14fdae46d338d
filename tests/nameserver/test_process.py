"""Real `python -m nameserver` processes: registration over gRPC, independence, SIGTERM."""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from nameserver.constants import BOOT_SUCCESS_MESSAGE, MASTER_ID, PERM_READ, PERM_WRITE
from tests.processes import stop_process

REPO_ROOT = Path(__file__).resolve().parents[2]
BOOT_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
RPC_TIMEOUT_S = 5.0

CLUSTER = "DefaultCluster"
TOPIC = "TopicTest"
MASTER_A = "127.0.0.1:10911"
MASTER_A_HA = "127.0.0.1:10912"
SLAVE_A = "127.0.0.1:10921"
SLAVE_A_HA = "127.0.0.1:10922"


@dataclasses.dataclass
class NamesrvProcess:
    process: subprocess.Popen[str]
    address: str
    log_path: Path

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        return self.process.wait(timeout=STOP_TIMEOUT_S)

    def log_text(self) -> str:
        return self.log_path.read_text()


def _wait_for_boot_line(process: subprocess.Popen[str], log_path: Path) -> str:
    """The address from ``The Name Server boot success. listen=HOST:PORT``."""
    assert process.stdout is not None
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([process.stdout], [], [], remaining)
        if not readable:
            break
        line = process.stdout.readline()
        if not line:  # the process exited
            break
        if line.startswith(BOOT_SUCCESS_MESSAGE):
            return line.strip().rpartition("listen=")[2]
    raise AssertionError(
        f"name server did not boot (exit code {process.poll()}):\n{log_path.read_text()}"
    )


@pytest.fixture
def start_namesrv(tmp_path: Path) -> Iterator[Callable[[], NamesrvProcess]]:
    """Starts name servers on free loopback ports; every one is stopped at the end."""
    started: list[subprocess.Popen[str]] = []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    ))

    def start() -> NamesrvProcess:
        log_path = tmp_path / f"namesrv-{len(started)}.log"
        with log_path.open("w") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", "nameserver", "--listen", "127.0.0.1:0"],
                cwd=REPO_ROOT, env=env, text=True,
                stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL,
            )
        started.append(process)
        return NamesrvProcess(process, _wait_for_boot_line(process, log_path), log_path)

    try:
        yield start
    finally:
        for process in started:
            stop_process(process, STOP_TIMEOUT_S)


def register_request(
    broker_addr: str, broker_id: int, ha_server_addr: str
) -> namesrv_pb2.RegisterBrokerRequest:
    return namesrv_pb2.RegisterBrokerRequest(
        cluster_name=CLUSTER,
        broker_name="broker-a",
        broker_addr=broker_addr,
        broker_id=broker_id,
        ha_server_addr=ha_server_addr,
        data_version=common_pb2.DataVersion(timestamp=int(time.time() * 1000), counter=1),
        topic_configs=[
            common_pb2.TopicConfig(
                topic_name=TOPIC, read_queue_nums=4, write_queue_nums=4,
                perm=PERM_READ | PERM_WRITE,
            )
        ],
    )


def test_two_independent_name_servers(start_namesrv: Callable[[], NamesrvProcess]) -> None:
    first = start_namesrv()
    second = start_namesrv()
    assert first.address != second.address

    with grpc.insecure_channel(first.address) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        master = stub.RegisterBroker(
            register_request(MASTER_A, MASTER_ID, MASTER_A_HA), timeout=RPC_TIMEOUT_S
        )
        assert master.status.code == common_pb2.SUCCESS
        slave = stub.RegisterBroker(
            register_request(SLAVE_A, 1, SLAVE_A_HA), timeout=RPC_TIMEOUT_S
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


def test_unregister_over_grpc_then_sigterm(start_namesrv: Callable[[], NamesrvProcess]) -> None:
    namesrv = start_namesrv()
    with grpc.insecure_channel(namesrv.address) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        stub.RegisterBroker(register_request(MASTER_A, MASTER_ID, MASTER_A_HA),
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
