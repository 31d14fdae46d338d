"""The lag job as people run it: a child process on a real standalone Spark cluster
(compared with local mode), in --follow mode while snapshots arrive, and without Java."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from spark_analytics.constants import OUTPUT_TABLES, QUEUE_LAG
from spark_analytics.schema import KIND_QUEUE
from tests.spark_analytics.conftest import require_spark
from tests.spark_analytics.scenario import WINDOW, scenario_rows
from tests.spark_analytics.snapshots import at, write_snapshots
from tests.spark_analytics.spark_processes import (
    REPO_ROOT,
    ConnectServer,
    StandaloneCluster,
    loopback_env,
    mqspark,
    run_lag,
    stop,
    wait_for,
)

pytestmark = pytest.mark.spark  # Spark JVMs as processes

FOLLOW_TIMEOUT_S = 300.0
# Each of these starts JVMs; on a loaded 2-core machine one takes minutes (the suite's
# default 300 s cut the standalone and --follow tests short under a load of 20).
SPARK_PROCESS_TEST_TIMEOUT_S = 900


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    require_spark()
    cluster = StandaloneCluster(tmp_path / "cluster")
    try:
        yield cluster
    finally:
        cluster.stop()


def sorted_rows(directory: Path) -> list[tuple[Any, ...]]:
    table = pq.read_table(directory)
    return sorted(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.timeout(SPARK_PROCESS_TEST_TIMEOUT_S)
def test_job_on_a_standalone_cluster_matches_local_mode(
        standalone_cluster: StandaloneCluster, scenario_dir: Path, outputs: Path,
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_lag("--in", str(scenario_dir), "--out", str(out), "--window", str(WINDOW),
                   "--master", standalone_cluster.url)
    assert done.returncode == 0, done.stderr[-5000:]
    assert "wrote 8 tables" in done.stderr
    for name in OUTPUT_TABLES:
        assert sorted_rows(out / name) == sorted_rows(outputs / name), name


@pytest.mark.timeout(SPARK_PROCESS_TEST_TIMEOUT_S)
def test_mqspark_starts_reports_and_stops_a_standalone_cluster(
        standalone_cluster: StandaloneCluster) -> None:
    """pyspark ships no sbin/start-master.sh: `mqspark start` runs the master and a worker,
    says the URL to give --master, refuses a second start and a taken port in one line, and
    `mqspark stop` ends exactly its JVMs."""
    work = standalone_cluster.work
    assert standalone_cluster.started.stdout.startswith(
        f"Spark master {standalone_cluster.url} with 1 worker(s) (web UI "
        f"{standalone_cluster.ui}; logs in {work.resolve() / 'logs'})\n"
        f"Try:  mqlag --master {standalone_cluster.url} ")
    status = mqspark("status", "--dir", str(work), "--json")
    assert status.returncode == 0, status.stderr
    listing = json.loads(status.stdout)
    assert (listing["master_url"], listing["alive_workers"]) == (standalone_cluster.url, 1)
    assert [(p["name"], p["alive"]) for p in listing["processes"]] == [
        ("master", True), ("worker-1", True)]
    pids = [p["pid"] for p in listing["processes"]]
    again = mqspark("start", "--dir", str(work))
    assert again.returncode == 0 and "runs in" in again.stdout and "already" in again.stdout
    port = standalone_cluster.url.rpartition(":")[2]
    taken = mqspark("start", "--dir", str(work / "other"), "--port", port)
    assert taken.returncode == 1 and taken.stderr == (
        f"mqspark start: port {port} on 127.0.0.1 is taken; choose another --port\n")
    stopped = standalone_cluster.stop()
    assert stopped.returncode == 0 and "stopped 2 Spark process(es)" in stopped.stdout
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids), "the JVMs gone",
             10, [])
    gone = mqspark("status", "--dir", str(work))
    assert gone.returncode == 1 and "no Spark cluster is running" in gone.stdout


@pytest.mark.timeout(SPARK_PROCESS_TEST_TIMEOUT_S)
def test_job_over_spark_connect_matches_local_mode(scenario_dir: Path, outputs: Path,
                                                   tmp_path: Path) -> None:
    require_spark()
    for module in ("pandas", "grpc_status", "google.protobuf", "zstandard"):
        pytest.importorskip(module, reason="Spark Connect client needs the 'spark-connect' "
                            "extra")
    server = ConnectServer(tmp_path / "connect")
    try:
        out = tmp_path / "out"
        done = run_lag("--in", str(scenario_dir), "--out", str(out), "--window", str(WINDOW),
                       "--remote", server.url)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-5000:]
    for name in OUTPUT_TABLES:
        assert sorted_rows(out / name) == sorted_rows(outputs / name), name


def snapshot_rows(first: int, last: int) -> list[dict[str, Any]]:
    return [r for r in scenario_rows() if at(first) <= r["snapshot_time"] <= at(last)]


def snapshot_times(out: Path) -> set[Any]:
    try:
        return set(pq.read_table(out / QUEUE_LAG, columns=["snapshot_time"])
                   .column(0).to_pylist())
    except (OSError, ValueError):
        return set()


def start_follower(data: Path, out: Path, log: Path) -> subprocess.Popen:
    with log.open("a") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "spark_analytics.lag", "--in", str(data), "--out",
             str(out), "--window", str(WINDOW), "--follow"], cwd=REPO_ROOT,
            env=loopback_env(), stdout=subprocess.DEVNULL, stderr=stderr,
            stdin=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.timeout(SPARK_PROCESS_TEST_TIMEOUT_S)
def test_follow_keeps_outputs_current_across_a_restart_and_stops_on_sigterm(
        tmp_path: Path) -> None:
    """Snapshots arrive while the follower runs and while it is stopped; after its restart
    the tables hold every snapshot once (its checkpoint and the manifest under --out)."""
    require_spark()
    data, out, log = tmp_path / "in", tmp_path / "out", tmp_path / "follow.log"
    write_snapshots(data, snapshot_rows(0, 1))
    follower = start_follower(data, out, log)
    try:
        wait_for(lambda: snapshot_times(out) == {at(0), at(1)}, "the first two snapshots",
                 FOLLOW_TIMEOUT_S, [log])
        write_snapshots(data, snapshot_rows(2, 2))
        wait_for(lambda: snapshot_times(out) == {at(i) for i in range(3)},
                 "the snapshot added later", FOLLOW_TIMEOUT_S, [log])
        assert sorted(p.name for p in out.iterdir() if not p.name.startswith((".", "_"))) \
            == sorted(OUTPUT_TABLES)
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(timeout=120) == 0, log.read_text()[-5000:]
        assert "stopped" in log.read_text()
        assert not list(out.glob("staging-*"))

        write_snapshots(data, snapshot_rows(3, 4))  # while nobody follows
        follower = start_follower(data, out, log)
        wait_for(lambda: snapshot_times(out) == {at(i) for i in range(5)},
                 "the snapshots that arrived while stopped", FOLLOW_TIMEOUT_S, [log])
        queue_rows = [r for r in snapshot_rows(0, 4) if r["kind"] == KIND_QUEUE]
        assert pq.read_table(out / QUEUE_LAG).num_rows == len(queue_rows)  # each once
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(timeout=120) == 0, log.read_text()[-5000:]
    finally:
        stop(follower)


def test_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(PATH=str(tmp_path / "no-java-here"), PYTHONPATH=str(REPO_ROOT))
    data = write_snapshots(tmp_path / "in", snapshot_rows(0, 0))
    done = subprocess.run([sys.executable, "-m", "spark_analytics.lag", "--in", str(data),
                           "--out", str(tmp_path / "out")], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("mqlag: java not found")
    assert not (tmp_path / "out").exists()
