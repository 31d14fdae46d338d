"""Per-queue steps of the lag job (SPEC §8): message, byte and time lag per
(cluster, group, topic, broker_name, queue_id) and snapshot.

Each step is a function DataFrame -> DataFrame named for what it adds; `queue_lag` chains
them. Built-in functions and window specs only: nothing leaves the JVM row by row.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_analytics.constants import (
    BYTES_AVERAGE,
    BYTES_CAUGHT_UP,
    BYTES_UNKNOWN,
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    TIME_CAUGHT_UP,
    TIME_EXTRAPOLATED,
    TIME_INTERPOLATED,
    TIME_STORE_TIME,
    TIME_UNKNOWN,
    TOPIC_KIND_DLQ,
    TOPIC_KIND_NORMAL,
    TOPIC_KIND_RETRY,
)
from spark_analytics.schema import KIND_QUEUE

QUEUE_KEY = ("cluster", "group", "topic", "broker_name", "queue_id")
BROKER_SNAPSHOT_KEY = ("cluster", "broker_name", "snapshot_time")

_QUEUE_INPUT_COLUMNS = (
    "snapshot_time", *QUEUE_KEY[:1], *QUEUE_KEY[1:], "broker_time_ms", "queue_min_offset",
    "broker_offset", "consumer_offset", "first_unconsumed_ms", "last_commit_ms", "lag_bytes",
    "lag_bytes_method", "online_consumers")


def queue_rows(snapshots: DataFrame) -> DataFrame:
    """The queue rows of the snapshot table, with the columns the job uses, and `clock_ms`:
    the broker's clock when it answered (the clock store times and last_commit_ms are on),
    else the collector's snapshot time."""
    return (snapshots.filter(F.col("kind") == KIND_QUEUE)
            .select(*_QUEUE_INPUT_COLUMNS)
            .withColumn("clock_ms", F.coalesce(F.col("broker_time_ms"),
                                               F.unix_millis("snapshot_time"))))


def topic_kind(df: DataFrame) -> DataFrame:
    """`topic_kind`: retry (%RETRY% prefix), dlq (%DLQ%) or normal."""
    return df.withColumn(
        "topic_kind",
        F.when(F.col("topic").startswith(RETRY_GROUP_TOPIC_PREFIX), F.lit(TOPIC_KIND_RETRY))
        .when(F.col("topic").startswith(DLQ_GROUP_TOPIC_PREFIX), F.lit(TOPIC_KIND_DLQ))
        .otherwise(F.lit(TOPIC_KIND_NORMAL)))


def message_lag(df: DataFrame) -> DataFrame:
    """`message_lag` = broker_offset - max(consumer_offset, queue_min_offset), never below 0.
    A queue never committed (consumer_offset -1) lags from queue_min_offset: `never_committed`
    says so and `consumer_offset` becomes null there (never "committed 0").
    `consume_position` is the offset of the first message the group has yet to consume."""
    committed = F.col("consumer_offset") >= 0
    min_offset = F.coalesce(F.col("queue_min_offset"), F.lit(0))
    position = F.when(committed, F.greatest(F.col("consumer_offset"), min_offset)) \
        .otherwise(min_offset)
    return (df.withColumn("never_committed", ~F.coalesce(committed, F.lit(False)))
            .withColumn("committed_offset", F.coalesce(F.col("consumer_offset"), F.lit(-1)))
            .withColumn("consumer_offset", F.when(committed, F.col("consumer_offset")))
            .withColumn("consume_position", position)
            .withColumn("message_lag",
                        F.greatest(F.col("broker_offset") - position, F.lit(0)).cast("long")))


def _needs_lookup() -> Column:
    return (F.col("message_lag") > 0) & F.col("first_unconsumed_ms").isNull()


