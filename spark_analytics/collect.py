"""The lag collector: one snapshot of the whole cluster every interval, appended as Parquet.

`python -m spark_analytics.collect -n NAMESRV[;NAMESRV] --out DIR [--interval 10] [--once]`
(console script `mqcollect`). Each snapshot asks the name servers for every broker (masters
and slaves), then every broker at once for its runtime info (commitlog, dispatch, TPS and,
on a master, its slaves' fall-behind) and each broker group's master (its slave when the
master is gone) for the consume stats of every group. A broker that does not answer within
the timeout is a row saying so; the collector goes on. Rows follow `schema.COLUMNS`.

Files go to `DIR/snapshots/date=YYYY-MM-DD/hour=HH/snapshot-<ms>.parquet` (UTC), each
written under a hidden temporary name and renamed, so a reader never sees half a file.
No JVM here: pyarrow writes the files.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from common.constants import MASTER_ID
from mqclient.admin import NAMESRV_ADDR_ENV, AdminError, MQAdmin
from mqclient.admin_types import BrokerRuntime, ClusterInfo, ConsumerProgress
from mqclient.cli.arguments import host_port_list, seconds
from mqclient.cli.errors import stdout_closed
from spark_analytics.schema import (
    COLUMNS,
    KIND_BROKER,
    KIND_QUEUE,
    KIND_SLAVE,
    SNAPSHOTS_DIR,
    arrow_schema,
)

log = logging.getLogger("spark_analytics.collect")

DEFAULT_INTERVAL_S = 10.0
MAX_INTERVAL_S = 86400.0
DEFAULT_TIMEOUT_S = 5.0
FORGET_UNLISTED_MS = 3_600_000  # a broker gone from the name servers is asked for an hour
Row = dict[str, Any]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Snapshot:
    """The rows of one snapshot, kept by column (cheaper than a dict per row)."""

    def __init__(self, snapshot_ms: int) -> None:
        self.snapshot_ms = snapshot_ms
        self.columns: dict[str, list[Any]] = {c.name: [] for c in COLUMNS}
        self.rows = 0
        self.unreachable: list[str] = []

    def add(self, row: Row) -> None:
        for name, values in self.columns.items():
            values.append(row.get(name))
        self.rows += 1

    def table(self) -> pa.Table:
        self.columns["snapshot_time"] = [self.snapshot_ms] * self.rows
        return pa.table(self.columns, schema=arrow_schema())


class Collector:
    """Takes snapshots of the cluster the name servers describe (blocking; not for an event
    loop). Keeps the last broker list, so brokers are still asked when no name server
    answers."""

    def __init__(self, namesrv_addr: str | Sequence[str], *,
                 timeout: float = DEFAULT_TIMEOUT_S,
                 clock_ms: Callable[[], int] = _wall_clock_ms) -> None:
        self.admin = MQAdmin(namesrv_addr, timeout=timeout)
        self.clock_ms = clock_ms
        self.cluster: ClusterInfo | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(16, thread_name_prefix="collect")
        # (broker name, id) -> (address, cluster, when last listed): a broker the name servers
        # stop listing (a process that exited is dropped at once) is still asked, and written
        # unreachable while it does not answer, for FORGET_UNLISTED_MS.
        self.seen: dict[tuple[str, int], tuple[str, str | None, int]] = {}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.admin.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def snapshot(self) -> Snapshot:
        """One snapshot of every broker; AdminError when no broker is known at all."""
        snap = Snapshot(self.clock_ms())
        try:
            self.cluster = self.admin.cluster_info()
        except AdminError as e:
            if self.cluster is None:
                raise
            log.warning("%s; asking the %d brokers known from the last snapshot", e,
                        sum(len(g.addrs) for g in self.cluster.groups.values()))
        cluster = self.cluster
        assert cluster is not None
        cluster_of = {name: c for c, names in cluster.clusters.items() for name in names}
        brokers = [(g.broker_name, broker_id, addr) for g in cluster.all_groups()
                   for broker_id, addr in sorted(g.addrs.items())]
        listed = {(name, broker_id) for name, broker_id, _ in brokers}
        for name, broker_id, addr in brokers:
            self.seen[(name, broker_id)] = (addr, cluster_of.get(name), snap.snapshot_ms)
        unlisted = set()
        for (name, broker_id), (addr, cluster_name, listed_ms) in list(self.seen.items()):
            if (name, broker_id) in listed:
                continue
            if snap.snapshot_ms - listed_ms > FORGET_UNLISTED_MS:
                del self.seen[(name, broker_id)]
                continue
            brokers.append((name, broker_id, addr))
            unlisted.add((name, broker_id, addr))
            cluster_of.setdefault(name, cluster_name)
        runtimes = dict(zip(brokers, self._ask_all(
            [(self.admin.broker_runtime, addr) for _, _, addr in brokers]), strict=True))
        for (name, broker_id, addr), runtime in runtimes.items():
            base = {"cluster": cluster_of.get(name), "broker_name": name,
                    "broker_id": broker_id, "broker_addr": addr}
            if isinstance(runtime, AdminError):
                snap.unreachable.append(f"{name}/{broker_id} {addr}")
                error = str(runtime)
                if (name, broker_id, addr) in unlisted:
                    error = f"no longer listed by the name servers; {error}"
                snap.add({**base, "kind": KIND_BROKER, "reachable": False, "error": error})
                continue
            _add_broker(snap, base, runtime)
        for name, group_brokers, stats in self._consume_stats(brokers, runtimes):
            _add_queues(snap, cluster_of.get(name), name, group_brokers, stats)
        return snap

    def _ask_all(self, calls: list[tuple[Callable[[str], Any], str]]) -> list[Any]:
        """Every call at once; an AdminError in place of a call that failed."""
        def one(call: tuple[Callable[[str], Any], str]) -> Any:
            fn, addr = call
            try:
                return fn(addr)
            except AdminError as e:
                return e
        return list(self._pool.map(one, calls))

    def _consume_stats(self, brokers: list[tuple[str, int, str]],
                       runtimes: dict[tuple[str, int, str], Any]
                       ) -> list[tuple[str, tuple[int, str], Any]]:
        """Per broker group: (name, (id, addr) of the broker asked, its stats or the error).
        The master is asked; its slave when the master is gone or did not answer (consumers
        then commit there)."""
        chosen: dict[str, tuple[int, str]] = {}
        for key in brokers:
            name, broker_id, addr = key
            if isinstance(runtimes[key], AdminError):
                continue
            if name not in chosen or (broker_id == MASTER_ID) > (chosen[name][0] == MASTER_ID):
                chosen[name] = (broker_id, addr)
        names = sorted(chosen)
        answers = self._ask_all([(self.admin.broker_consume_stats, chosen[n][1])
                                 for n in names])
        return [(n, chosen[n], a) for n, a in zip(names, answers, strict=True)]


def _add_broker(snap: Snapshot, base: Row, rt: BrokerRuntime) -> None:
    common = {**base, "role": rt.broker_role, "broker_time_ms": rt.snapshot_timestamp_ms,
              "commitlog_max_offset": rt.commit_log_max_offset}
    snap.add({**common, "kind": KIND_BROKER, "reachable": True,
              "commitlog_min_offset": rt.commit_log_min_offset,
              "dispatch_behind_bytes": rt.dispatch_behind_bytes, "put_tps": rt.put_tps,
              "get_tps": rt.get_total_tps})
    for s in rt.slaves:
        if s.broker_id < 0 and not s.connected:
            continue  # a closed link of a slave that never said who it was
        snap.add({**common, "kind": KIND_SLAVE,
                  "slave_id": s.broker_id if s.broker_id >= 0 else None,
                  "slave_addr": s.addr, "slave_ack_offset": s.ack_offset,
                  "fall_behind_bytes": s.fall_behind_bytes,
                  "fall_behind_seconds": s.fall_behind_seconds, "in_sync": s.in_sync,
                  "link_state": s.state})


def _add_queues(snap: Snapshot, cluster: str | None, name: str, asked: tuple[int, str],
                stats: tuple[int, list[ConsumerProgress]] | AdminError) -> None:
    broker_id, addr = asked
    if isinstance(stats, AdminError):
        log.warning("consume stats of %s from %s: %s", name, addr, stats)
        return
    broker_time, groups = stats
    base = {"cluster": cluster, "broker_name": name, "broker_id": broker_id,
            "broker_addr": addr, "broker_time_ms": broker_time, "kind": KIND_QUEUE}
    for g in groups:
        for q in g.queues:
            snap.add({**base, "group": g.group, "topic": q.topic, "queue_id": q.queue_id,
                      "queue_min_offset": q.queue_min_offset, "broker_offset": q.broker_offset,
                      "consumer_offset": q.consumer_offset,
                      "first_unconsumed_ms": q.first_unconsumed_timestamp_ms or None,
                      "last_consumed_ms": q.last_timestamp_ms or None,
                      "last_commit_ms": q.last_commit_timestamp_ms or None,
                      "lag_bytes": q.lag_bytes,
                      "lag_bytes_method": "exact" if q.lag_bytes_exact else "estimated",
                      "online_consumers": g.online_consumers,
                      "consume_tps": g.consume_tps})


def snapshot_path(out_dir: Path, snapshot_ms: int) -> Path:
    t = datetime.datetime.fromtimestamp(snapshot_ms / 1000, datetime.UTC)
    return (out_dir / SNAPSHOTS_DIR / f"date={t:%Y-%m-%d}" / f"hour={t:%H}"
            / f"snapshot-{snapshot_ms}.parquet")


def write_snapshot(table: pa.Table, out_dir: Path, snapshot_ms: int) -> Path:
    """Writes one snapshot file: a hidden temporary name (Spark skips names starting with
    a dot), then a rename."""
    path = snapshot_path(out_dir, snapshot_ms)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return path


def run(collector: Collector, out_dir: Path, interval_s: float, once: bool,
        stop: threading.Event) -> int:
    """Snapshots every `interval_s` until `stop` (or once); a progress line each."""
    count = 0
    next_at = time.monotonic()
    while not stop.is_set():
        started = time.monotonic()
        try:
            snap = collector.snapshot()
            path = write_snapshot(snap.table(), out_dir, snap.snapshot_ms)
        except (AdminError, OSError) as e:
            print(f"mqcollect: snapshot failed: {e}", file=sys.stderr, flush=True)
            if once:
                return 1
        else:
            count += 1
            brokers = snap.columns["kind"].count(KIND_BROKER)
            unreachable = (f", unreachable: {', '.join(snap.unreachable)}"
                           if snap.unreachable else "")
            print(f"snapshot {count}: {brokers} brokers, {snap.rows} rows in "
                  f"{time.monotonic() - started:.2f} s -> {path}{unreachable}", flush=True)
        if once:
            return 0
        next_at += interval_s
        stop.wait(max(0.0, next_at - time.monotonic()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mqcollect", description="Collect offset snapshots of the whole cluster into "
        "Parquet for the lag job (python -m spark_analytics.lag).")
    parser.add_argument("-n", "--namesrvAddr", dest="namesrv", type=host_port_list,
                        help=f"name servers HOST:PORT;HOST:PORT (default ${NAMESRV_ADDR_ENV})")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--interval", type=seconds(MAX_INTERVAL_S), default=DEFAULT_INTERVAL_S,
                        help="seconds between snapshots (default 10)")
    parser.add_argument("--timeout", type=seconds(), default=DEFAULT_TIMEOUT_S,
                        help="seconds a broker has to answer (default 5)")
    parser.add_argument("--once", action="store_true", help="one snapshot, then exit")
    args = parser.parse_args(argv)
    namesrv = args.namesrv or os.environ.get(NAMESRV_ADDR_ENV, "")
    if not namesrv:
        parser.error(f"no name server address: give -n HOST:PORT or set {NAMESRV_ADDR_ENV}")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        with Collector(namesrv, timeout=args.timeout) as collector:
            return run(collector, args.out, args.interval, args.once, stop)
    except AdminError as e:
        print(f"mqcollect: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `mqcollect ... | head`: the reader had enough
        return stdout_closed()


if __name__ == "__main__":
    sys.exit(main())
