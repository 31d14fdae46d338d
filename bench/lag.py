"""Lag job benchmark: `python -m bench.lag [--quick] [--runs N]`.

Generates synthetic snapshots as the collector writes them (pyarrow; not timed): 1,000
groups x 64 queues (16 on each of 4 broker groups, one of them the group's %RETRY% queue)
x 100 snapshots = 6.4 M queue rows, plus 8 broker rows and 4 slave rows per snapshot.
Groups behave in mixes that give every status; a tenth of them have no first-unconsumed
store time (their time lag is interpolated) and one broker gives no lag_bytes (average).

Then times, each as a subprocess so the JVM start counts, in seconds and in CPU seconds
(the process and its JVM; less sensitive than wall time to other load on the machine):
- job_s: `python -m spark_analytics.lag --full` in local mode over them;
- floor_s: a Spark job that reads the same files and writes one count per queue;
- incremental_s: one more snapshot (64,000 rows) arrives; `python -m spark_analytics.lag`
  over the same --out (an incremental run) against floor_one_s, the floor job over that
  one snapshot's file (--no-incremental skips it);
- collect_s: one collector snapshot of 4 brokers x 200 queues x 20 groups against real
  brokers (bench.collect; its reference: one runtime-info round to the same brokers).
Progress lines go to stderr; the last line is one JSON object (rows, job_s, rows_s, floor_s,
collect_s, and the per-table seconds of the job's last run).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_analytics.schema import (
    COLUMNS,
    KIND_BROKER,
    KIND_QUEUE,
    KIND_SLAVE,
    SNAPSHOTS_DIR,
    arrow_schema,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
BROKERS = ("broker-a", "broker-b", "broker-c", "broker-d")
QUEUES_PER_BROKER = 16
INTERVAL_MS = 10_000
T0_MS = 1_767_600_000_000
CLUSTER = "BenchCluster"
MESSAGE_BYTES = 1024
SEED = 20260105


def progress(message: str) -> None:
    print(f"bench.lag: {message}", file=sys.stderr, flush=True)


class QueueModel:
    """Per-queue parameters (one entry per queue row of a snapshot) and how a snapshot's
    offsets follow from them, as pyarrow arrays."""

    def __init__(self, groups: int, snapshots: int) -> None:
        rng = random.Random(SEED)
        cols: dict[str, list] = {k: [] for k in (
            "group", "topic", "broker_name", "queue_id", "rate", "base", "behaviour",
            "has_store_time", "has_bytes")}
        behaviours = ["ok"] * 80 + ["warn"] * 8 + ["stall"] * 4 + ["stop"] * 4 + \
            ["rewind"] * 2 + ["never"] * 2
        for g in range(groups):
            behaviour = behaviours[g % len(behaviours)]
            store_time = g % 10 != 3
            for b, broker_name in enumerate(BROKERS):
                for q in range(QUEUES_PER_BROKER):
                    retry = q == QUEUES_PER_BROKER - 1
                    cols["group"].append(f"Group{g:04d}")
                    cols["topic"].append(f"%RETRY%Group{g:04d}" if retry else f"Topic{g % 100:03d}")
                    cols["broker_name"].append(broker_name)
                    cols["queue_id"].append(0 if retry else q)
                    cols["rate"].append(rng.randint(1, 50))
                    cols["base"].append(rng.randint(0, 1_000_000))
                    cols["behaviour"].append(behaviour)
                    cols["has_store_time"].append(store_time)
                    cols["has_bytes"].append(b != len(BROKERS) - 1)
        self.n = len(cols["group"])
        self.snapshots = snapshots
        self.static = {
            "group": pa.array(cols["group"]), "topic": pa.array(cols["topic"]),
            "broker_name": pa.array(cols["broker_name"]),
            "queue_id": pa.array(cols["queue_id"], pa.int32())}
        self.rate = pa.array(cols["rate"], pa.int64())
        self.base = pa.array(cols["base"], pa.int64())
        self.behaviour = pa.array(cols["behaviour"])
        self.has_store_time = pa.array(cols["has_store_time"])
        self.has_bytes = pa.array(cols["has_bytes"])
        self.jitter = pa.array([rng.randint(0, 3) for _ in range(self.n)], pa.int64())

    def snapshot(self, s: int) -> pa.Table:
        n = self.n
        clock = T0_MS + s * INTERVAL_MS
        broker_offset = pc.add(self.base, pc.multiply(self.rate, s * 10))
        is_ = {b: pc.equal(self.behaviour, b) for b in ("ok", "warn", "stall", "stop",
                                                         "rewind", "never")}
        healthy_lag = pc.multiply(self.jitter, (s % 4))  # 0 every 4th snapshot
        growing_lag = pc.multiply(self.rate, 2 * s + 1)
        frozen = pc.subtract(self.base, 0)  # the offset of snapshot 0
        rewound = pc.subtract(self.base, 500) if s >= self.snapshots - 5 else \
            pc.subtract(broker_offset, pc.add(self.rate, 1))
        consumer = pc.subtract(broker_offset, healthy_lag)
        consumer = pc.if_else(is_["warn"], pc.subtract(broker_offset, growing_lag), consumer)
        consumer = pc.if_else(pc.or_(is_["stall"], is_["stop"]), frozen, consumer)
        consumer = pc.if_else(is_["rewind"], rewound, consumer)
        consumer = pc.if_else(is_["never"], pa.scalar(-1, pa.int64()), consumer)
        position = pc.max_element_wise(consumer, pa.scalar(0, pa.int64()))
        lag = pc.subtract(broker_offset, position)
        lagging = pc.greater(lag, 0)
        store_ms = pc.subtract(pa.scalar(clock, pa.int64()),
                               pc.multiply(pc.divide(pc.multiply(lag, 1000), self.rate), 10))
        first_unconsumed = pc.if_else(pc.and_(lagging, self.has_store_time), store_ms,
                                      pa.scalar(None, pa.int64()))
        last_commit = pc.if_else(is_["stop"], pa.scalar(T0_MS - 60_000, pa.int64()),
                                 pa.scalar(clock - 2_000, pa.int64()))
        lag_bytes = pc.if_else(self.has_bytes, pc.multiply(lag, MESSAGE_BYTES),
                               pa.scalar(None, pa.int64()))
        when = pa.scalar(clock, pa.timestamp("ms", tz="UTC"))
        columns = {
            "snapshot_time": pa.array([clock] * n, pa.timestamp("ms", tz="UTC")),
            "kind": pa.array([KIND_QUEUE] * n), "cluster": pa.array([CLUSTER] * n),
            **self.static,
            "broker_id": pa.array([0] * n, pa.int64()),
            "broker_time_ms": pa.array([clock + 50] * n, pa.int64()),
            "queue_min_offset": pa.array([0] * n, pa.int64()),
            "broker_offset": broker_offset, "consumer_offset": consumer,
            "first_unconsumed_ms": first_unconsumed, "last_commit_ms": last_commit,
            "lag_bytes": lag_bytes,
            "lag_bytes_method": pc.if_else(self.has_bytes, pa.scalar("exact"),
                                           pa.scalar(None, pa.string())),
            "online_consumers": pc.if_else(is_["stop"], pa.scalar(0, pa.int32()),
                                           pa.scalar(1, pa.int32())),
        }
        del when
        schema = arrow_schema()
        arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type)
                  for f in schema]
        queues = pa.Table.from_arrays(arrays, schema=schema)
        return pa.concat_tables([queues, broker_rows(s, clock)])


def broker_rows(s: int, clock: int) -> pa.Table:
    rows = []
    base = {c.name: None for c in COLUMNS}
    when = dt.datetime.fromtimestamp(clock / 1000, dt.UTC)
    for b, name in enumerate(BROKERS):
        master_max = 10_000_000 + s * 1_000_000 * (b + 1)
        rows.append({**base, "snapshot_time": when, "kind": KIND_BROKER, "cluster": CLUSTER,
                     "broker_name": name, "broker_id": 0, "reachable": True,
                     "role": "ASYNC_MASTER", "broker_time_ms": clock + 50,
                     "commitlog_min_offset": 0, "commitlog_max_offset": master_max,
                     "dispatch_behind_bytes": b * 100, "put_tps": 100.0 * (b + 1)})
        slave_up = not (b == 3 and s % 10 == 9)
        slave_max = master_max - b * 50_000 * s
        rows.append({**base, "snapshot_time": when, "kind": KIND_BROKER, "cluster": CLUSTER,
                     "broker_name": name, "broker_id": 1, "reachable": slave_up,
                     "error": None if slave_up else "DEADLINE_EXCEEDED",
                     "role": "SLAVE" if slave_up else None,
                     "broker_time_ms": clock + 60 if slave_up else None,
                     "commitlog_max_offset": slave_max if slave_up else None})
        rows.append({**base, "snapshot_time": when, "kind": KIND_SLAVE, "cluster": CLUSTER,
                     "broker_name": name, "broker_id": 0, "slave_id": 1,
                     "commitlog_max_offset": master_max, "slave_ack_offset": slave_max,
                     "fall_behind_bytes": master_max - slave_max,
                     "fall_behind_seconds": float(b * s) / 10, "in_sync": b < 2,
                     "link_state": "connected"})
    return pa.Table.from_pylist(rows, schema=arrow_schema())


def generate(directory: Path, groups: int, snapshots: int) -> int:
    """Writes the snapshots as the collector does (one file per snapshot); returns rows."""
    model = QueueModel(groups, snapshots)
    rows = 0
    for s in range(snapshots):
        when = dt.datetime.fromtimestamp((T0_MS + s * INTERVAL_MS) / 1000, dt.UTC)
        part = directory / SNAPSHOTS_DIR / f"date={when:%Y-%m-%d}" / f"hour={when:%H}"
        part.mkdir(parents=True, exist_ok=True)
        table = model.snapshot(s)
        pq.write_table(table, part / f"snapshot-{int(when.timestamp() * 1000)}.parquet")
        rows += model.n
        if (s + 1) % max(1, snapshots // 10) == 0:
            progress(f"generated {s + 1}/{snapshots} snapshots")
    return rows


def floor_job(in_dir: str, out_dir: str) -> None:
    """The floor: read the same files, write one count per queue."""
    from pyspark.sql import functions as F

    from spark_analytics.lag import read_snapshots, snapshots_path
    from spark_analytics.queue_lag import QUEUE_KEY
    from spark_analytics.session import build_session

    spark = build_session("rocketmq-lag-floor")
    try:
        (read_snapshots(spark, snapshots_path(in_dir)).filter(F.col("kind") == KIND_QUEUE)
         .groupBy(*QUEUE_KEY).count().write.mode("overwrite").parquet(out_dir))
    finally:
        spark.stop()


def _cpu_seconds(pid: int) -> float:
    """utime + stime of one process (its waited-for children included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.append(child)
            todo.append(child)
    return found


def timed(args: list[str]) -> tuple[float, str, float]:
    """Runs `python ARGS`; returns its wall seconds, stderr and CPU seconds (the process
    and its JVM, sampled from /proc every 0.2 s: CPU time is what other load on the
    machine changes least)."""
    started = time.monotonic()
    cpu: dict[int, float] = {}
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, *args], cwd=REPO_ROOT,
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
        while proc.poll() is None:
            for pid in [proc.pid, *_descendants(proc.pid)]:
                cpu[pid] = max(cpu.get(pid, 0.0), _cpu_seconds(pid))
            time.sleep(0.2)
        seconds = time.monotonic() - started
        err.seek(0)
        stderr = err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{args} failed ({proc.returncode}):\n{stderr[-4000:]}")
    return seconds, stderr, sum(cpu.values())