def snapshot_facts(df: DataFrame) -> DataFrame:
    """Two small answers: per (cluster, broker_name, snapshot_time) the bytes and messages
    of its lagging queues whose bytes are known (`_bytes`, `_messages`); the queues
    (QUEUE_KEY) with a row that needs the time-lag lookup (`_needing` 1). `_per_broker`
    tells the two kinds of row apart. The job caches it.

    Two aggregates, each reading the queue rows: the per-broker one collapses to a few
    rows per task before any shuffle, the other sees only the rows needing the lookup.
    (One pass with grouping sets doubled every row into a hash aggregation keyed by queue:
    11 % more CPU for the whole job, measured.)"""
    known = F.col("lag_bytes").isNotNull() & (F.col("message_lag") > 0)
    per_broker = (df.groupBy(*BROKER_SNAPSHOT_KEY)
                  .agg(F.sum(F.when(known, F.col("lag_bytes"))).alias("_bytes"),
                       F.sum(F.when(known, F.col("message_lag"))).alias("_messages"))
                  .withColumn("_needing", F.lit(0))
                  .withColumn("_per_broker", F.lit(True)))
    needing = (df.filter(_needs_lookup()).select(*QUEUE_KEY).distinct()
               .withColumn("_needing", F.lit(1))
               .withColumn("_per_broker", F.lit(False)))
    return per_broker.unionByName(needing, allowMissingColumns=True)


BROKER_FACTS_COLUMNS = (*BROKER_SNAPSHOT_KEY, "_bytes", "_messages")


def broker_facts(facts: DataFrame) -> DataFrame:
    """The per-broker rows of snapshot_facts: one per (cluster, broker_name, snapshot_time)
    the queue rows come from, with `_bytes` / `_messages` (kept by the job beside its outputs:
    later runs take the broker means from them)."""
    return facts.filter(F.col("_per_broker")).select(*BROKER_FACTS_COLUMNS)


def broker_snapshots(facts: DataFrame) -> DataFrame:
    """From broker_facts (every snapshot so far): one row per (cluster, broker_name,
    snapshot_time) with the broker's mean message size there: the bytes it measured for its
    lagging queues over their messages (sum lag_bytes / sum message_lag of the rows where
    lag_bytes is known and message_lag > 0; null when none); `broker_mean_bytes` is the same
    ratio over the broker's snapshots up to this one (so that a figure, once computed, does
    not change when later snapshots arrive). Small (brokers x snapshots)."""
    so_far = (Window.partitionBy("cluster", "broker_name").orderBy("snapshot_time")
              .rowsBetween(Window.unboundedPreceding, Window.currentRow))
    return (facts
            .withColumn("snapshot_mean_bytes", F.col("_bytes") / F.col("_messages"))
            .withColumn("broker_mean_bytes", F.sum("_bytes").over(so_far)
                        / F.sum("_messages").over(so_far))
            .select(*BROKER_SNAPSHOT_KEY, "snapshot_mean_bytes", "broker_mean_bytes"))


def queues_needing_lookup(facts: DataFrame) -> DataFrame:
    """The queues (QUEUE_KEY) with a lagging row that has no first_unconsumed_ms."""
    return facts.filter(~F.col("_per_broker") & (F.col("_needing") > 0)).select(*QUEUE_KEY)


def byte_lag(brokers: DataFrame) -> Callable[[DataFrame], DataFrame]:
    """`byte_lag` and `byte_lag_method`: the snapshot's lag_bytes with its method (exact or
    estimated) where the broker gave one; 0 (caught_up) with no message lag; else message lag
    x the broker's mean message size in that snapshot, else over its snapshots so far (average;
    `brokers` is broker_snapshots); else null (unknown)."""

    def step(df: DataFrame) -> DataFrame:
        mean = F.coalesce(F.col("snapshot_mean_bytes"), F.col("broker_mean_bytes"))
        average = F.round(F.col("message_lag") * mean).cast("long")
        return (df.join(F.broadcast(brokers), list(BROKER_SNAPSHOT_KEY), "left")
                .withColumn("byte_lag_method",
                            F.when(F.col("lag_bytes").isNotNull(), F.col("lag_bytes_method"))
                            .when(F.col("message_lag") == 0, F.lit(BYTES_CAUGHT_UP))
                            .when(mean.isNotNull(), F.lit(BYTES_AVERAGE))
                            .otherwise(F.lit(BYTES_UNKNOWN)))
                .withColumn("byte_lag",
                            F.when(F.col("lag_bytes").isNotNull(), F.col("lag_bytes"))
                            .when(F.col("message_lag") == 0, F.lit(0).cast("long"))
                            .otherwise(average))
                .drop("lag_bytes", "lag_bytes_method", "snapshot_mean_bytes",
                      "broker_mean_bytes"))

    return step


