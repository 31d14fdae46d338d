"""The name server's `/metrics` (nameserver/metrics.py) on a real `python -m nameserver`
process: route table sizes, registration ages and requests by RPC after known calls; a bad
request on the metrics port."""

from __future__ import annotations

import re
import subprocess
import sys

import grpc
import pytest

from common.constants import MASTER_ID
from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.nameserver.registration import CLUSTER, MASTER_A, SLAVE_A, TOPIC, register_request
from tests.support.processes import REPO_ROOT, Process, Processes, child_env
from tests.support.prom import raw_http, scrape, status_of
from tests.support.waiting import wait_until

RPC_TIMEOUT_S = 5.0
_METRICS_LINE = re.compile(r"metrics served on http://(\S+)/metrics")


def metrics_address(namesrv: Process) -> str:
    match = wait_until(lambda: _METRICS_LINE.search(namesrv.log_text()), timeout=10,
                       message="the metrics line in the name server's log")
    return match[1]


def test_scrape_after_known_calls(processes: Processes) -> None:
    namesrv = processes.namesrv("--metrics-port", "-1")
    addr = metrics_address(namesrv)
    with grpc.insecure_channel(namesrv.address) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        for broker_addr, broker_id in ((MASTER_A, MASTER_ID), (SLAVE_A, 1)):
            r = stub.RegisterBroker(register_request(broker_addr, broker_id),
                                    timeout=RPC_TIMEOUT_S)
            assert r.status.code == common_pb2.SUCCESS
        for _ in range(3):
            stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC),
                                     timeout=RPC_TIMEOUT_S)
        nope = channel.unary_unary("/mqcluster.v1.NamesrvService/NoSuchCall")
        with pytest.raises(grpc.RpcError) as e:
            nope(b"", timeout=RPC_TIMEOUT_S)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED

    s = scrape(addr)
    assert s.value("rocketmq_namesrv_clusters") == 1
    assert s.value("rocketmq_namesrv_topics") == 1
    assert s.value("rocketmq_namesrv_broker_groups", cluster=CLUSTER) == 1
    assert s.value("rocketmq_namesrv_brokers", cluster=CLUSTER) == 2
    for broker_addr, broker_id in ((MASTER_A, "0"), (SLAVE_A, "1")):
        age = s.value("rocketmq_namesrv_broker_register_age_seconds", cluster=CLUSTER,
                      broker="broker-a", brokerIP=broker_addr, brokerId=broker_id)
        assert 0 <= age < 60
    assert s.value("rocketmq_namesrv_requests_total", method="RegisterBroker") == 2
    assert s.value("rocketmq_namesrv_requests_total", method="GetRouteInfoByTopic") == 3
    assert s.value("rocketmq_namesrv_requests_total", method="unknown") == 1
    assert s.value("process_resident_memory_bytes") > 0

    # A bad request gets a clear error; the name server keeps serving both ports.
    answer = raw_http(addr, b"GET /favicon.ico HTTP/1.1\r\n\r\n")
    assert status_of(answer) == 404 and b"only /metrics is served" in answer
    assert status_of(raw_http(addr, b"\x00\x01garbage\r\n\r\n")) == 400
    assert scrape(addr).value("rocketmq_namesrv_brokers", cluster=CLUSTER) == 2


def test_metrics_off_by_default(processes: Processes) -> None:
    namesrv = processes.namesrv()
    with grpc.insecure_channel(namesrv.address) as channel:
        namesrv_pb2_grpc.NamesrvServiceStub(channel).GetAllTopicList(
            namesrv_pb2.GetAllTopicListRequest(), timeout=RPC_TIMEOUT_S)
    assert "metrics served" not in namesrv.log_text()


@pytest.mark.parametrize("port", ["-2", "70000"])
def test_bad_metrics_port_exits_2(port: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "nameserver", "--listen", "127.0.0.1:0", "--metrics-port", port],
        cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "--metrics-port must be a port" in result.stderr
