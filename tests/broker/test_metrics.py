"""The broker's `/metrics` (broker/metrics.py): a real broker process scraped after known
traffic, the values checked against what the broker says over gRPC; bad requests on the
metrics port; a master's view of its slave's fall-behind; metricsPort checks."""

from __future__ import annotations

import dataclasses
import gzip
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.config import ConfigError, parse_config
from mqproto import common_pb2, messaging_pb2
from tests.support.brokers import (
    RPC_TIMEOUT_S,
    BrokerThread,
    Node,
    broker_props,
    pull_everything,
    write_conf,
)
from tests.support.processes import Processes
from tests.support.prom import Scrape, raw_http, scrape, status_of
from tests.support.waiting import wait_until

M = messaging_pb2
C = common_pb2
TOPIC = "MetricsTopic"
QUEUES = 4
GROUP = "MetricsGroup"
COMMITTED = 2  # the group's offset on every queue
PER_QUEUE = 5
StartBroker = Callable[..., BrokerThread]


def send_one(node: Node, queue_id: int, body: bytes = b"m" * 100) -> None:
    r = node.messaging.SendMessage(M.SendMessageRequest(
        message=M.Message(topic=TOPIC, body=body), queue_id=queue_id), timeout=RPC_TIMEOUT_S)
    assert r.status.code == C.SUCCESS, r.status


def start_node(processes: Processes, tmp_path: Path, **props: object) -> Node:
    proc = processes.broker(write_conf(tmp_path / "broker.conf", broker_props(
        tmp_path / "store", metricsPort=-1, **props)))
    return Node(proc.address)


