"""Roll-ups of the queue_lag table (SPEC §8) for each snapshot: per (group, topic), per
group and per cluster, retry and DLQ topics apart (`topic_kind` is part of every key)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

SUMS = ("queues", "never_committed_queues", "message_lag_sum", "byte_lag_sum",
        "byte_lag_unknown_queues", "time_lag_unknown_queues")
MAXES = ("message_lag_max", "byte_lag_max", "time_lag_max_s")


def _with_worst(df: DataFrame) -> DataFrame:
    return (df.withColumn("worst_topic", F.col("_worst.topic"))
            .withColumn("worst_broker_name", F.col("_worst.broker_name"))
            .withColumn("worst_queue_id", F.col("_worst.queue_id"))
            .drop("_worst"))


def _worst(lag: str, time_lag: str, topic: str, broker: str, queue: str) -> Column:
    """The worst queue: the max of (messages behind, seconds behind, names)."""
    return F.max(F.struct(F.col(lag).alias("lag"),
                          F.coalesce(F.col(time_lag), F.lit(-1.0)).alias("time_lag_s"),
                          F.col(topic).alias("topic"), F.col(broker).alias("broker_name"),
                          F.col(queue).alias("queue_id"))).alias("_worst")


GROUP_TOPIC_KEY = ("snapshot_time", "cluster", "group", "topic", "topic_kind")


def group_topic_lag(queue_lag: DataFrame) -> DataFrame:
    """Per (snapshot_time, cluster, group, topic, topic_kind): queues, never-committed
    queues, sum and max of message and byte lag, max time lag, queues whose byte / time lag
    is unknown, and the worst queue (most messages behind, then most seconds).

    The figures are fixed-width aggregates (a hash aggregation: no sort of the queue rows);
    the worst queue comes from the few rows at the maximum lag, found with a broadcast join,
    as a max over names would make Spark sort every row."""
    figures = queue_lag.groupBy(*GROUP_TOPIC_KEY).agg(
        F.count(F.lit(1)).alias("queues"),
        F.count_if(F.col("never_committed")).alias("never_committed_queues"),
        F.sum("message_lag").alias("message_lag_sum"),
        F.max("message_lag").alias("message_lag_max"),
        F.sum("byte_lag").alias("byte_lag_sum"),
        F.max("byte_lag").alias("byte_lag_max"),
        F.count_if(F.col("byte_lag").isNull()).alias("byte_lag_unknown_queues"),
        F.max("time_lag_s").alias("time_lag_max_s"),
        F.count_if(F.col("time_lag_s").isNull()).alias("time_lag_unknown_queues"))
    at_max = (queue_lag.join(F.broadcast(figures.select(*GROUP_TOPIC_KEY, "message_lag_max")),
                             list(GROUP_TOPIC_KEY))
              .filter(F.col("message_lag") == F.col("message_lag_max"))
              .groupBy(*GROUP_TOPIC_KEY)
              .agg(_worst("message_lag", "time_lag_s", "topic", "broker_name", "queue_id")))
    return figures.join(at_max, list(GROUP_TOPIC_KEY)).transform(_with_worst)


def _roll_up(finer: DataFrame, keys: tuple[str, ...], extra: list[Column]) -> DataFrame:
    """A coarser roll-up of group_topic_lag-shaped rows: sums of sums, max of maxima."""
    return (finer.groupBy(*keys)
            .agg(*extra, *[F.sum(c).alias(c) for c in SUMS],
                 *[F.max(c).alias(c) for c in MAXES],
                 _worst("message_lag_max", "time_lag_max_s", "worst_topic",
                        "worst_broker_name", "worst_queue_id"))
            .transform(_with_worst))


def group_lag(group_topic: DataFrame) -> DataFrame:
    """Per (snapshot_time, cluster, group, topic_kind): group_topic_lag's figures over the
    group's topics of that kind, with `topics` and the worst queue's topic."""
    return _roll_up(group_topic, ("snapshot_time", "cluster", "group", "topic_kind"),
                    [F.count(F.lit(1)).alias("topics")])


def cluster_lag(group: DataFrame) -> DataFrame:
    """Per (snapshot_time, cluster, topic_kind): the same over the cluster's groups, with
    `groups` and the group of the worst queue (`worst_group`)."""
    worst_group = F.max(F.struct(F.col("message_lag_max"),
                                 F.coalesce(F.col("time_lag_max_s"), F.lit(-1.0)),
                                 F.col("group")))["group"].alias("worst_group")
    return _roll_up(group, ("snapshot_time", "cluster", "topic_kind"),
                    [F.count(F.lit(1)).alias("groups"), F.sum("topics").alias("topics"),
                     worst_group])
