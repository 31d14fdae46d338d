"""The lag job on the hand-made history of scenario.py: every figure below is worked out by
hand from the rows there (the job runs once, in the shared SparkSession: conftest's
`outputs`; the tests read its Parquet outputs with pyarrow, as other tools would)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from spark_analytics import constants as C
from tests.spark_analytics.snapshots import at


def table(out: Path, name: str) -> list[dict[str, Any]]:
    return pq.read_table(out / name).to_pylist()


def queue_row(out: Path, group: str, topic: str, queue_id: int, i: int,
              broker_name: str = "broker-a") -> dict[str, Any]:
    found = [r for r in table(out, C.QUEUE_LAG)
             if (r["group"], r["topic"], r["queue_id"], r["broker_name"]) ==
             (group, topic, queue_id, broker_name) and r["snapshot_time"] == at(i)]
    assert len(found) == 1, found
    return found[0]


def by_queue(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    return {(r["group"], r["topic"], r["broker_name"], r["queue_id"]): r for r in rows}


def test_every_output_is_published_and_no_staging_is_left(outputs: Path) -> None:
    visible = [p.name for p in outputs.iterdir() if not p.name.startswith(("_", "."))]
    assert sorted(visible) == sorted(C.OUTPUT_TABLES)


def test_message_lag_never_committed_and_retry_dlq_kinds(outputs: Path) -> None:
    never = queue_row(outputs, "G_NEVER", "TopicA", 0, 4)
    assert (never["message_lag"], never["never_committed"], never["consumer_offset"]) == \
        (100, True, None)
    ok = queue_row(outputs, "G_OK", "TopicA", 1, 2)
    assert (ok["message_lag"], ok["never_committed"], ok["consumer_offset"]) == (160, False, 60)
    kinds = {(r["topic"], r["topic_kind"]) for r in table(outputs, C.QUEUE_LAG)
             if r["group"] == "G_OK"}
    assert kinds == {("TopicA", "normal"), ("%RETRY%G_OK", "retry"), ("%DLQ%G_OK", "dlq")}


def test_byte_lag_methods_and_broker_means(outputs: Path) -> None:
    def bytes_of(group: str, topic: str, q: int, i: int, broker: str = "broker-a") -> tuple:
        r = queue_row(outputs, group, topic, q, i, broker)
        return r["byte_lag"], r["byte_lag_method"]

    assert bytes_of("G_OK", "TopicA", 0, 1) == (1000, "exact")
    assert bytes_of("G_OK", "%RETRY%G_OK", 0, 2) == (300, "estimated")
    # broker-a's mean: (1000 + 300) / (5 + 3) at odd snapshots, 300 / 3 at even ones
    assert bytes_of("G_WARN", "TopicA", 0, 1) == (1625, "average")
    assert bytes_of("G_WARN", "TopicA", 0, 4) == (4000, "average")
    assert bytes_of("G_WARN", "TopicA", 0, 0) == (0, "caught_up")
    # broker-b: 5000 / 10 at 1, 9000 / 30 at 3, where none is known the mean so far:
    # 5000 / 10 at 2, (5000 + 9000) / (10 + 30) at 4
    assert bytes_of("G_BYTES", "TopicC", 0, 1, "broker-b") == (5000, "exact")
    assert bytes_of("G_BYTES", "TopicC", 1, 1, "broker-b") == (5000, "average")
    assert bytes_of("G_BYTES", "TopicC", 0, 3, "broker-b") == (9000, "average")
    assert bytes_of("G_BYTES", "TopicC", 1, 3, "broker-b") == (9000, "estimated")
    # no figure at 2: the mean of broker-b's snapshots so far (500 at 1)
    assert bytes_of("G_BYTES", "TopicC", 0, 2, "broker-b") == (10000, "average")
    assert bytes_of("G_BYTES", "TopicC", 1, 4, "broker-b") == (14000, "average")
    # no byte figure anywhere on broker-a for the DLQ? It has none and lag 5: average of a-4
    assert bytes_of("G_OK", "%DLQ%G_OK", 0, 4) == (500, "average")


@pytest.mark.parametrize(("group", "q", "i", "seconds", "method"), [
    ("G_OK", 0, 1, 2.0, "store_time"),
    ("G_OK", 0, 2, 0.0, "caught_up"),
    ("G_WARN", 0, 3, 3.0, "store_time"),
    ("G_NEVER", 0, 4, 50.0, "store_time"),
])
def test_time_lag_from_store_times(outputs: Path, group: str, q: int, i: int, seconds: float,
                                   method: str) -> None:
    r = queue_row(outputs, group, "TopicA", q, i)
    assert (r["time_lag_s"], r["time_lag_method"]) == (seconds, method)


@pytest.mark.parametrize(("q", "i", "seconds", "method"), [
    (0, 0, 0.0, "caught_up"),
    (0, 1, 10.0, "interpolated"),  # position 100 = the point of snapshot 0
    (0, 2, 18.0, "interpolated"),  # 120: 2 s after snapshot 0 (100 messages per 10 s)
    (0, 3, 25.0, "interpolated"),
    (0, 4, 35.0, "interpolated"),
    (1, 0, None, "unknown"),  # one point: no line to extrapolate on
    (1, 1, 20.0, "extrapolated"),  # 900 is below every point: 100 ms a message
    (1, 4, 50.0, "extrapolated"),
])
def test_time_lag_interpolated_in_the_manner_of_kafka_lag_exporter(
        outputs: Path, q: int, i: int, seconds: float | None, method: str) -> None:
    r = queue_row(outputs, "G_INTERP", "TopicB", q, i)
    assert r["time_lag_s"] == pytest.approx(seconds) if seconds is not None \
        else r["time_lag_s"] is None
    assert r["time_lag_method"] == method


def test_queue_statuses_cover_every_status(outputs: Path) -> None:
    statuses = {k: r["status"] for k, r in by_queue(table(outputs, C.QUEUE_STATUS)).items()}
    assert statuses == {
        ("G_OK", "TopicA", "broker-a", 0): "OK",
        ("G_OK", "TopicA", "broker-a", 1): "OK",  # went back, but before the window
        ("G_OK", "%RETRY%G_OK", "broker-a", 0): "STALL",
        ("G_OK", "%DLQ%G_OK", "broker-a", 0): "STOP",
        ("G_WARN", "TopicA", "broker-a", 0): "WARN",
        ("G_STALL", "TopicA", "broker-a", 0): "STALL",
        ("G_STOP", "TopicA", "broker-a", 0): "STOP",
        ("G_STOP", "TopicA", "broker-a", 1): "STOP",
        ("G_REWIND", "TopicA", "broker-a", 0): "REWIND",
        ("G_NEVER", "TopicA", "broker-a", 0): "STALL",
        ("G_INTERP", "TopicB", "broker-a", 0): "WARN",
        ("G_INTERP", "TopicB", "broker-a", 1): "STALL",
        ("G_BYTES", "TopicC", "broker-b", 0): "STALL",
        ("G_BYTES", "TopicC", "broker-b", 1): "STALL",
        ("G_C", "TopicD", "broker-c", 0): "OK",
    }


def test_queue_status_window_and_details(outputs: Path) -> None:
    rows = by_queue(table(outputs, C.QUEUE_STATUS))
    warn = rows[("G_WARN", "TopicA", "broker-a", 0)]
    assert (warn["snapshot_time"], warn["window_start"], warn["window_snapshots"]) == \
        (at(4), at(1), 4)
    assert (warn["window_start_offset"], warn["window_start_lag"], warn["message_lag"]) == \
        (110, 10, 40)
    stop = rows[("G_STOP", "TopicA", "broker-a", 0)]
    assert stop["commit_age_s"] == pytest.approx(100.1)
    never = rows[("G_NEVER", "TopicA", "broker-a", 0)]
    assert (never["window_start_offset"], never["never_committed"]) == (None, True)
    silent = rows[("G_C", "TopicD", "broker-c", 0)]  # its broker did not answer at 4
    assert (silent["snapshot_time"], silent["window_start"]) == (at(3), at(0))


def test_group_status_is_the_worst_queue_with_counts(outputs: Path) -> None:
    rows = {(r["group"], r["topic_kind"]): r for r in table(outputs, C.GROUP_STATUS)}
    assert {k: r["status"] for k, r in rows.items()} == {
        ("G_OK", "normal"): "OK", ("G_OK", "retry"): "STALL", ("G_OK", "dlq"): "STOP",
        ("G_WARN", "normal"): "WARN", ("G_STALL", "normal"): "STALL",
        ("G_STOP", "normal"): "STOP", ("G_REWIND", "normal"): "REWIND",
        ("G_NEVER", "normal"): "STALL", ("G_INTERP", "normal"): "STALL",
        ("G_BYTES", "normal"): "STALL", ("G_C", "normal"): "OK"}
    interp = rows[("G_INTERP", "normal")]
    assert (interp["queues"], interp["warn_queues"], interp["stall_queues"],
            interp["ok_queues"]) == (2, 1, 1, 0)
    assert (interp["worst_topic"], interp["worst_queue_id"], interp["message_lag_sum"]) == \
        ("TopicB", 1, 350 + 500)
    assert rows[("G_NEVER", "normal")]["never_committed_queues"] == 1


def test_roll_ups_per_group_topic_group_and_cluster(outputs: Path) -> None:
    topic = [r for r in table(outputs, C.GROUP_TOPIC_LAG)
             if (r["group"], r["topic"], r["snapshot_time"]) == ("G_OK", "TopicA", at(3))]
    assert len(topic) == 1
    assert (topic[0]["queues"], topic[0]["message_lag_sum"], topic[0]["message_lag_max"],
            topic[0]["worst_queue_id"], topic[0]["time_lag_max_s"]) == (2, 165, 160, 1, 10.0)
    groups = {r["topic_kind"]: r for r in table(outputs, C.GROUP_LAG)
              if (r["group"], r["snapshot_time"]) == ("G_OK", at(3))}
    assert {k: r["message_lag_sum"] for k, r in groups.items()} == \
        {"normal": 165, "retry": 3, "dlq": 5}
    assert groups["dlq"]["worst_topic"] == "%DLQ%G_OK"
    cluster = [r for r in table(outputs, C.CLUSTER_LAG)
               if r["snapshot_time"] == at(4) and r["topic_kind"] == "normal"]
    assert len(cluster) == 1
    c = cluster[0]
    assert (c["groups"], c["queues"], c["message_lag_sum"], c["message_lag_max"]) == \
        (8, 12, 1570, 500)
    assert (c["worst_group"], c["worst_topic"], c["worst_broker_name"], c["worst_queue_id"]) \
        == ("G_INTERP", "TopicB", "broker-a", 1)
    assert c["time_lag_unknown_queues"] == 0


def test_slave_fall_behind_from_ack_or_slave_max(outputs: Path) -> None:
    rows = {(r["slave_id"], r["snapshot_time"]): r for r in table(outputs, C.SLAVE_FALL_BEHIND)}
    acked = rows[(1, at(4))]
    assert (acked["fall_behind_bytes"], acked["fall_behind_bytes_from"],
            acked["fall_behind_seconds"], acked["cross_check_bytes"],
            acked["slave_ack_offset"]) == (500, "ack", 0.5, 800, 13_500)
    no_ack = rows[(2, at(4))]
    assert (no_ack["slave_ack_offset"], no_ack["fall_behind_bytes"],
            no_ack["fall_behind_bytes_from"], no_ack["cross_check_bytes"],
            no_ack["slave_reachable"]) == (None, 5_000, "slave_max", 5_000, True)
    silent = rows[(2, at(3))]
    assert (silent["fall_behind_bytes"], silent["fall_behind_bytes_from"],
            silent["slave_reachable"]) == (None, "none", False)


def test_broker_health_keeps_unreachable_brokers(outputs: Path) -> None:
    rows = {(r["broker_name"], r["broker_id"], r["snapshot_time"]): r
            for r in table(outputs, C.BROKER_HEALTH)}
    assert len(rows) == 5 * 5
    gone = rows[("broker-c", 0, at(4))]
    assert (gone["reachable"], gone["error"], gone["commitlog_max_offset"]) == \
        (False, "DEADLINE_EXCEEDED", None)
    assert rows[("broker-a", 0, at(4))]["dispatch_behind_bytes"] == 123


def test_a_single_snapshot_is_ok_unless_stop_applies(spark) -> None:
    from pyspark.testing import assertDataFrameEqual

    from spark_analytics.status import queue_status
    from tests.spark_analytics.snapshots import ms

    schema = ("snapshot_time timestamp, cluster string, `group` string, topic string, "
              "topic_kind string, broker_name string, queue_id int, clock_ms long, "
              "queue_min_offset long, broker_offset long, consumer_offset long, "
              "never_committed boolean, message_lag long, byte_lag long, "
              "byte_lag_method string, time_lag_s double, time_lag_method string, "
              "last_commit_ms long, online_consumers int")

    def row(group: str, last_commit: int | None, online: int) -> tuple:
        return (at(0), "C", group, "T", "normal", "b", 0, ms(0), 0, 100, 50, False, 50, None,
                "unknown", 1.0, "store_time", last_commit, online)

    recent = spark.createDataFrame([
        row("fresh_commit", ms(0, -3_000), 1),  # 3 s ago: within two commit intervals
        row("old_commit", ms(0, -11_000), 1),  # 11 s: longer than the 10 s floor of the span
        row("no_commit_time_no_consumer", None, 0),
        row("no_commit_time_consumer_online", None, 1),
        row("fresh_commit_nobody_online", ms(0, -3_000), 0)], schema)  # its consumers left
    statuses = queue_status(recent).select("group", "status", "window_snapshots")
    assertDataFrameEqual(statuses, spark.createDataFrame(
        [("fresh_commit", "OK", 1), ("old_commit", "STOP", 1),
         ("no_commit_time_no_consumer", "STOP", 1),
         ("no_commit_time_consumer_online", "OK", 1),
         ("fresh_commit_nobody_online", "STOP", 1)],
        "`group` string, status string, window_snapshots long"))
