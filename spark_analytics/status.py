"""Burrow-style statuses (SPEC §8; docs/lag-analytics.md "Statuses"): per queue over the last
N snapshots of its broker, evaluated at the newest; per group the worst of its queues."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_analytics.constants import (
    STATUS_OK,
    STATUS_REWIND,
    STATUS_SEVERITY,
    STATUS_STALL,
    STATUS_STOP,
    STATUS_WARN,
    STOP_MIN_SILENCE_MS,
)
from spark_analytics.queue_lag import QUEUE_KEY


def status_severity(status: Column) -> Column:
    """The severity number of a status (STATUS_SEVERITY: Burrow's order)."""
    expr = F
    for name, severity in STATUS_SEVERITY.items():
        expr = expr.when(status == name, F.lit(severity))
    return expr


def severity_status(severity: Column) -> Column:
    """The status named by a severity number (inverse of status_severity)."""
    expr = F
    for name, number in STATUS_SEVERITY.items():
        expr = expr.when(severity == number, F.lit(name))
    return expr


def recent_rows(brokers: DataFrame, window: int) -> Callable[[DataFrame], DataFrame]:
    """The queue_lag rows of each broker's newest `window` snapshots (`brokers`: the job's
    broker_snapshots): each queue's last `window` snapshots, as a queue has one row in each
    snapshot its broker answered. Only these rows are shuffled for the statuses."""
    newest_first = Window.partitionBy("cluster", "broker_name").orderBy(
        F.col("snapshot_time").desc())
    cutoffs = (brokers.withColumn("_rank", F.row_number().over(newest_first))
               .filter(F.col("_rank") <= window)
               .groupBy("cluster", "broker_name")
               .agg(F.min("snapshot_time").alias("_window_start")))

    # The oldest cutoff as a literal too: Parquet skips the files and row groups before it
    # (queue_lag is written in snapshot order), so only the window's rows are read.
    oldest = cutoffs.agg(F.min(F.unix_micros("_window_start"))).first()[0]

    def step(queue_lag: DataFrame) -> DataFrame:
        if oldest is not None:
            queue_lag = queue_lag.filter(
                F.col("snapshot_time") >= F.timestamp_micros(F.lit(oldest)))
        return (queue_lag.join(F.broadcast(cutoffs), ["cluster", "broker_name"])
                .filter(F.col("snapshot_time") >= F.col("_window_start"))
                .drop("_window_start"))

    return step


QUEUE_STATUS_COLUMNS = (
    "cluster", "group", "topic", "topic_kind", "broker_name", "queue_id", "snapshot_time",
    "status", "status_severity", "window_snapshots", "window_start", "window_start_offset",
    "window_start_lag", "consumer_offset", "never_committed", "message_lag", "byte_lag",
    "time_lag_s", "time_lag_method", "last_commit_ms", "commit_age_s", "online_consumers")


def queue_status(recent: DataFrame) -> DataFrame:
    """Each queue's status at its newest snapshot over its rows in `recent` (the window):
    REWIND if the committed offset went backwards between two snapshots of the window (a
    never-committed queue counts as offset -1); else OK if the lag was 0 at any of them
    (Burrow's rule 1); else STOP if the broker saw no commit for longer than the window's
    span (broker clock at the newest - at the oldest, but at least STOP_MIN_SILENCE_MS), or
    the offset did not move and no consumer is online at the newest snapshot; else STALL
    if the offset did not move (lag > 0 throughout); else WARN if the lag never decreased
    between two snapshots and is higher at the newest than at the oldest; else OK. STALL and
    WARN need two snapshots at least. With the newest row's figures (QUEUE_STATUS_COLUMNS)."""
    in_time = Window.partitionBy(*QUEUE_KEY).orderBy("snapshot_time")
    committed = F.coalesce(F.col("consumer_offset"), F.lit(-1))
    steps = (recent.withColumn("_committed", committed)
             .withColumn("_went_back", (F.col("_committed")
                                        < F.lag("_committed").over(in_time)).cast("int"))
             .withColumn("_lag_fell", (F.col("message_lag")
                                       < F.lag("message_lag").over(in_time)).cast("int")))
    carried = [c for c in recent.columns if c not in QUEUE_KEY]
    evaluated = (steps.groupBy(*QUEUE_KEY).agg(
        F.count(F.lit(1)).alias("window_snapshots"),
        F.coalesce(F.max("_went_back"), F.lit(0)).alias("_rewound"),
        F.min("message_lag").alias("_min_lag"),
        F.coalesce(F.max("_lag_fell"), F.lit(0)).alias("_fell"),
        F.min_by(F.struct("snapshot_time", "_committed", "message_lag", "clock_ms"),
                 F.col("snapshot_time")).alias("_oldest"),
        F.max_by(F.struct(*carried, "_committed"), F.col("snapshot_time")).alias("_newest"))
        .select(*QUEUE_KEY, "window_snapshots", "_rewound", "_min_lag", "_fell", "_oldest",
                "_newest.*"))
    unmoved = F.col("_committed") == F.col("_oldest._committed")
    several = F.col("window_snapshots") >= 2
    span_ms = F.greatest(F.col("clock_ms") - F.col("_oldest.clock_ms"),
                         F.lit(STOP_MIN_SILENCE_MS))
    nobody_online = F.coalesce(F.col("online_consumers"), F.lit(0)) == 0
    stopped = (unmoved & nobody_online) | F.coalesce(
        F.col("clock_ms") - F.col("last_commit_ms") > span_ms, F.lit(False))
    status = (F.when(F.col("_rewound") > 0, F.lit(STATUS_REWIND))
              .when(F.col("_min_lag") == 0, F.lit(STATUS_OK))
              .when(stopped, F.lit(STATUS_STOP))
              .when(several & unmoved, F.lit(STATUS_STALL))
              .when(several & (F.col("_fell") == 0)
                    & (F.col("message_lag") > F.col("_oldest.message_lag")), F.lit(STATUS_WARN))
              .otherwise(F.lit(STATUS_OK)))
    start_offset = F.col("_oldest._committed")
    return (evaluated.withColumn("status", status)
            .withColumn("status_severity", status_severity(F.col("status")))
            .withColumn("window_start", F.col("_oldest.snapshot_time"))
            .withColumn("window_start_offset", F.when(start_offset >= 0, start_offset))
            .withColumn("window_start_lag", F.col("_oldest.message_lag"))
            .withColumn("commit_age_s",
                        (F.col("clock_ms") - F.col("last_commit_ms")) / 1000.0)
            .select(*QUEUE_STATUS_COLUMNS))


def group_status(queue_status_df: DataFrame) -> DataFrame:
    """Per (cluster, group, topic_kind): the worst status of its queues (severity order of
    STATUS_SEVERITY), the queues per status (`ok_queues`, ...), lag sums and maxima at the
    queues' newest snapshots, the worst queue (worst status, then most messages behind),
    and the newest snapshot seen."""
    counts = [F.count_if(F.col("status") == s).alias(f"{s.lower()}_queues")
              for s in STATUS_SEVERITY]
    worst = F.max(F.struct(F.col("status_severity"), F.col("message_lag"),
                           F.coalesce(F.col("time_lag_s"), F.lit(-1.0)),
                           F.col("topic").alias("topic"),
                           F.col("broker_name").alias("broker_name"),
                           F.col("queue_id").alias("queue_id")))
    return (queue_status_df.groupBy("cluster", "group", "topic_kind")
            .agg(F.max("snapshot_time").alias("snapshot_time"),
                 F.count(F.lit(1)).alias("queues"),
                 F.max("status_severity").alias("status_severity"),
                 *counts,
                 F.sum("message_lag").alias("message_lag_sum"),
                 F.max("message_lag").alias("message_lag_max"),
                 F.sum("byte_lag").alias("byte_lag_sum"),
                 F.max("time_lag_s").alias("time_lag_max_s"),
                 F.count_if(F.col("never_committed")).alias("never_committed_queues"),
                 worst.alias("_worst"))
            .withColumn("status", severity_status(F.col("status_severity")))
            .withColumn("worst_topic", F.col("_worst.topic"))
            .withColumn("worst_broker_name", F.col("_worst.broker_name"))
            .withColumn("worst_queue_id", F.col("_worst.queue_id"))
            .drop("_worst"))