def test_scrape_after_known_traffic(processes: Processes, tmp_path: Path,
                                    nodes: list[Node]) -> None:
    node = start_node(processes, tmp_path, flushDiskType="SYNC_FLUSH")
    nodes.append(node)
    metrics_addr = node.runtime().table["metricsAddr"]
    assert metrics_addr.startswith("127.0.0.1:")
    node.create_topic(TOPIC, QUEUES)

    sends = 0
    for q in range(QUEUES):
        for _ in range(PER_QUEUE):
            send_one(node, q)
            sends += 1
    batch = node.messaging.SendBatch(M.SendBatchRequest(
        topic=TOPIC, queue_id=0, messages=[M.Message(topic=TOPIC, body=b"b")] * 3),
        timeout=RPC_TIMEOUT_S)
    assert batch.status.code == C.SUCCESS, batch.status
    sends += 1
    stored = QUEUES * PER_QUEUE + 3
    for q in range(QUEUES):
        r = node.messaging.UpdateConsumerOffset(M.UpdateConsumerOffsetRequest(
            consumer_group=GROUP, topic=TOPIC, queue_id=q, commit_offset=COMMITTED),
            timeout=RPC_TIMEOUT_S)
        assert r.status.code == C.SUCCESS, r.status
    pulled = pull_everything(node.messaging, TOPIC, 1, group="Reader")
    assert len(pulled) == PER_QUEUE
    time.sleep(0.05)  # the oldest unconsumed message is at least this old

    s = scrape(metrics_addr)
    runtime = node.runtime()
    broker = {"cluster": "TestCluster", "broker": "broker-a", "brokerIP": node.address}
    assert s.value("rocketmq_broker_put_messages_total", **broker) == stored
    assert s.value("rocketmq_topic_put_messages_total", topic=TOPIC) == stored
    assert s.value("rocketmq_producer_offset", topic=TOPIC) == stored
    assert s.value("rocketmq_broker_tps", **broker) > 0
    assert s.value("rocketmq_producer_tps", topic=TOPIC) > 0
    assert s.value("rocketmq_broker_get_messages_total", **broker) == PER_QUEUE
    assert s.value("rocketmq_consumer_get_messages_total", topic=TOPIC,
                   group="Reader") == PER_QUEUE
    assert s.value("rocketmq_brokeruntime_commitlog_maxoffset", **broker) == \
        runtime.commit_log_max_offset > 0
    assert s.value("rocketmq_brokeruntime_commitlog_minoffset", **broker) == \
        runtime.commit_log_min_offset
    assert s.value("rocketmq_brokeruntime_dispatch_behind_bytes", **broker) == 0
    # SYNC_FLUSH: every send waited for its flush.
    assert s.value("rocketmq_brokeruntime_remain_howmanydata_toflush", **broker) == 0

    # Lag per queue: what each queue holds beyond the group's committed offset.
    lags = {}
    for q in range(QUEUES):
        expected = node.max_offset(TOPIC, q) - COMMITTED
        lags[q] = expected
        labels = {"topic": TOPIC, "group": GROUP, "queueid": str(q)}
        assert s.value("rocketmq_group_queue_diff", **labels) == expected
        assert s.value("rocketmq_group_queue_offset", **labels) == COMMITTED
    assert lags[0] == PER_QUEUE + 3 - COMMITTED
    assert s.value("rocketmq_group_diff", group=GROUP, topic=TOPIC, msgModel="1",
                   countOfOnlineConsumers="0") == sum(lags.values())
    assert s.value("rocketmq_consumer_offset", group=GROUP, topic=TOPIC) == \
        COMMITTED * QUEUES
    latency = s.value("rocketmq_group_get_latency_by_storetime", group=GROUP, topic=TOPIC)
    assert 50 <= latency < 60_000

    # Histograms: one observation per send request; at least one flush took time.
    assert s.value("rocketmq_send_latency_seconds_count", **broker) == sends
    assert s.value("rocketmq_send_latency_seconds_bucket", le="+Inf", **broker) == sends
    assert 0 < s.value("rocketmq_send_latency_seconds_sum", **broker) < sends * 10
    pmdt = [s.value(f"rocketmq_brokeruntime_pmdt_{suffix}", **broker)
            for suffix in ("0ms", "0to10ms", "10to50ms", "50to100ms", "100to200ms",
                           "200to500ms", "500to1s", "1to2s", "2to3s", "3to4s", "4to5s",
                           "5to10s", "10stomore")]
    assert sum(pmdt) == sends  # the exporter's put distribution: every send in one range
    flushes = s.value("rocketmq_storage_flush_latency_seconds_count", **broker)
    assert 1 <= flushes <= sends
    # Process metrics of prometheus_client.
    assert s.value("process_resident_memory_bytes") > 0
    assert s.find("python_info")

    # Caught up: the group commits the queues' max offsets, its diff and latency go to 0.
    for q in range(QUEUES):
        node.messaging.UpdateConsumerOffset(M.UpdateConsumerOffsetRequest(
            consumer_group=GROUP, topic=TOPIC, queue_id=q,
            commit_offset=node.max_offset(TOPIC, q)), timeout=RPC_TIMEOUT_S)
    s = scrape(metrics_addr)
    assert s.value("rocketmq_group_diff", group=GROUP, topic=TOPIC) == 0
    assert s.value("rocketmq_group_get_latency_by_storetime", group=GROUP, topic=TOPIC) == 0


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 404),
    (b"GET /metricsX HTTP/1.1\r\n\r\n", 404),
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
    (b"DELETE /metrics HTTP/1.1\r\n\r\n", 405),
    (b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n", 431),
    (b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n", 431),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),  # a TLS hello
    (b"GET /metrics HTTP/2.0\r\n\r\n", 505),
    (b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\n", 400),  # closed inside the head
])
def test_bad_requests_get_a_clear_error(start_broker: StartBroker, request_bytes: bytes,
                                        status: int) -> None:
    b = start_broker(metricsPort=-1)
    addr = b.controller.metrics_addr
    # half a head, then the client hangs up
    answer = raw_http(addr, request_bytes, half_close=request_bytes.endswith(b"HTTP/1.1\r\n"))
    assert status_of(answer) == status, answer[:300]
    assert b"Connection: close" in answer
    # The broker and the endpoint keep serving.
    assert scrape(addr).value("rocketmq_broker_put_messages_total") == 0


def test_head_and_gzip(start_broker: StartBroker) -> None:
    b = start_broker(metricsPort=-1)
    addr = b.controller.metrics_addr
    head = raw_http(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert status_of(head) == 200 and head.endswith(b"\r\n\r\n")  # headers only
    answer = raw_http(addr, b"GET /metrics?x=1 HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n")
    assert status_of(answer) == 200 and b"Content-Encoding: gzip" in answer
    body = gzip.decompress(answer.split(b"\r\n\r\n", 1)[1]).decode()
    assert Scrape(body).value("rocketmq_broker_put_messages_total") == 0


def test_a_silent_client_gets_408_and_others_are_served_meanwhile(
        start_broker: StartBroker) -> None:
    b = start_broker(metricsPort=-1)
    addr = b.controller.metrics_addr
    metrics = b.controller.metrics
    assert metrics is not None
    metrics.server.limits = dataclasses.replace(metrics.server.limits, head_timeout_s=0.5)
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as silent:
        silent.sendall(b"GET /metr")  # and nothing more
        assert scrape(addr).value("rocketmq_broker_put_messages_total") == 0
        answer = silent.recv(65536)
    assert status_of(answer) == 408


def test_metrics_off_by_default(start_broker: StartBroker) -> None:
    b = start_broker()
    assert b.controller.metrics is None
    assert Node(b.address).runtime().table["metricsAddr"] == ""


@pytest.mark.parametrize("port", ["-2", "65536", "x"])
def test_bad_metrics_port_is_refused(tmp_path: Path, port: str) -> None:
    with pytest.raises(ConfigError, match="metricsPort"):
        parse_config(broker_props(tmp_path, metricsPort=port), env={})


def test_master_reports_its_slave_fall_behind(tmp_path: Path) -> None:
    master = BrokerThread(broker_props(tmp_path / "master", metricsPort=-1))
    slave: BrokerThread | None = None
    try:
        slave = BrokerThread(broker_props(
            tmp_path / "slave", brokerRole="SLAVE", brokerId=1,
            haMasterAddress=master.controller.ha_server_addr))
        node = Node(master.address)
        try:
            node.create_topic(TOPIC, 1)
            send_one(node, 0)
            addr = master.controller.metrics_addr
            slave_addr = slave.address

            def synced() -> Scrape | None:
                s = scrape(addr)
                found = s.find("rocketmq_broker_slave_in_sync", brokerIP=slave_addr)
                if not found or found[0].value != 1:
                    return None
                diff = s.value("rocketmq_broker_commitlog_diff", brokerIP=slave_addr)
                return s if diff == 0 else None

            s = wait_until(synced, timeout=15, message="the slave in sync and caught up")
            assert s.value("rocketmq_broker_slave_fallbehind_seconds", brokerIP=slave_addr) == 0

            before = node.runtime().commit_log_max_offset
            slave.stop()  # the master keeps it as an absent slave of the group
            time.sleep(0.05)
            for _ in range(3):
                send_one(node, 0, b"z" * 500)
            after = node.runtime().commit_log_max_offset
            time.sleep(0.05)  # the first record the slave lacks is this old at least
            s = scrape(addr)
            assert s.value("rocketmq_broker_commitlog_diff", brokerIP=slave_addr) == \
                after - before > 1500
            assert s.value("rocketmq_broker_slave_in_sync", brokerIP=slave_addr) == 0
            assert s.value("rocketmq_broker_slave_fallbehind_seconds", brokerIP=slave_addr) > 0
        finally:
            node.close()
    finally:
        if slave is not None:
            slave.stop()
        master.stop()


def test_taken_metrics_port_fails_the_start_clearly(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on metricsPort {port}"):
            BrokerThread(broker_props(tmp_path / "store", metricsPort=port))


def test_per_queue_reads_happen_off_the_event_loop(start_broker: StartBroker) -> None:
    """The loop copies tables; every per-queue store read of a scrape is in the worker."""
    b = start_broker(metricsPort=-1)
    node = Node(b.address)
    try:
        node.create_topic(TOPIC, 64)
        send_one(node, 3)
        for q in range(64):
            node.messaging.UpdateConsumerOffset(M.UpdateConsumerOffsetRequest(
                consumer_group=GROUP, topic=TOPIC, queue_id=q, commit_offset=0),
                timeout=RPC_TIMEOUT_S)
        store = b.controller.store
        reads: list[str] = []

        def watched(name: str) -> Callable[..., object]:
            real = getattr(store, name)

            def read(*args: object) -> object:
                reads.append(threading.current_thread().name)
                return real(*args)
            return read

        for name in ("get_max_offset_in_queue", "get_min_offset_in_queue",
                     "get_message_store_timestamp"):
            setattr(store, name, watched(name))
        s = scrape(b.controller.metrics_addr)
        assert s.value("rocketmq_group_diff", group=GROUP, topic=TOPIC) == 1
        assert len(reads) >= 64 * 2
        assert all(name.startswith("broker-metrics") for name in reads), set(reads)
    finally:
        node.close()
