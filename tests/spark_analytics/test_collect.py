"""The collector against a real cluster (`mqcluster up`: a name server, broker-a and
broker-b masters): every broker answers; a master killed with kill -9 (which the name server
drops at once) stays in the snapshots as a broker that did not answer, and the collector
keeps going; with no name server answering, the first snapshot fails in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from mqclient.admin import MQAdmin
from spark_analytics.collect import Collector, write_snapshot
from tests.support.processes import REPO_ROOT, LocalCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)


def broker_rows(table: Any) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["broker_name"], r["broker_id"]): r for r in table.to_pylist()
            if r["kind"] == "broker"}


def test_a_killed_master_stays_in_the_snapshots_as_unreachable(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "cluster", "--groups", "2") as cluster, \
            Collector(cluster.namesrv_addr, timeout=2.0) as collector:
        first = collector.snapshot()
        rows = broker_rows(first.table())
        assert set(rows) == {("broker-a", 0), ("broker-b", 0)}
        assert all(r["reachable"] for r in rows.values()) and not first.unreachable

        victim = next(p for p in cluster.processes if p["name"] == "broker-b-0")
        os.kill(victim["pid"], signal.SIGKILL)
        with MQAdmin(cluster.namesrv_addr) as admin:  # the name server drops it at once
            wait_until(lambda: "broker-b" not in admin.cluster_info().groups, timeout=30,
                       message="broker-b dropped by the name server")

        after = collector.snapshot()
        path = write_snapshot(after.table(), tmp_path / "out", after.snapshot_ms)
        rows = broker_rows(pq.read_table(path))
        assert rows[("broker-a", 0)]["reachable"]
        gone = rows[("broker-b", 0)]
        assert gone["reachable"] is False and gone["broker_addr"] == victim["address"]
        assert gone["error"].startswith("no longer listed by the name servers")
        assert gone["cluster"] == rows[("broker-a", 0)]["cluster"]
        assert after.unreachable == [f"broker-b/0 {victim['address']}"]


def test_no_name_server_is_one_line_and_exit_1(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spark_analytics.collect", "-n", "127.0.0.1:1", "--out",
         str(tmp_path), "--once", "--timeout", "1"], cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("mqcollect: "), done.stderr
