"""The lag job (SPEC §8): `python -m spark_analytics.lag --in DIR --out DIR [--master URL |
--remote sc://HOST] [--window N] [--follow]`, also `spark-submit spark_analytics/lag.py ...`.

Reads the collector's snapshot table (explicit schema) from DIR (or DIR/snapshots) and
writes one Parquet table per output under --out (constants.OUTPUT_TABLES), each written
aside and swapped into place. `--follow` keeps them current with Structured Streaming.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if not __package__:  # run as a file by spark-submit: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_analytics import brokers as brokers_steps  # noqa: E402
from spark_analytics import constants, publish, queue_lag, rollups, status  # noqa: E402
from spark_analytics.schema import SNAPSHOTS_DIR, spark_schema  # noqa: E402
from spark_analytics.session import build_session, java_problem, under_spark_submit  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PROG = "mqlag"  # its console script (python -m spark_analytics.lag too)
FOLLOW_TRIGGER = "2 seconds"
SMALL_TABLE_FILES = 1


def snapshots_path(in_dir: str) -> str:
    """The snapshot table's directory: DIR/snapshots when DIR is the collector's --out."""
    nested = Path(in_dir) / SNAPSHOTS_DIR
    return str(nested) if nested.is_dir() else in_dir


def read_snapshots(spark: SparkSession, path: str) -> DataFrame:
    """The snapshot table with its explicit schema (date / hour from the directories)."""
    return (spark.read.schema(spark_schema()).option("basePath", path)
            .option("recursiveFileLookup", "false").parquet(path))


class TableWriter:
    """Writes each output into a staging directory beside --out/NAME, publishes them all at
    the end (publish.publish); over Spark Connect the paths are the server's, so tables are
    overwritten in place instead. Keeps the seconds each write took."""

    def __init__(self, spark: SparkSession, out: str, atomic: bool) -> None:
        self.spark, self.out, self.atomic = spark, Path(out), atomic
        self.staged: dict[str, Path] = {}
        self.seconds: dict[str, float] = {}
        if atomic:
            self.out.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, df: DataFrame, files: int | None = None) -> str:
        """Writes `df` as table `name` (in `files` files if given); returns where."""
        path = publish.staging_dir(self.out, name) if self.atomic else self.out / name
        if files is not None:
            df = df.coalesce(files)
        started = time.monotonic()
        df.write.mode("overwrite").parquet(str(path))
        self.seconds[name] = round(time.monotonic() - started, 3)
        print(f"{PROG}: {name} written in {self.seconds[name]:.1f} s", file=sys.stderr,
              flush=True)
        if self.atomic:
            self.staged[name] = path
        return str(path)

    def publish_all(self) -> None:
        for name, path in self.staged.items():
            publish.publish(path, self.out, name)
        self.staged.clear()

    def discard(self) -> None:
        publish.remove_stale_staging(self.out)
        self.staged.clear()


def run_lag_job(spark: SparkSession, in_dir: str, out_dir: str, window: int,
                atomic: bool = True) -> dict[str, float]:
    """Computes every output table from the snapshots under `in_dir` and publishes them
    under `out_dir`; returns the seconds each table took.

    Passes over the input: one small aggregate per broker and snapshot and per queue
    (cached), one that writes queue_lag row by row, one over the rows of the queues that need
    the time-lag lookup (only those are shuffled);
    the roll-ups and statuses then read queue_lag's Parquet back, the statuses only the
    rows of each broker's last `window` snapshots."""
    snapshots = read_snapshots(spark, snapshots_path(in_dir))
    writer = TableWriter(spark, out_dir, atomic)
    rows = queue_lag.lagging_rows(snapshots)
    facts = queue_lag.snapshot_facts(rows).cache()
    brokers = queue_lag.broker_snapshots(facts).cache()
    needing = queue_lag.queues_needing_lookup(facts)
    group_topic = group = None
    try:
        queue_path = writer.write(constants.QUEUE_LAG,
                                  queue_lag.queue_lag(rows, brokers, needing))
        queues = spark.read.parquet(queue_path)
        status_path = writer.write(constants.QUEUE_STATUS, queues.transform(
            status.recent_rows(brokers, window)).transform(status.queue_status))
        writer.write(constants.GROUP_STATUS,
                     status.group_status(spark.read.parquet(status_path)), SMALL_TABLE_FILES)
        group_topic = rollups.group_topic_lag(queues).cache()
        writer.write(constants.GROUP_TOPIC_LAG, group_topic)
        group = rollups.group_lag(group_topic).cache()
        writer.write(constants.GROUP_LAG, group)
        writer.write(constants.CLUSTER_LAG, rollups.cluster_lag(group), SMALL_TABLE_FILES)
        writer.write(constants.SLAVE_FALL_BEHIND, brokers_steps.slave_fall_behind(snapshots),
                     SMALL_TABLE_FILES)
        writer.write(constants.BROKER_HEALTH, brokers_steps.broker_health(snapshots),
                     SMALL_TABLE_FILES)
        writer.publish_all()
    except BaseException:
        if atomic:
            writer.discard()
        raise
    finally:
        for cached in (facts, brokers, group_topic, group):
            if cached is not None:
                cached.unpersist()
    return writer.seconds