def incremental_figures(data: Path, work: Path, groups: int, snapshots: int,
                        runs: int) -> dict[str, object]:
    """One more snapshot arrives after the full run: the incremental run (`mqlag` without
    --full over the same --out) against the floor job over that one snapshot's file."""
    model = QueueModel(groups, snapshots + runs)
    one = work / "one"
    incr, floor, incr_cpu, floor_cpu = [], [], [], []
    added: list[Path] = []
    try:
        for run in range(runs):
            s = snapshots + run
            when = dt.datetime.fromtimestamp((T0_MS + s * INTERVAL_MS) / 1000, dt.UTC)
            name = f"snapshot-{int(when.timestamp() * 1000)}.parquet"
            table = model.snapshot(s)
            shutil.rmtree(one, ignore_errors=True)
            for root in (data, one):
                part = root / SNAPSHOTS_DIR / f"date={when:%Y-%m-%d}" / f"hour={when:%H}"
                part.mkdir(parents=True, exist_ok=True)
                pq.write_table(table, part / name)
            added.append(data / (part / name).relative_to(one))
            progress(f"run {run + 1}/{runs}: incremental lag job after one snapshot "
                     f"({model.n} rows)")
            seconds, stderr, cpu_s = timed(["-m", "spark_analytics.lag", "--in", str(data),
                                            "--out", str(work / "out")])
            incr.append(seconds)
            incr_cpu.append(cpu_s)
            progress(f"incremental {seconds:.1f} s, {cpu_s:.1f} s CPU")
            seconds, _, cpu_s = timed(["-m", "bench.lag", "--floor-job", str(one),
                                       str(work / "floor-one")])
            floor.append(seconds)
            floor_cpu.append(cpu_s)
            progress(f"floor over that snapshot {seconds:.1f} s, {cpu_s:.1f} s CPU")
    finally:
        for path in added:  # --keep's directory stays as generated
            path.unlink(missing_ok=True)
    return {"incremental_s": round(min(incr), 2), "floor_one_s": round(min(floor), 2),
            "incremental_over_floor": round(min(incr) / min(floor), 2),
            "incremental_cpu_s": round(min(incr_cpu), 1),
            "floor_one_cpu_s": round(min(floor_cpu), 1),
            "incremental_over_floor_cpu": round(min(incr_cpu) / min(floor_cpu), 2),
            "incremental_runs_s": [round(x, 2) for x in incr],
            "floor_one_runs_s": [round(x, 2) for x in floor]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.lag", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 groups x 20 snapshots")
    parser.add_argument("--runs", type=int, default=1, help="timed runs of each (best kept)")
    parser.add_argument("--no-collect", action="store_true",
                        help="skip collect_s (it starts 4 brokers)")
    parser.add_argument("--no-incremental", action="store_true",
                        help="skip the incremental run after one more snapshot")
    parser.add_argument("--keep", type=Path, default=None, help="generate into / reuse DIR")
    parser.add_argument("--floor-job", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor_job:
        floor_job(*args.floor_job)
        return 0
    groups, snapshots = (100, 20) if args.quick else (1000, 100)
    work = Path(tempfile.mkdtemp(prefix="bench-lag-"))
    data = args.keep or work / "in"
    try:
        rows = groups * len(BROKERS) * QUEUES_PER_BROKER * snapshots
        if args.keep and (data / SNAPSHOTS_DIR).is_dir():
            progress(f"reusing {data}")
        else:
            progress(f"generating {groups} groups x 64 queues x {snapshots} snapshots")
            rows = generate(data, groups, snapshots)
        job_runs, floor_runs, tables, cpu = [], [], {}, {"job": [], "floor": []}
        for run in range(args.runs):
            progress(f"run {run + 1}/{args.runs}: lag job (--full)")
            seconds, stderr, cpu_s = timed(["-m", "spark_analytics.lag", "--in", str(data),
                                            "--out", str(work / "out"), "--full"])
            job_runs.append(seconds)
            cpu["job"].append(cpu_s)
            tables = dict(re.findall(r"(\w+)=([\d.]+)s", stderr))
            progress(f"lag job {seconds:.1f} s, {cpu_s:.1f} s CPU "
                     f"({' '.join(f'{k}={v}' for k, v in tables.items())})")
            progress(f"run {run + 1}/{args.runs}: floor")
            seconds, _, cpu_s = timed(["-m", "bench.lag", "--floor-job", str(data),
                                       str(work / "floor")])
            floor_runs.append(seconds)
            cpu["floor"].append(cpu_s)
            progress(f"floor {seconds:.1f} s, {cpu_s:.1f} s CPU")
        job_s, floor_s = min(job_runs), min(floor_runs)
        result: dict[str, object] = {
            "rows": rows, "job_s": round(job_s, 2), "rows_s": round(rows / job_s),
            "floor_s": round(floor_s, 2), "job_over_floor": round(job_s / floor_s, 2),
            "job_cpu_s": round(min(cpu["job"]), 1), "floor_cpu_s": round(min(cpu["floor"]), 1),
            "job_over_floor_cpu": round(min(cpu["job"]) / min(cpu["floor"]), 2)}
        if not args.no_incremental:
            result.update(incremental_figures(data, work, groups, snapshots, args.runs))
        collect: dict[str, object] = {}
        if not args.no_collect:
            from bench.collect import measure

            progress("collect_s: one snapshot of 4 brokers x 200 queues x 20 groups")
            collect = measure()
        print(json.dumps({**result,
                          "collect_s": collect.get("collect_s"),
                          "collect_ref_runtime_round_s": collect.get("ref_runtime_round_s"),
                          "job_runs_s": [round(s, 2) for s in job_runs],
                          "floor_runs_s": [round(s, 2) for s in floor_runs],
                          "job_tables_s": {k: float(v) for k, v in tables.items()}}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