POINT_COLUMNS = (*QUEUE_KEY, "snapshot_time", "broker_offset", "clock_ms")


def looked_up_store_time(queues: DataFrame, history: DataFrame | None = None
                         ) -> Callable[[DataFrame], DataFrame]:
    """The rows of `queues` (queues_needing_lookup), with `estimated_store_ms` /
    `estimated_method` where a lagging row has no first_unconsumed_ms: when the broker's
    offset reached the consume position, in the manner of kafka-lag-exporter's lookup table.
    The table is the queue's history of points (broker_offset, clock_ms): between the newest
    two neighbouring points that hold the position, interpolate (`interpolated`); when the
    position is below every point, extrapolate on the line through the oldest point and the
    current one (`extrapolated`); with no such line (one point, or a flat history) `unknown`.
    A flat run of one offset acts as kafka-lag-exporter's compressed segment (its newest
    point is the left end), and a point below an earlier one is left out, as that table
    refuses a non-monotonic point.

    One pass over those queues' rows: in time order each row becomes a point carrying its
    successor, and also a query at its consume position; in offset order a query then takes
    the last point at or below its position (the newest such, as offsets rise with time).
    The estimate is used only where a lagging row has no store time (time_lag).

    `history` (POINT_COLUMNS of the queue rows before these, as queue_lag holds them: an
    incremental run) adds the earlier points of each queue; only the rows are looked up."""

    def step(rows: DataFrame) -> DataFrame:
        in_time = Window.partitionBy(*QUEUE_KEY).orderBy("snapshot_time")
        payload = [c for c in rows.columns if c not in QUEUE_KEY]
        mine = rows.join(F.broadcast(queues), list(QUEUE_KEY), "left_semi") \
            .withColumn("_query", F.lit(True))
        if history is not None:
            earlier = (history.select(*POINT_COLUMNS)
                       .join(F.broadcast(queues), list(QUEUE_KEY), "left_semi")
                       .withColumn("_query", F.lit(False)))
            mine = mine.unionByName(earlier, allowMissingColumns=True)
        timed = (mine
                 .withColumn("_highest_before", F.max("broker_offset").over(
                     in_time.rowsBetween(Window.unboundedPreceding, -1)))
                 .withColumn("_next_offset", F.lead("broker_offset").over(in_time))
                 .withColumn("_next_ms", F.lead("clock_ms").over(in_time)))
        rising = F.col("_highest_before").isNull() | (
            F.col("broker_offset") >= F.col("_highest_before"))
        point = F.struct(F.col("broker_offset").alias("offset"), F.col("clock_ms").alias("ms"),
                         F.col("_next_offset").alias("next_offset"),
                         F.col("_next_ms").alias("next_ms"))
        row = F.struct(*payload)

        def entry(at: Column, is_row: int, point_value: Column, row_value: Column) -> Column:
            return F.struct(at.alias("at"), F.lit(is_row).alias("is_row"),
                            F.col("clock_ms").alias("order_ms"), point_value.alias("point"),
                            row_value.alias("row"))

        null_point = F.lit(None).cast(timed.select(point).schema[0].dataType)
        null_row = F.lit(None).cast(timed.select(row).schema[0].dataType)
        entries = F.array(
            F.when(rising, entry(F.col("broker_offset"), 0, point, null_row)),
            F.when(F.col("_query"), entry(F.col("consume_position"), 1, null_point, row)))
        by_offset = Window.partitionBy(*QUEUE_KEY).orderBy("at", "is_row", "order_ms")
        looked_up = (timed.select(*QUEUE_KEY, F.explode(F.array_compact(entries)).alias("e"))
                     .select(*QUEUE_KEY, "e.*")
                     .withColumn("left", F.last("point", ignorenulls=True).over(
                         by_offset.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
                     .withColumn("oldest", F.min(F.when(F.col("point").isNotNull(), F.struct(
                         F.col("point.ms").alias("ms"), F.col("point.offset").alias("offset"))))
                         .over(Window.partitionBy(*QUEUE_KEY)))
                     .filter(F.col("is_row") == 1)
                     .select(*QUEUE_KEY, "row.*", "left", "oldest"))
        pos, cur_off, cur_ms = (F.col(c) for c in ("consume_position", "broker_offset",
                                                    "clock_ms"))
        left_ok = F.col("left").isNotNull() & (F.col("left.next_offset") > F.col("left.offset"))
        interpolated = F.col("left.ms") + (pos - F.col("left.offset")) * (
            F.col("left.next_ms") - F.col("left.ms")) / (F.col("left.next_offset")
                                                        - F.col("left.offset"))
        slope_ok = (cur_off > F.col("oldest.offset")) & (cur_ms > F.col("oldest.ms"))
        extrapolated = cur_ms - (cur_off - pos) * (cur_ms - F.col("oldest.ms")) / (
            cur_off - F.col("oldest.offset"))
        return (looked_up
                .withColumn("estimated_store_ms",
                            F.when(left_ok, interpolated).when(slope_ok, extrapolated))
                .withColumn("estimated_method",
                            F.when(left_ok, F.lit(TIME_INTERPOLATED))
                            .when(slope_ok, F.lit(TIME_EXTRAPOLATED))
                            .otherwise(F.lit(TIME_UNKNOWN)))
                .drop("left", "oldest"))

    return step


def time_lag(needing: DataFrame, history: DataFrame | None = None
             ) -> Callable[[DataFrame], DataFrame]:
    """`time_lag_s` and `time_lag_method`: 0 when caught up; else the broker's clock minus
    the store time of the first unconsumed message (store_time); else minus the looked-up
    estimate (interpolated / extrapolated); else null (unknown). Never below 0. Only the
    rows of the queues `needing` the lookup go through it (a shuffle of those queues' rows);
    the others pass row by row."""

    def step(df: DataFrame) -> DataFrame:
        plain = (df.join(F.broadcast(needing), list(QUEUE_KEY), "left_anti")
                 .withColumn("estimated_store_ms", F.lit(None).cast("double"))
                 .withColumn("estimated_method", F.lit(None).cast("string")))
        both = plain.unionByName(df.transform(looked_up_store_time(needing, history)))
        lag_ms = F.when(F.col("message_lag") == 0, F.lit(0.0)) \
            .when(F.col("first_unconsumed_ms").isNotNull(),
                  F.col("clock_ms") - F.col("first_unconsumed_ms")) \
            .otherwise(F.col("clock_ms") - F.col("estimated_store_ms"))
        method = F.when(F.col("message_lag") == 0, F.lit(TIME_CAUGHT_UP)) \
            .when(F.col("first_unconsumed_ms").isNotNull(), F.lit(TIME_STORE_TIME)) \
            .otherwise(F.coalesce(F.col("estimated_method"), F.lit(TIME_UNKNOWN)))
        seconds = F.when(lag_ms.isNotNull(),
                         F.greatest(lag_ms, F.lit(0.0)).cast("double") / 1000.0)
        return (both.withColumn("time_lag_s", seconds)
                .withColumn("time_lag_method", method)
                .drop("estimated_store_ms", "estimated_method"))

    return step


QUEUE_LAG_COLUMNS = (
    "snapshot_time", "cluster", "group", "topic", "topic_kind", "broker_name", "queue_id",
    "clock_ms", "queue_min_offset", "broker_offset", "consumer_offset", "never_committed",
    "message_lag", "byte_lag", "byte_lag_method", "time_lag_s", "time_lag_method",
    "last_commit_ms", "online_consumers")


def lagging_rows(snapshots: DataFrame) -> DataFrame:
    """The queue rows with their message lag (row by row, no shuffle)."""
    return snapshots.transform(queue_rows).transform(topic_kind).transform(message_lag)


def queue_lag(rows: DataFrame, brokers: DataFrame, needing: DataFrame,
              history: DataFrame | None = None) -> DataFrame:
    """The queue_lag table from lagging_rows, their broker_snapshots and the
    queues_needing_lookup: one row per queue and snapshot (QUEUE_LAG_COLUMNS); `history`:
    the queue_lag rows of earlier runs (the lookup's earlier points)."""
    return (rows.transform(byte_lag(brokers))
            .transform(time_lag(needing, history))
            .select(*QUEUE_LAG_COLUMNS))
