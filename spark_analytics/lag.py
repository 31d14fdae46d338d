"""The lag job (SPEC §8): `python -m spark_analytics.lag --in DIR --out DIR [--master URL |
--remote sc://HOST] [--window N] [--follow]`, also `spark-submit spark_analytics/lag.py ...`.

Reads the collector's snapshot table (explicit schema) from DIR (or DIR/snapshots) and
writes one Parquet table per output under --out (constants.OUTPUT_TABLES), each written
aside and swapped into place. `--follow` keeps them current with Structured Streaming.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if not __package__:  # run as a file by spark-submit: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_analytics import brokers as brokers_steps  # noqa: E402
from spark_analytics import (  # noqa: E402
    constants,
    incremental,
    publish,
    queue_lag,
    rollups,
    status,
)
from spark_analytics.schema import SNAPSHOTS_DIR, spark_schema  # noqa: E402
from spark_analytics.session import build_session, java_problem, under_spark_submit  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

from pyspark.sql import functions as F  # noqa: E402

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


def read_parquet(spark: SparkSession, directory: Path) -> DataFrame:
    """A table directory read by naming its files: Spark ignores a directory whose own name
    starts with an underscore (the job's hidden run directories and state table), and the
    files in subdirectories that are not partitions (run-NNNNNN/) unless told."""
    files = [str(f) for f in incremental.committed_files(directory, None, hidden_ok=True)]
    if not files:
        raise RuntimeError(f"{directory}: no Parquet files")
    return spark.read.parquet(*files)


class TableWriter:
    """Where each output of run `run` goes, and how it is committed.

    - full run (atomic): every table into a staging directory beside --out/NAME (the
      per-snapshot tables inside it under run-NNNNNN/), all swapped in at the end
      (publish.publish) after the manifest was dropped, then the new manifest;
    - incremental run: the per-snapshot tables (APPENDED_TABLES) into a hidden
      --out/NAME/_run-NNNNNN/, renamed visible at the end; the current-state tables into
      staging directories, swapped in; then the manifest;
    - over Spark Connect the paths are the server's: tables overwritten in place.
    Keeps the seconds each write took."""

    def __init__(self, out: str, atomic: bool, run: int, incremental: bool) -> None:
        self.out, self.atomic, self.run, self.incremental = Path(out), atomic, run, incremental
        self.staged: dict[str, Path] = {}
        self.appended: list[Path] = []
        self.seconds: dict[str, float] = {}
        if atomic:
            self.out.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> Path:
        if not self.atomic:
            return self.out / name
        if name in constants.APPENDED_TABLES:
            if self.incremental:
                return self.out / name / incremental.run_dir_name(self.run, hidden=True)
            self.staged[name] = publish.staging_dir(self.out, name)
            return self.staged[name] / incremental.run_dir_name(self.run)
        self.staged[name] = publish.staging_dir(self.out, name)
        return self.staged[name]

    def write(self, name: str, df: DataFrame, files: int | None = None) -> str:
        """Writes `df` as table `name` (in `files` files if given); returns where."""
        path = self.path(name)
        if files is not None:
            df = df.coalesce(files)
        started = time.monotonic()
        df.write.mode("overwrite").parquet(str(path))
        self.seconds[name] = round(time.monotonic() - started, 3)
        if not name.startswith("_"):
            print(f"{PROG}: {name} written in {self.seconds[name]:.1f} s", file=sys.stderr,
                  flush=True)
        if self.atomic and self.incremental and name in constants.APPENDED_TABLES:
            self.appended.append(path)
        return str(path)

    def commit(self, manifest: incremental.Manifest) -> None:
        """Makes the run's outputs visible, then records it (the manifest last)."""
        if not self.atomic:
            return
        if not self.incremental:
            incremental.drop_manifest(self.out)
        for hidden in self.appended:
            os.rename(hidden, hidden.with_name(hidden.name.lstrip("_")))
        for name, path in self.staged.items():
            publish.publish(path, self.out, name)
        self.staged.clear()
        self.appended.clear()
        incremental.write_manifest(self.out, manifest)

    def discard(self) -> None:
        publish.remove_stale_staging(self.out)
        for hidden in self.appended:
            shutil.rmtree(hidden, ignore_errors=True)
        self.staged.clear()
        self.appended.clear()


@dataclass(frozen=True)
class RunPlan:
    """What one run reads: the snapshot files (all, or those after the committed
    manifest's watermark), the run number, and the manifest it appends to (None: full)."""

    files: list[str]
    run: int
    base: incremental.Manifest | None
    watermark_ms: int | None  # newest snapshot time the files' names give (None: unknown)


def plan_run(in_dir: str, out_dir: str, full: bool) -> RunPlan | None:
    """Which snapshots this run takes (None: nothing new since the last run). Cleans away
    what a run cut short left (it is repeated)."""
    out = Path(out_dir)
    base = None if full else incremental.read_manifest(out)
    if base is not None:
        incremental.remove_uncommitted(out, constants.APPENDED_TABLES, base.run)
    publish.remove_stale_staging(out) if out.is_dir() else None
    every = incremental.snapshot_files(Path(snapshots_path(in_dir)))
    files = incremental.files_after(every, base.watermark_ms if base else None)
    if not files:
        return None
    spans = [incremental.file_time_range(f) for f in files]
    newest = None if any(s is None for s in spans) else max(s[1] for s in spans if s)
    return RunPlan([str(f) for f in files], base.run + 1 if base else 1, base, newest)


def run_lag_job(spark: SparkSession, in_dir: str, out_dir: str, window: int,
                atomic: bool = True, full: bool = False) -> dict[str, float]:
    """Computes the output tables from the snapshots under `in_dir` and publishes them
    under `out_dir`; returns the seconds each table took ({} when no snapshot is new).

    Incremental unless `full` (or no committed manifest, or over Spark Connect): reads only
    the snapshots after the last run's watermark, appends their rows to the per-snapshot
    tables and recomputes the statuses, taking from the outputs what they need of the
    history (the statuses' window, the time-lag lookup's earlier points of the queues that
    need it, the per-broker byte figures).

    Passes over the input: one small aggregate per broker and snapshot and per queue
    (cached), one that writes queue_lag row by row, one over the rows of the queues that need
    the time-lag lookup (only those are shuffled), one for the broker and slave rows
    (cached); the roll-ups and statuses then read queue_lag's Parquet back, the statuses only
    the rows of each broker's last `window` snapshots."""
    if atomic:
        plan = plan_run(in_dir, out_dir, full)
        if plan is None:
            print(f"{PROG}: no snapshots newer than the last run's; nothing to do",
                  file=sys.stderr, flush=True)
            return {}
        snapshots = (spark.read.schema(spark_schema())
                     .option("basePath", snapshots_path(in_dir)).parquet(*plan.files))
    else:  # Spark Connect: the server's paths, read whole, tables overwritten
        plan = RunPlan([], 1, None, None)
        snapshots = read_snapshots(spark, snapshots_path(in_dir))
    base = plan.base
    out = Path(out_dir)
    if base is not None:
        snapshots = snapshots.filter(
            F.col("snapshot_time") > F.timestamp_millis(F.lit(base.watermark_ms)))
    watermark_ms = plan.watermark_ms
    if watermark_ms is None and atomic:
        newest = snapshots.agg(F.max(F.unix_millis("snapshot_time"))).first()[0]
        watermark_ms = newest if newest is not None else base.watermark_ms if base else 0
    writer = TableWriter(out_dir, atomic, plan.run, incremental=base is not None)
    rows = queue_lag.lagging_rows(snapshots)
    facts = queue_lag.snapshot_facts(rows).cache()
    new_facts = queue_lag.broker_facts(facts)
    earlier = None
    all_facts = new_facts
    if base is not None:
        all_facts = new_facts.unionByName(
            read_parquet(spark, out / constants.BROKER_FACTS))
        earlier = read_parquet(spark, out / constants.QUEUE_LAG)
    brokers = queue_lag.broker_snapshots(all_facts).cache()
    new_brokers = brokers if base is None else brokers.filter(
        F.col("snapshot_time") > F.timestamp_millis(F.lit(base.watermark_ms)))
    needing = queue_lag.queues_needing_lookup(facts)
    others = brokers_steps.broker_and_slave_rows(snapshots).cache()
    group_topic = group = None
    try:
        queue_path = writer.write(constants.QUEUE_LAG, queue_lag.queue_lag(
            rows, new_brokers, needing,
            None if earlier is None else earlier.select(*queue_lag.POINT_COLUMNS)))
        writer.write(constants.BROKER_FACTS, new_facts, SMALL_TABLE_FILES)
        queues = read_parquet(spark, Path(queue_path))
        recent = queues if earlier is None else queues.unionByName(earlier)
        status_path = writer.write(constants.QUEUE_STATUS, recent.transform(
            status.recent_rows(brokers, window)).transform(status.queue_status))
        writer.write(constants.GROUP_STATUS,
                     status.group_status(read_parquet(spark, Path(status_path))),
                     SMALL_TABLE_FILES)
        group_topic = rollups.group_topic_lag(queues).cache()
        appended_files = SMALL_TABLE_FILES if base is not None else None
        writer.write(constants.GROUP_TOPIC_LAG, group_topic, appended_files)
        group = rollups.group_lag(group_topic).cache()
        writer.write(constants.GROUP_LAG, group, appended_files)
        writer.write(constants.CLUSTER_LAG, rollups.cluster_lag(group), SMALL_TABLE_FILES)
        writer.write(constants.SLAVE_FALL_BEHIND, brokers_steps.slave_fall_behind(others),
                     SMALL_TABLE_FILES)
        writer.write(constants.BROKER_HEALTH, brokers_steps.broker_health(others),
                     SMALL_TABLE_FILES)
        writer.commit(incremental.Manifest(plan.run, watermark_ms or 0, window))
    except BaseException:
        if atomic:
            writer.discard()
        raise
    finally:
        for cached in (facts, brokers, others, group_topic, group):
            if cached is not None:
                cached.unpersist()
    return {k: v for k, v in writer.seconds.items() if not k.startswith("_")}


def has_snapshot_files(path: str) -> bool:
    return any(Path(path).rglob("*.parquet"))


FOLLOW_CHECKPOINT = "_follow_checkpoint"  # under --out: the stream's files seen


def follow(spark: SparkSession, in_dir: str, out_dir: str, window: int) -> None:
    """Structured Streaming over the snapshot directory: each micro-batch that brings new
    snapshot files runs the job incrementally (only the snapshots after the manifest's
    watermark; statuses and the time-lag lookup take the history they need from the
    outputs). The stream's checkpoint is kept under --out, so a restarted follower takes up
    the files that arrived meanwhile; the manifest keeps a snapshot from being counted
    twice either way. Stops cleanly on SIGINT / SIGTERM."""
    path = snapshots_path(in_dir)
    Path(path).mkdir(parents=True, exist_ok=True)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)

    def update(batch: DataFrame, batch_id: int) -> None:
        if stopping or batch.isEmpty():
            return
        started = time.monotonic()
        seconds = run_lag_job(spark, in_dir, out_dir, window)
        print(f"{PROG}: batch {batch_id}: {len(seconds)} tables updated in "
              f"{time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)

    checkpoint = Path(out_dir) / FOLLOW_CHECKPOINT
    stream = (spark.readStream.schema(spark_schema()).option("basePath", path)
              .parquet(path))
    query = (stream.writeStream.foreachBatch(update)
             .option("checkpointLocation", str(checkpoint))
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
    parser.add_argument("--full", action="store_true",
                        help="recompute every table from all the snapshots (default: only "
                        "the snapshots since the last run)")
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
                                  atomic=not args.remote, full=args.full)
            timings = " ".join(f"{name}={s}s" for name, s in seconds.items())
            print(f"{PROG}: wrote {len(seconds)} tables under {args.out_dir} in "
                  f"{time.monotonic() - started:.1f} s ({timings})", file=sys.stderr)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
