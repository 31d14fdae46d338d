"""The snapshot table (SPEC §8): what the collector writes and the lag job reads.

One table, one row per thing observed in one snapshot, `kind` saying which:
- `broker`: one per broker the name servers list (masters and slaves), also when it did not
  answer (`reachable` false, `error` saying why, figures null);
- `slave`: one per slave of a master's group, as the master sees it (link up or not);
- `queue`: one per (group, topic, queue) of a broker group's consume stats.

Columns a kind does not use are null. Offsets are int64, times are epoch milliseconds (int64)
except `snapshot_time`. Stored as Parquet under `snapshots/date=YYYY-MM-DD/hour=HH/`.
Spark and pyarrow schemas are both built from COLUMNS, so they cannot drift apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

KIND_BROKER = "broker"
KIND_SLAVE = "slave"
KIND_QUEUE = "queue"
SNAPSHOTS_DIR = "snapshots"  # under the collector's --out
PARTITION_COLUMNS = ("date", "hour")  # directory partitions: date=YYYY-MM-DD/hour=HH (UTC)


class Column(NamedTuple):
    name: str
    type: str  # timestamp, string, bool, int32, int64, double
    doc: str


COLUMNS: tuple[Column, ...] = (
    # -- every row --------------------------------------------------------------------------
    Column("snapshot_time", "timestamp", "collector's clock when the snapshot began (UTC, ms); "
           "the same for every row of one snapshot"),
    Column("kind", "string", "broker | slave | queue"),
    Column("cluster", "string", "brokerClusterName"),
    Column("broker_name", "string", "broker group (brokerName)"),
    Column("broker_id", "int64", "0 = master; the broker that answered for this row"),
    Column("broker_addr", "string", "address the row's figures came from"),
    Column("role", "string", "ASYNC_MASTER, SYNC_MASTER or SLAVE; null when unreachable"),
    Column("reachable", "bool", "false: the broker did not answer (broker rows only)"),
    Column("error", "string", "why the broker did not answer, null when it did"),
    Column("broker_time_ms", "int64", "the broker's clock when it answered"),
    # -- broker -----------------------------------------------------------------------------
    Column("commitlog_min_offset", "int64", "broker: commitlog min offset"),
    Column("commitlog_max_offset", "int64", "broker: commitlog max offset; slave rows: the "
           "master's"),
    Column("dispatch_behind_bytes", "int64", "broker: commitlog max - reput offset"),
    Column("put_tps", "double", "broker: messages put per second (last minute)"),
    Column("get_tps", "double", "broker: messages got per second (last minute)"),
    # -- slave (a master's view of one slave of its group) -----------------------------------
    Column("slave_id", "int64", "slave: its brokerId"),
    Column("slave_addr", "string", "slave: its broker address (HA link peer when unknown)"),
    Column("slave_ack_offset", "int64", "slave: last ack the master saw, -1 if none yet"),
    Column("fall_behind_bytes", "int64", "slave: master max offset - ack (as the master "
           "computed it)"),
    Column("fall_behind_seconds", "double", "slave: broker time - store time of the first "
           "record the slave lacks, 0 when caught up"),
    Column("in_sync", "bool", "slave: counted in sync by the master"),
    Column("link_state", "string", "slave: connected, disconnected, or the problem"),
    # -- queue (consume stats of one group on one queue) -------------------------------------
    Column("group", "string", "queue: consumer group"),
    Column("topic", "string", "queue: topic (%RETRY%group and %DLQ%group included)"),
    Column("queue_id", "int32", "queue: queue id"),
    Column("queue_min_offset", "int64", "queue: min offset still stored"),
    Column("broker_offset", "int64", "queue: max offset (next offset to be written)"),
    Column("consumer_offset", "int64", "queue: committed offset, -1 when never committed"),
    Column("first_unconsumed_ms", "int64", "queue: store time of the message at the committed "
           "offset; null when caught up or unknown"),
    Column("last_consumed_ms", "int64", "queue: store time of the message before the committed "
           "offset; null if none"),
    Column("last_commit_ms", "int64", "queue: broker time of the group's last commit on this "
           "queue; null when unknown (none since the broker started)"),
    Column("lag_bytes", "int64", "queue: bytes of the unconsumed messages"),
    Column("lag_bytes_method", "string", "queue: exact (summed consume-queue sizes) or "
           "estimated (messages x mean size of a sample)"),
    Column("online_consumers", "int32", "queue: consumers of the group online on that broker"),
    Column("consume_tps", "double", "queue: the group's consume TPS on that broker"),
)


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    types = {"timestamp": pa.timestamp("ms", tz="UTC"), "string": pa.string(),
             "bool": pa.bool_(), "int32": pa.int32(), "int64": pa.int64(),
             "double": pa.float64()}
    return pa.schema([pa.field(c.name, types[c.type], nullable=c.name != "kind")
                      for c in COLUMNS])


def spark_schema(with_partitions: bool = True) -> StructType:
    """The snapshot schema for Spark readers (explicit: no inference); with the date / hour
    directory partitions unless `with_partitions` is false."""
    from pyspark.sql import types as T

    types = {"timestamp": T.TimestampType(), "string": T.StringType(),
             "bool": T.BooleanType(), "int32": T.IntegerType(), "int64": T.LongType(),
             "double": T.DoubleType()}
    fields = [T.StructField(c.name, types[c.type], True) for c in COLUMNS]
    if with_partitions:
        fields += [T.StructField("date", T.StringType(), True),
                   T.StructField("hour", T.StringType(), True)]
    return T.StructType(fields)