def has_snapshot_files(path: str) -> bool:
    return any(Path(path).rglob("*.parquet"))


def follow(spark: SparkSession, in_dir: str, out_dir: str, window: int) -> None:
    """Structured Streaming over the snapshot directory: each micro-batch that brings new
    snapshot files recomputes and republishes every output from the whole input (statuses
    and interpolation need each queue's history). Stops cleanly on SIGINT / SIGTERM."""
    path = snapshots_path(in_dir)
    Path(path).mkdir(parents=True, exist_ok=True)
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)

    def recompute(batch: DataFrame, batch_id: int) -> None:
        if stopping or batch.isEmpty():
            return
        seconds = run_lag_job(spark, in_dir, out_dir, window)
        print(f"{PROG}: batch {batch_id}: outputs republished in {sum(seconds.values()):.1f} s",
              file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="lag-follow-") as checkpoint:
        stream = (spark.readStream.schema(spark_schema()).option("basePath", path)
                  .parquet(path))
        query = (stream.writeStream.foreachBatch(recompute)
                 .option("checkpointLocation", checkpoint)
                 .trigger(processingTime=FOLLOW_TRIGGER).start())
        print(f"{PROG}: following {path}; outputs under {out_dir} (SIGINT/SIGTERM stops)",
              file=sys.stderr, flush=True)
        try:
            while query.isActive and not stopping:
                query.awaitTermination(1)
        finally:
            query.stop()
            publish.remove_stale_staging(Path(out_dir))
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")
    print(f"{PROG}: stopped", file=sys.stderr, flush=True)


def _count(text: str) -> int:
    """--window, --shuffle-partitions: a whole number in 1..2**31-1 (Spark's int); a usage
    error else. (No mqclient import here: spark-submit may run this file alone.)"""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 2**31 - 1:
        raise argparse.ArgumentTypeError(f"{text} is not in 1..{2**31 - 1}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--in", dest="in_dir", required=True,
                        help="the collector's --out (or its snapshots/ directory)")
    parser.add_argument("--out", dest="out_dir", required=True, help="output tables go here")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--master", help="Spark master URL (default local[*], or "
                       "spark-submit's)")
    where.add_argument("--remote", help="Spark Connect server, sc://HOST[:PORT]")
    parser.add_argument("--window", type=_count, default=constants.DEFAULT_WINDOW,
                        help="snapshots per queue for the statuses (default %(default)s)")
    parser.add_argument("--follow", action="store_true",
                        help="keep the outputs current as snapshots arrive")
    parser.add_argument("--shuffle-partitions", type=_count, default=None,
                        help="spark.sql.shuffle.partitions (default 8, or spark-submit's)")
    parser.add_argument("--driver-memory", default=None,
                        help="spark.driver.memory for a local JVM (default 2g)")
    args = parser.parse_args(argv)
    if args.follow and args.remote:
        parser.error("--follow needs a JVM driver here (--master or local), not --remote")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.remote and not under_spark_submit() and (problem := java_problem()):
        print(f"{PROG}: {problem}", file=sys.stderr)
        return 2
    if not args.remote and not Path(args.in_dir).is_dir() and not args.follow:
        print(f"{PROG}: --in {args.in_dir}: no such directory", file=sys.stderr)
        return 1
    if not args.remote and not args.follow and not has_snapshot_files(
            snapshots_path(args.in_dir)):
        print(f"{PROG}: no snapshot files (*.parquet) under {args.in_dir}", file=sys.stderr)
        return 1
    started = time.monotonic()
    spark = build_session("rocketmq-lag", master=args.master, remote=args.remote,
                          shuffle_partitions=args.shuffle_partitions,
                          driver_memory=args.driver_memory)
    try:
        if args.follow:
            follow(spark, args.in_dir, args.out_dir, args.window)
        else:
            seconds = run_lag_job(spark, args.in_dir, args.out_dir, args.window,
                                  atomic=not args.remote)
            timings = " ".join(f"{name}={s}s" for name, s in seconds.items())
            print(f"{PROG}: wrote {len(seconds)} tables under {args.out_dir} in "
                  f"{time.monotonic() - started:.1f} s ({timings})", file=sys.stderr)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
