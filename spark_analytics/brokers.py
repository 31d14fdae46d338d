"""Broker-level steps of the lag job (SPEC §8): each broker's health and dispatch
fall-behind (unreachable brokers included, never dropped) and each slave's replication
fall-behind, cross-checked against the slave's own broker row."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_analytics.constants import (
    SLAVE_BYTES_FROM_ACK,
    SLAVE_BYTES_FROM_SLAVE_MAX,
    SLAVE_BYTES_NONE,
)
from spark_analytics.schema import KIND_BROKER, KIND_QUEUE, KIND_SLAVE


def broker_and_slave_rows(snapshots: DataFrame) -> DataFrame:
    """The broker and slave rows of the snapshot table (a few per snapshot: the job caches
    them, so both tables below read the input once)."""
    return snapshots.filter(F.col("kind") != KIND_QUEUE)


BROKER_HEALTH_COLUMNS = (
    "snapshot_time", "cluster", "broker_name", "broker_id", "broker_addr", "role",
    "reachable", "error", "broker_time_ms", "commitlog_min_offset", "commitlog_max_offset",
    "dispatch_behind_bytes", "put_tps", "get_tps")


def broker_health(snapshots: DataFrame) -> DataFrame:
    """One row per broker and snapshot, as the collector saw it: `reachable` false with
    `error` for a broker that did not answer; `dispatch_behind_bytes` = commitlog max - reput
    offset (its dispatch fall-behind)."""
    return (snapshots.filter(F.col("kind") == KIND_BROKER)
            .withColumn("reachable", F.coalesce(F.col("reachable"), F.lit(False)))
            .select(*BROKER_HEALTH_COLUMNS))


SLAVE_FALL_BEHIND_COLUMNS = (
    "snapshot_time", "cluster", "broker_name", "slave_id", "slave_addr", "master_addr",
    "master_max_offset", "slave_ack_offset", "fall_behind_bytes", "fall_behind_bytes_from",
    "fall_behind_seconds", "master_fall_behind_bytes", "in_sync", "link_state",
    "slave_reachable", "slave_max_offset", "cross_check_bytes")


def slave_fall_behind(snapshots: DataFrame) -> DataFrame:
    """One row per (snapshot, cluster, broker_name, slave_id) from the master's view:
    - `fall_behind_bytes`: master commitlog max - the slave's last ack (`ack`); while the
      master has no ack yet (-1; `slave_ack_offset` null) the master max - the slave's own
      commitlog max where the slave answered (`slave_max`), else null (`none`);
    - `fall_behind_seconds`: as the master reported it (broker time - store time of the first
      record the slave lacks); `master_fall_behind_bytes`: the master's own figure;
    - `cross_check_bytes`: master max - the slave's own commitlog max, where the slave's
      broker row answered in the same snapshot (`slave_reachable`; null when the name
      servers did not list it)."""
    slaves = snapshots.filter(F.col("kind") == KIND_SLAVE)
    slave_brokers = (snapshots.filter(F.col("kind") == KIND_BROKER)
                     .select("snapshot_time", "cluster", "broker_name",
                             F.col("broker_id").alias("slave_id"),
                             F.coalesce(F.col("reachable"), F.lit(False))
                             .alias("slave_reachable"),
                             F.col("commitlog_max_offset").alias("slave_max_offset")))
    acked = F.col("slave_ack_offset") >= 0
    master_max = F.col("master_max_offset")
    return (slaves.select("snapshot_time", "cluster", "broker_name", "slave_id",
                          "slave_addr", F.col("broker_addr").alias("master_addr"),
                          F.col("commitlog_max_offset").alias("master_max_offset"),
                          F.when(acked, F.col("slave_ack_offset")).alias("slave_ack_offset"),
                          "fall_behind_seconds",
                          F.col("fall_behind_bytes").alias("master_fall_behind_bytes"),
                          "in_sync", "link_state")
            .join(F.broadcast(slave_brokers),
                  ["snapshot_time", "cluster", "broker_name", "slave_id"], "left")
            .withColumn("slave_max_offset",
                        F.when(F.col("slave_reachable"), F.col("slave_max_offset")))
            .withColumn("cross_check_bytes", master_max - F.col("slave_max_offset"))
            .withColumn("fall_behind_bytes_from",
                        F.when(F.col("slave_ack_offset").isNotNull(),
                               F.lit(SLAVE_BYTES_FROM_ACK))
                        .when(F.col("slave_max_offset").isNotNull(),
                              F.lit(SLAVE_BYTES_FROM_SLAVE_MAX))
                        .otherwise(F.lit(SLAVE_BYTES_NONE)))
            .withColumn("_behind", master_max - F.coalesce(F.col("slave_ack_offset"),
                                                           F.col("slave_max_offset")))
            .withColumn("fall_behind_bytes", F.when(F.col("_behind").isNotNull(),
                                                    F.greatest("_behind", F.lit(0))))
            .select(*SLAVE_FALL_BEHIND_COLUMNS))
