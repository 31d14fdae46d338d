"""`mqcluster` gives every process a Prometheus /metrics port: the layout, the configs and
argv it writes, and a real local cluster scraped."""

from __future__ import annotations

import json
import re
from pathlib import Path

from broker.config import read_properties
from mqclient.cli.local_cluster import (
    PROMETHEUS_FILE,
    broker_conf,
    plan_layout,
    process_argv,
    prometheus_config,
)
from tests.support.processes import LocalCluster
from tests.support.prom import scrape

DASHBOARD = (Path(__file__).resolve().parents[2] / "compose" / "monitoring" / "grafana"
             / "dashboards" / "rocketmq-cluster.json")
SMALL_STORE = ("--set", "mappedFileSizeCommitLog=1048576", "--set", "maxHashSlotNum=1000",
               "--set", "maxIndexNum=4000")


def test_plan_gives_every_process_a_metrics_port(tmp_path: Path) -> None:
    layout = plan_layout(groups=1, slaves=1, namesrvs=1, ports=range(20000, 20005),
                         metrics_ports=range(21000, 21003), flush="ASYNC_FLUSH",
                         role="ASYNC_MASTER", broker_props={})
    assert [(n.name, n.metrics_port) for n in layout.nodes] == [
        ("namesrv-0", 21000), ("broker-a-0", 21001), ("broker-a-1", 21002)]
    assert [(n.port, n.ha_port) for n in layout.brokers] == [(20001, 20002), (20003, 20004)]
    conf = read_properties(broker_conf(layout, layout.brokers[1], tmp_path))
    assert conf["metricsPort"] == "21002"
    assert process_argv(layout.nodes[0], tmp_path)[-2:] == ["--metrics-port", "21000"]
    config = prometheus_config(layout)
    assert "targets: ['127.0.0.1:21000']" in config
    assert "targets: ['127.0.0.1:21001', '127.0.0.1:21002']" in config


def test_plan_without_metrics_ports_turns_metrics_off(tmp_path: Path) -> None:
    layout = plan_layout(groups=1, slaves=0, namesrvs=1, ports=[1, 2, 3],
                         flush="ASYNC_FLUSH", role="ASYNC_MASTER", broker_props={})
    assert all(n.metrics_port == 0 for n in layout.nodes)
    assert "metricsPort" not in read_properties(broker_conf(layout, layout.brokers[0],
                                                            tmp_path))
    assert "--metrics-port" not in process_argv(layout.nodes[0], tmp_path)


def test_local_cluster_serves_metrics(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    with LocalCluster(directory, *SMALL_STORE) as cluster:
        namesrv, broker = cluster.processes
        assert namesrv["metrics"].startswith("http://127.0.0.1:")
        assert "Metrics" in cluster.mqcluster("status").stdout
        namesrv_metrics = namesrv["metrics"].removeprefix("http://").removesuffix("/metrics")
        broker_metrics = broker["metrics"].removeprefix("http://").removesuffix("/metrics")
        n = scrape(namesrv_metrics)
        assert n.value("rocketmq_namesrv_brokers") == 1
        s = scrape(broker_metrics)
        # Every metric the compose Grafana dashboard queries is one the processes serve.
        served = set(re.findall(r"^# TYPE (\S+)", n.text + s.text, re.M))
        served |= {s.name for s in n.samples + s.samples}
        exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"]
                 for t in p.get("targets", [])]
        queried = set(re.findall(r"\b((?:rocketmq|process)_[a-z0-9_]+)", " ".join(exprs)))
        assert len(queried) > 20 and queried <= served, queried - served
        assert s.value("rocketmq_broker_put_messages_total", broker="broker-a",
                       brokerIP=broker["address"]) == 0
        assert broker_metrics in (directory / PROMETHEUS_FILE).read_text()
        cluster.down("--clean")
        assert not directory.exists()
