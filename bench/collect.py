"""Collector benchmark: `python -m bench.collect [--brokers 4] [--queues 200] [--groups 20]`.

Starts `mqcluster up --groups N` (N masters, real processes on loopback), gives each master
`--queues` queues holding messages, commits offsets for `--groups` groups on every queue
(a lag of a few messages each), then times collector snapshots (spark_analytics.collect:
name server, runtime info and consume stats of every broker, rows to an Arrow table and a
Parquet file). Reference in the same run: one GetRuntimeInfo round of every broker, the
least a snapshot must ask. The last line is one JSON object; `collect_s` is the median.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mqclient.admin import MQAdmin
from spark_analytics.collect import Collector, write_snapshot

QUEUES_PER_TOPIC = 8
MESSAGES_PER_QUEUE = 4
CONSUMED_PER_QUEUE = 1


def mqcluster(directory: Path, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "mqclient.cli.mqcluster", *args, "--dir",
                             str(directory)], capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise SystemExit(f"mqcluster {args[0]} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def progress(text: str) -> None:
    print(f"[bench.collect] {text}", file=sys.stderr, flush=True)


def prepare(admin: MQAdmin, brokers: int, queues: int, groups: int) -> int:
    """Topics, messages and committed offsets; returns the queue rows a snapshot holds."""
    topics = [f"BenchLag{i:03d}" for i in range(max(1, queues // QUEUES_PER_TOPIC))]
    for t in topics:
        admin.create_topic(t, read_queue_nums=QUEUES_PER_TOPIC,
                           write_queue_nums=QUEUES_PER_TOPIC)
    info = admin.cluster_info()
    masters = [(g.broker_name, g.master_addr) for g in info.all_groups()]
    queue_ids = [(name, addr, t, q) for name, addr in masters for t in topics
                 for q in range(QUEUES_PER_TOPIC)]
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        def fill(item: tuple[str, str | None, str, int]) -> None:
            name, _, topic, q = item
            for _ in range(MESSAGES_PER_QUEUE):
                admin.send_message(topic, b"x" * 1024, broker_name=name, queue_id=q)

        list(pool.map(fill, queue_ids))
        progress(f"{len(queue_ids)} queues filled with {MESSAGES_PER_QUEUE} messages each")

        def commit(item: tuple[str, str | None, str, int]) -> None:
            _, addr, topic, q = item
            assert addr is not None
            for g in range(groups):
                admin.update_consumer_offset(addr, f"BenchGroup{g:02d}", topic, q,
                                             CONSUMED_PER_QUEUE)

        list(pool.map(commit, queue_ids))
    progress(f"{groups} groups committed on every queue")
    return len(queue_ids) * groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=4)
    parser.add_argument("--queues", type=int, default=200, help="queues per broker")
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(measure(args.brokers, args.queues, args.groups, args.rounds)))


def measure(brokers: int = 4, queues: int = 200, groups: int = 20, rounds: int = 5
            ) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="bench-collect-"))
    cluster = root / "cluster"
    try:
        progress(f"starting {brokers} brokers")
        out = mqcluster(cluster, "up", "--namesrv-port", "0", "--groups", str(brokers),
                        "--set", "mappedFileSizeCommitLog=67108864")
        namesrv = next(line.split("=", 1)[1].strip("'\" ") for line in out.splitlines()
                       if line.startswith("NAMESRV_ADDR="))
        with MQAdmin(namesrv, timeout=30) as admin:
            rows = prepare(admin, brokers, queues, groups)
            addrs = [g.master_addr for g in admin.cluster_info().all_groups()]
            floor = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                admin.each_broker([("", a, 0) for a in addrs if a], admin.broker_runtime)
                floor.append(time.perf_counter() - t0)
        times = []
        with Collector(namesrv, timeout=30) as collector:
            for i in range(rounds):
                t0 = time.perf_counter()
                snap = collector.snapshot()
                write_snapshot(snap.table(), root / "out", snap.snapshot_ms)
                times.append(time.perf_counter() - t0)
                progress(f"snapshot {i + 1}/{rounds}: {snap.rows} rows in {times[-1]:.2f} s")
        queue_rows = snap.columns["kind"].count("queue")
        if queue_rows < rows:
            raise SystemExit(f"a snapshot held {queue_rows} queue rows, expected {rows}")
        result = {"brokers": brokers, "queues_per_broker": queues, "groups": groups,
                  "queue_rows": queue_rows, "collect_s": round(statistics.median(times), 3),
                  "collect_s_max": round(max(times), 3),
                  "ref_runtime_round_s": round(statistics.median(floor), 4)}
        progress(f"collect_s {result['collect_s']} (goal <= 2); reference: one runtime-info "
                 f"round {result['ref_runtime_round_s']} s")
        return result
    finally:
        subprocess.run([sys.executable, "-m", "mqclient.cli.mqcluster", "down", "--dir",
                        str(cluster)], capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
