"""The collector and the lag job against a real cluster (`mqcluster up`: a name server,
broker-a master and slave), with lag and fall-behind known by construction: produce N,
consume M, SIGSTOP the slave under load for longer than the master's link timeout, reset a
group; then the Spark job over what was collected."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

from mqclient import ConsumeFromWhere, Message, Producer, PushConsumer
from mqclient.admin import RESET_EARLIEST, MQAdmin
from spark_analytics.collect import Collector, write_snapshot
from spark_analytics.constants import (
    BROKER_HEALTH,
    GROUP_STATUS,
    QUEUE_LAG,
    QUEUE_STATUS,
    SLAVE_FALL_BEHIND,
)
from spark_analytics.lag import run_lag_job
from tests.support.processes import LocalCluster
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.timeout(600)
TOPIC, GROUP = "LagTopic", "LagGroup"
STUCK_GROUP, STUCK_AT = "StuckGroup", 10  # commits offset 10 once, then nothing
QUEUES = 4
CONSUMED, UNCONSUMED = 200, 120  # per topic; the producer spreads them over the 4 queues
LINK_TIMEOUT_MS = 3000  # haHousekeepingInterval: the master drops a silent slave after this


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    directory = tmp_path_factory.mktemp("lag") / "cluster"
    with LocalCluster(directory, "--groups", "1", "--slaves", "1",
                      "--set", f"haHousekeepingInterval={LINK_TIMEOUT_MS}",
                      "--set", "mappedFileSizeCommitLog=1048576") as local:
        yield local


def node(cluster: LocalCluster, name: str) -> dict[str, Any]:
    return next(p for p in cluster.processes if p["name"] == name)


def rows(snapshot: Any, kind: str, **match: object) -> list[dict[str, Any]]:
    return [r for r in snapshot.table().to_pylist()
            if r["kind"] == kind and all(r[k] == v for k, v in match.items())]


def store_max_offset(store_dir: Path) -> int:
    """The commitlog max offset of a store directory, read from its files."""
    out = subprocess.run([sys.executable, "-m", "store.inspect", str(store_dir), "--json"],
                         capture_output=True, text=True, timeout=60, cwd="/")
    return int(json.loads(out.stdout)["commitlog"]["max_offset"])


def test_collector_and_lag_job_see_lag_fall_behind_a_stop_and_a_rewind(
        cluster: LocalCluster, tmp_path: Path, spark: SparkSession) -> None:
    namesrv = cluster.namesrv_addr
    out = tmp_path / "collected"
    master_addr = node(cluster, "broker-a-0")["address"]
    with MQAdmin(namesrv) as admin, Collector(namesrv, timeout=2.0) as collector:
        admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        wait_until(lambda: _has_route(admin), timeout=30, message="route")
        wait_until(lambda: all(s.master_link.connected for s in admin.ha_status_of_cluster(
            "DefaultCluster") if not s.master), timeout=30, message="the slave linked")
        producer = Producer("LagProducer", namesrv).start()
        try:
            for i in range(CONSUMED):
                producer.send(Message(TOPIC, b"consumed-%d" % i))
            consumed = _consume_all(namesrv, CONSUMED)
            assert consumed == CONSUMED
            for q in range(QUEUES):
                admin.update_consumer_offset(master_addr, STUCK_GROUP, TOPIC, q, STUCK_AT)
            for i in range(UNCONSUMED):
                producer.send(Message(TOPIC, b"waiting-%d" % i))

            # Lag per queue: exactly what was produced minus what was consumed.
            snap = collector.snapshot()
            write_snapshot(snap.table(), out, snap.snapshot_ms)
            first_lags = {r["queue_id"]: r["broker_offset"] - r["consumer_offset"]
                          for r in rows(snap, "queue", group=GROUP, topic=TOPIC)}
            first_time = snap.snapshot_ms
            queues = rows(snap, "queue", group=GROUP, topic=TOPIC)
            assert len(queues) == QUEUES
            lags = [r["broker_offset"] - r["consumer_offset"] for r in queues]
            assert sum(lags) == UNCONSUMED and sum(r["broker_offset"] for r in queues) == (
                CONSUMED + UNCONSUMED)
            for r in queues:
                lag = r["broker_offset"] - r["consumer_offset"]
                assert r["first_unconsumed_ms"] is not None if lag else True
                assert r["lag_bytes_method"] == "exact"
                assert r["lag_bytes"] > 0 if lag else r["lag_bytes"] == 0
                assert r["last_commit_ms"] is not None and r["online_consumers"] == 0
            (master_row,) = rows(snap, "broker", broker_id=0)
            assert master_row["reachable"] and master_row["role"] == "ASYNC_MASTER"
            (slave_row,) = rows(snap, "slave")
            assert (slave_row["slave_id"], slave_row["link_state"]) == (1, "connected")

            # The slave stopped under load for longer than the link timeout: its fall-behind
            # keeps growing in every snapshot, it is no longer in sync, its broker row says
            # it did not answer.
            slave = node(cluster, "broker-a-1")
            loading = threading.Event()
            loader = threading.Thread(target=_load, args=(producer, loading), daemon=True)
            os.kill(slave["pid"], signal.SIGSTOP)
            try:
                loader.start()
                behind: list[int] = []
                for _ in range(4):  # 2 s timeout each: > LINK_TIMEOUT_MS in all
                    snap = collector.snapshot()
                    write_snapshot(snap.table(), out, snap.snapshot_ms)
                    (link,) = rows(snap, "slave")
                    behind.append(link["fall_behind_bytes"])
                    (gone,) = rows(snap, "broker", broker_id=1)
                    assert not gone["reachable"] and "DEADLINE_EXCEEDED" in gone["error"]
                assert behind == sorted(behind) and behind[-1] > behind[1] > 0
                assert link["link_state"] != "connected" and not link["in_sync"]
                assert link["fall_behind_seconds"] > LINK_TIMEOUT_MS / 1000
                loading.set()
                loader.join(30)
                snap = collector.snapshot()
                write_snapshot(snap.table(), out, snap.snapshot_ms)
                (link,) = rows(snap, "slave")
                (master_row,) = rows(snap, "broker", broker_id=0)
                slave_max = store_max_offset(Path(cluster.directory) / "broker-a-1" / "store")
                assert link["slave_ack_offset"] == slave_max
                assert link["fall_behind_bytes"] == master_row["commitlog_max_offset"] - slave_max
                paused_time, paused_behind = snap.snapshot_ms, link["fall_behind_bytes"]

                # A group reset to the earliest offsets (its consumer is offline).
                resets = admin.reset_offset_by_time(GROUP, TOPIC, RESET_EARLIEST)
                assert {r.new_offset for r in resets} == {0} and len(resets) == QUEUES
                snap = collector.snapshot()
                write_snapshot(snap.table(), out, snap.snapshot_ms)
                assert {r["consumer_offset"] for r in rows(snap, "queue", group=GROUP,
                                                            topic=TOPIC)} == {0}
            finally:
                os.kill(slave["pid"], signal.SIGCONT)

            # Back: the slave catches up, its fall-behind returns to 0.
            def caught_up() -> bool:
                s = collector.snapshot()
                write_snapshot(s.table(), out, s.snapshot_ms)
                (link,) = rows(s, "slave")
                return link["fall_behind_bytes"] == 0 and link["in_sync"]

            wait_until(caught_up, timeout=60, interval=0.5, message="the slave caught up")
        finally:
            producer.shutdown()
    table = pq.read_table(out / "snapshots")  # partitioned by date and hour
    assert table.num_rows > 0 and {"date", "hour"} <= set(table.column_names)
    assert not list(out.rglob(".*.tmp"))

    # The lag job over every snapshot taken (the window covers them all).
    lag_out = tmp_path / "lag"
    snapshots = len(list((out / "snapshots").rglob("*.parquet")))
    run_lag_job(spark, str(out), str(lag_out), window=snapshots)
    queue_lag = pq.read_table(lag_out / QUEUE_LAG).to_pylist()
    at_first = {r["queue_id"]: r["message_lag"] for r in queue_lag
                if r["group"] == GROUP and r["topic"] == TOPIC
                and _ms(r["snapshot_time"]) == first_time}
    assert at_first == first_lags and sum(at_first.values()) == UNCONSUMED
    status = {(r["group"], r["topic"], r["queue_id"]): r["status"]
              for r in pq.read_table(lag_out / QUEUE_STATUS).to_pylist()}
    assert {status[GROUP, TOPIC, q] for q in range(QUEUES)} == {"REWIND"}  # the reset
    assert {status[STUCK_GROUP, TOPIC, q] for q in range(QUEUES)} == {"STOP"}  # no commits
    groups = {(r["group"], r["topic_kind"]): r["status"]
              for r in pq.read_table(lag_out / GROUP_STATUS).to_pylist()}
    assert groups[GROUP, "normal"] == "REWIND" and groups[STUCK_GROUP, "normal"] == "STOP"
    slaves = sorted(pq.read_table(lag_out / SLAVE_FALL_BEHIND).to_pylist(),
                    key=lambda r: r["snapshot_time"])
    (paused,) = [r for r in slaves if _ms(r["snapshot_time"]) == paused_time]
    assert paused["fall_behind_bytes"] == paused_behind and not paused["in_sync"]
    assert slaves[-1]["fall_behind_bytes"] == 0 and slaves[-1]["in_sync"]
    health = pq.read_table(lag_out / BROKER_HEALTH).to_pylist()
    assert any(not r["reachable"] and r["broker_id"] == 1 for r in health)


def _ms(t: datetime.datetime) -> int:
    return round(t.timestamp() * 1000)


def _has_route(admin: MQAdmin) -> bool:
    try:
        route = admin.topic_route(TOPIC)
    except Exception:
        return False
    return sum(q.write_queue_nums for q in route.queue_datas) == QUEUES


def _consume_all(namesrv: str, expected: int) -> int:
    """A push consumer of GROUP consumes what is there, commits and leaves."""
    seen: set[bytes] = set()
    lock = threading.Lock()

    def listener(msgs: list[Any]) -> None:
        with lock:
            seen.update(m.body for m in msgs)

    consumer = PushConsumer(GROUP, namesrv,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener_concurrently(listener)
    consumer.start()
    try:
        wait_until(lambda: len(seen) >= expected, timeout=60, message="consumed")
    finally:
        consumer.shutdown()
    return len(seen)


def _load(producer: Producer, stop: threading.Event) -> None:
    i = 0
    while not stop.wait(0.02):
        producer.send(Message(TOPIC, b"load-%d" % i))
        i += 1
