"""The compose cluster (SPEC §9) in Docker: built from compose/, brought up under a project
name of its own on free ports, checked from the host and from a container on its network,
and removed (containers, network, volumes of that project only) even when a test fails.

The tests share one cluster and run in file order: the last one recreates the brokers with
docker-compose.in-network.yml.
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import grpc
import pyarrow.parquet as pq
import pytest

from mqclient import Message, Producer, SendStatus
from mqclient.admin import MQAdmin
from mqproto import messaging_pb2, messaging_pb2_grpc
from tests.compose.cluster import (
    ASYNC_FILE,
    BASE_FILE,
    BROKERS,
    COMPOSE_DIR,
    IN_NETWORK_FILE,
    REPO_ROOT,
    SERVICES,
    ComposeCluster,
    timed,
)
from tests.compose.roundtrip import round_trip, wait_for_slaves_in_sync
from tests.support.prom import Scrape

pytestmark = pytest.mark.timeout(1200)  # the first test may build the images from nothing

MASTERS = {"broker-a": "broker-a-0", "broker-b": "broker-b-0"}
SLAVES = {"broker-a": "broker-a-1", "broker-b": "broker-b-1"}
RPC_TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def cluster(docker_client: docker.DockerClient, compose_tool: list[str],
            compose_image: str) -> Iterator[ComposeCluster]:
    c = ComposeCluster(compose_tool, compose_image, docker_client,
                       extra_env={"MQ_COLLECT_INTERVAL": "2"})
    try:
        with timed("compose up -d (2 name servers, 4 brokers)"):
            c.compose("up", "-d")
        with timed("until every container is healthy"):
            c.wait_healthy()
        with timed("until both masters have their slave in sync"):
            wait_for_slaves_in_sync(c.namesrv_addr)
        yield c
    finally:
        with timed("compose down -v and the project's leftovers"):
            c.down()
        assert c.leftovers() == []


def mqadmin(cluster: ComposeCluster, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "mqclient.cli.mqadmin", *args, "-n",
                           cluster.namesrv_addr], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_image_runs_the_c_fast_path_as_a_non_root_user(docker_client: docker.DockerClient,
                                                       compose_image: str) -> None:
    out = docker_client.containers.run(
        compose_image, ["python", "-c", "import os, common._native, common.native; "
                        "print(os.getuid(), common.native.lib is not None)"], remove=True)
    assert out.decode().split() == ["10001", "True"]


def test_override_files_change_roles_and_addresses(compose_tool: list[str]) -> None:
    """compose.sh (which picks the compose tool) merges the async and in-network files."""
    done = subprocess.run([str(COMPOSE_DIR / "compose.sh"), "--async", "--in-network",
                           "config"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    merged = done.stdout
    assert merged.count("BROKER_ROLE: ASYNC_MASTER") == 2
    assert merged.count("BROKER_ROLE: SLAVE") == 2
    assert merged.count("FLUSH_DISK_TYPE: ASYNC_FLUSH") == 4
    assert "SYNC_MASTER" not in merged.replace("ASYNC_MASTER", "")
    for broker in BROKERS:
        assert f"BROKER_IP1: {broker}" in merged and f"BROKER_IP2: {broker}" in merged
    assert "network_mode: service:namesrv1" in merged
    assert "127.0.0.1:9876:9876" in merged  # published on the host's loopback only
    default = subprocess.run([*compose_tool, "-f", str(BASE_FILE), "config"],
                             capture_output=True, text=True, timeout=60).stdout
    assert default.count("BROKER_ROLE: SYNC_MASTER") == 2
    assert default.count("FLUSH_DISK_TYPE: SYNC_FLUSH") == 4
    assert default.count("BROKER_IP1: 127.0.0.1") == 4
    assert "network_mode: host" in default
    published = [line.strip() for line in default.splitlines() if line.endswith("/tcp")]
    # Two name servers; each broker's gRPC, send-channel and remoting (4.x clients) ports.
    assert len(published) == 14 and all(p.startswith("- 127.0.0.1:") for p in published)
    assert ASYNC_FILE.exists() and IN_NETWORK_FILE.exists()


def test_cluster_list_from_the_host(cluster: ComposeCluster) -> None:
    with timed("mqadmin clusterList from the host"):
        listed = json.loads(mqadmin(cluster, "clusterList", "--json"))
    rows = [(r["cluster"], r["broker_name"], r["broker_id"], r["addr"], r["role"], r["error"])
            for r in listed]
    assert rows == [
        ("DefaultCluster", "broker-a", 0, f"127.0.0.1:{cluster.port('broker-a-0')}",
         "SYNC_MASTER", None),
        ("DefaultCluster", "broker-a", 1, f"127.0.0.1:{cluster.port('broker-a-1')}",
         "SLAVE", None),
        ("DefaultCluster", "broker-b", 0, f"127.0.0.1:{cluster.port('broker-b-0')}",
         "SYNC_MASTER", None),
        ("DefaultCluster", "broker-b", 1, f"127.0.0.1:{cluster.port('broker-b-1')}",
         "SLAVE", None)]
    table = mqadmin(cluster, "clusterList")
    assert table.splitlines()[0].startswith("#Cluster Name") and len(table.splitlines()) == 5
    # compose.sh's wait agrees that everything is healthy.
    done = subprocess.run([str(COMPOSE_DIR / "compose.sh"), "-p", cluster.project, "wait", "30"],
                          env=cluster.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(line.split()[1] for line in done.stdout.splitlines()) == ["healthy"] * 6


def test_send_channels_are_advertised_at_their_published_ports(
        cluster: ComposeCluster) -> None:
    """Producers ask GetSendChannel where to send: 127.0.0.1 and the published port."""
    for broker in BROKERS:
        with grpc.insecure_channel(f"127.0.0.1:{cluster.port(broker)}") as channel:
            r = messaging_pb2_grpc.MessagingServiceStub(channel).GetSendChannel(
                messaging_pb2.GetSendChannelRequest(), timeout=RPC_TIMEOUT_S)
        assert r.address == f"127.0.0.1:{cluster.port(broker, send=True)}"


def test_produce_and_consume_from_the_host(cluster: ComposeCluster) -> None:
    count = 200
    with timed(f"host: {count} sync sends and a push consumer through the published ports"):
        result = round_trip(cluster.namesrv_addr, "HostTopic", count)
    assert result["statuses"] == {"SEND_OK": count}
    assert set(result["brokers"]) == {"broker-a", "broker-b"}
    assert result["received"] == sorted(f"body-{i}" for i in range(count))


def test_sync_master_replicates_to_its_slave(cluster: ComposeCluster) -> None:
    producer = Producer("ReplicationProducer", cluster.namesrv_addr).start()
    try:
        results = [producer.send(Message("ReplicationTopic", b"r" * 1024, keys=[f"r{i}"]))
                   for i in range(100)]
    finally:
        producer.shutdown()
    # SEND_OK from a SYNC_MASTER: its slave acked the message.
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    with MQAdmin(cluster.namesrv_addr) as admin:
        for group, master in MASTERS.items():
            master_max = admin.broker_runtime(f"127.0.0.1:{cluster.port(master)}"
                                              ).commit_log_max_offset
            assert master_max > 100 * 1024 // 2
            slave_addr = f"127.0.0.1:{cluster.port(SLAVES[group])}"
            deadline = time.monotonic() + 10
            while admin.broker_runtime(slave_addr).commit_log_max_offset < master_max:
                assert time.monotonic() < deadline, f"{group}: the slave stays behind"
                time.sleep(0.1)
            # The slave replicates from the master's container name (brokerIP2).
            link = admin.ha_status(slave_addr).master_link
            assert link is not None and link.connected
            assert link.master_addr == f"{master}:{cluster.port(master) + 1}"


METRICS_PORT = 5557  # compose/conf/broker.conf's metricsPort, the name servers' --metrics-port


def test_every_process_serves_metrics(cluster: ComposeCluster) -> None:
    """What compose/monitoring/prometheus.yml scrapes: each container's /metrics on the
    compose network (fetched from namesrv1's container)."""
    code = (
        "import json, urllib.request\n"
        "out = {}\n"
        f"for host in {[*SERVICES]!r}:\n"
        f"    url = f'http://{{host}}:{METRICS_PORT}/metrics'\n"
        "    out[host] = urllib.request.urlopen(url, timeout=10).read().decode()\n"
        "print(json.dumps(out))\n")
    deadline = time.monotonic() + 30
    while True:
        scrapes = {service: Scrape(text) for service, text
                   in json.loads(cluster.exec_python("namesrv1", code)).items()}
        in_sync = [scrapes[master].value("rocketmq_broker_slave_in_sync",
                                         brokerIP=f"127.0.0.1:{cluster.port(slave)}")
                   for master, slave in zip(MASTERS.values(), SLAVES.values(), strict=True)]
        if in_sync == [1, 1]:
            break
        assert time.monotonic() < deadline, f"slaves in sync per the masters: {in_sync}"
        time.sleep(1)
    for service, s in scrapes.items():
        assert s.value("process_resident_memory_bytes") > 0, service
        if service.startswith("namesrv"):
            assert s.value("rocketmq_namesrv_brokers", cluster="DefaultCluster") == 4
        else:
            assert s.value("rocketmq_broker_put_messages_total", cluster="DefaultCluster") >= 0


def collector_built() -> bool:
    return importlib.util.find_spec("spark_analytics.collect") is not None


def broker_rows_of_a_new_snapshot(cluster: ComposeCluster, after_ms: int,
                                  timeout: float = 60.0) -> list[dict[str, Any]]:
    """The broker rows of the first snapshot the collector wrote after `after_ms` (its
    files are named by their time), read from the analytics volume through the container."""
    collector = cluster.container("collector")
    deadline = time.monotonic() + timeout
    while True:
        listing = collector.exec_run(["find", "/var/lib/mq/analytics", "-name",
                                      "snapshot-*.parquet"])
        files = sorted((int(Path(f).stem.split("-")[1]), f)
                       for f in listing.output.decode().split() if listing.exit_code == 0)
        newer = [f for ms, f in files if ms > after_ms]
        if newer:
            break
        collector.reload()
        assert collector.status == "running", collector.logs(tail=30).decode()
        assert time.monotonic() < deadline, collector.logs(tail=30).decode()
        time.sleep(1)
    stream, _ = collector.get_archive(newer[0])
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.extractfile(tar.getmembers()[0])
        assert member is not None
        rows = pq.read_table(io.BytesIO(member.read())).to_pylist()
    return sorted((r for r in rows if r["kind"] == "broker"),
                  key=lambda r: (r["broker_name"], r["broker_id"]))


def test_analytics_profile_collects_into_its_volume(cluster: ComposeCluster) -> None:
    """The collector (host network) reaches every broker at its advertised address."""
    if not collector_built():
        pytest.skip("spark_analytics.collect (the lag collector) is not in this checkout")
    with timed("analytics profile: collector up and a snapshot of every broker"):
        cluster.compose("--profile", "analytics", "up", "-d", "collector")
        rows = broker_rows_of_a_new_snapshot(cluster, time.time_ns() // 1_000_000)
    assert [(r["broker_name"], r["broker_id"], r["broker_addr"], r["reachable"], r["error"])
            for r in rows] == [
        (b[:8], int(b[9]), f"127.0.0.1:{cluster.port(b)}", True, None) for b in BROKERS]


def test_clients_inside_the_network(cluster: ComposeCluster,
                                    docker_client: docker.DockerClient) -> None:
    """Recreates the brokers with docker-compose.in-network.yml; a client container on the
    project network then produces and consumes through the containers' names."""
    with timed("in-network override: brokers recreated and healthy"):
        cluster.compose("up", "-d", *BROKERS, files=[BASE_FILE, IN_NETWORK_FILE])
        cluster.wait_healthy()
    with MQAdmin(cluster.namesrv_addr) as admin:  # the name servers are still published
        addrs = {(g.broker_name, i): a for g in admin.cluster_info().all_groups()
                 for i, a in g.addrs.items()}
    assert addrs == {("broker-a", 0): f"broker-a-0:{cluster.port('broker-a-0')}",
                     ("broker-a", 1): f"broker-a-1:{cluster.port('broker-a-1')}",
                     ("broker-b", 0): f"broker-b-0:{cluster.port('broker-b-0')}",
                     ("broker-b", 1): f"broker-b-1:{cluster.port('broker-b-1')}"}

    # broker.config.local_ip() in a container: one of its own addresses, not loopback. The
    # brokers sit on two networks (default and registration), and which address the host
    # name resolves to differs from run to run, so the client below probes the address on
    # the network it shares with the broker.
    local = cluster.exec_python("broker-a-0", "from broker.config import local_ip; "
                                              "print(local_ip())")
    cluster.container("broker-a-0").reload()
    networks = cluster.container("broker-a-0").attrs["NetworkSettings"]["Networks"]
    assert local in {n["IPAddress"] for n in networks.values()}
    broker_ip = networks[cluster.network]["IPAddress"]

    count = 100
    with timed(f"client container: {count} sends and a push consumer by container names"):
        out = docker_client.containers.run(
            cluster.image,
            ["python", "/tests/roundtrip.py", "namesrv1:9876;namesrv2:9876", "NetTopic",
             str(count), "--probe", f"{broker_ip}:{cluster.port('broker-a-0')}"],
            network=cluster.network, remove=True,
            volumes={str(REPO_ROOT / "tests" / "compose"): {"bind": "/tests", "mode": "ro"}},
            labels={"com.docker.compose.project": cluster.project})
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["statuses"] == {"SEND_OK": count}
    assert set(result["brokers"]) == {"broker-a", "broker-b"}
    assert result["received"] == sorted(f"body-{i}" for i in range(count))
    assert result["probes"] == {f"{broker_ip}:{cluster.port('broker-a-0')}": True}

    if not collector_built():
        return
    # The collector, moved onto the network by the override, reaches the brokers by name.
    with timed("in-network override: collector recreated and a snapshot of every broker"):
        cluster.compose("--profile", "analytics", "up", "-d", "collector",
                        files=[BASE_FILE, IN_NETWORK_FILE])
        # Snapshots from after the old collector (host network) was replaced.
        rows = broker_rows_of_a_new_snapshot(cluster, time.time_ns() // 1_000_000)
    assert [(r["broker_addr"], r["reachable"]) for r in rows] == [
        (f"{b}:{cluster.port(b)}", True) for b in BROKERS]
