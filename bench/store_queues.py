"""Many consume queues at store level: `python -m bench.store_queues [--queues 10000,100000]`.

For each size: one 1 KiB message into each of N queues (topics of 8 queues), dispatched; the
store's fds, maps and RSS; what a consume-queue snapshot costs (all queues encoded, then again
after 1/8 of them changed); a clean shutdown; then, each in a fresh process:
- a start after the clean stop (queue positions from the snapshot written then);
- a start after kill -9: a process started from there puts one more message into every 8th
  queue (`--every`) and into new topics (1/100 of N queues), all after the last snapshot
  (the one its start wrote), and is killed
  with SIGKILL once they are dispatched; the start after it takes the positions from the
  snapshot and re-dispatches the commitlog after it. It checks that every message put is in
  its queue (queue offsets contiguous: the sum of the queues' max offsets);
- a start that scans every queue (the abort file put back after a clean stop: the snapshot of
  a clean stop is not used after a crash), as every crash did before the periodic snapshot.
Each start reports wall and CPU seconds and the load average. Progress lines while it runs;
the last line is one JSON object for the largest size. The broker-level figures (topic
creation, registration, routes) are bench.scale's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from store import cq_snapshot
from store.config import StoreConfig
from store.message import Message
from store.message_store import DefaultMessageStore

QUEUES_PER_TOPIC = 8
BATCH = 256
DISPATCH_TIMEOUT_S = 1800.0


def process_stats() -> dict[str, int]:
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    with open("/proc/self/status") as f:
        status = {k: v for k, _, v in (line.partition(":") for line in f)}
    rss_kib = int(status["VmRSS"].split()[0])
    anon_kib = int(status["RssAnon"].split()[0])  # the rest: mapped file pages (commitlog)
    return {"fds": len(os.listdir("/proc/self/fd")), "maps": maps, "rss_mib": rss_kib // 1024,
            "rss_anon_mib": anon_kib // 1024}


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def open_store(root: str, snapshot_interval_ms: int = 10_000) -> DefaultMessageStore:
    store = DefaultMessageStore(StoreConfig(
        store_path_root_dir=root, mapped_file_size_commit_log=256 << 20,
        consume_queue_snapshot_interval=snapshot_interval_ms))
    store.load()
    store.start()
    return store


def put_each(store: DefaultMessageStore, keys: list[tuple[str, int]]) -> None:
    body = os.urandom(1024)
    batch: list[Message] = []
    for i, (topic, queue_id) in enumerate(keys):
        batch.append(Message(topic, body, {"TAGS": "a"}, queue_id=queue_id))
        if len(batch) == BATCH or i == len(keys) - 1:
            result = store.put_messages(batch)
            if not result.ok:
                raise SystemExit(f"put failed: {result}")
            batch = []


def wait_dispatched(store: DefaultMessageStore) -> None:
    deadline = time.monotonic() + DISPATCH_TIMEOUT_S
    while store.dispatch_behind_bytes and time.monotonic() < deadline:
        time.sleep(0.05)


def queue_keys(queues: int, prefix: str = "Q") -> list[tuple[str, int]]:
    return [(f"{prefix}{i // QUEUES_PER_TOPIC:06d}", i % QUEUES_PER_TOPIC)
            for i in range(queues)]


def snapshot_cost(store: DefaultMessageStore, queues: int) -> dict[str, Any]:
    """Seconds (wall, CPU of this process) to encode and write a snapshot of every queue,
    then of the 1/8 of them written since; its size."""
    out: dict[str, Any] = {}
    for name, keys in (("full", None), ("eighth_changed", queue_keys(queues)[::8])):
        if keys is None:
            store.queues.encode_all_next()
        else:
            put_each(store, keys)
            wait_dispatched(store)
        t0, c0 = time.monotonic(), cpu_s()
        snap = store.queues.encode_snapshot(cq_snapshot.RUNNING, store.reput_from_offset)
        assert snap is not None
        store.queues.write_snapshot(*snap)
        out[f"snapshot_{name}_s"] = round(time.monotonic() - t0, 3)
        out[f"snapshot_{name}_cpu_s"] = round(cpu_s() - c0, 3)
    out["snapshot_kib"] = os.path.getsize(store.queues.snapshot_path) // 1024
    return out


def phase_write(root: str, queues: int) -> dict[str, Any]:
    # Snapshots written by hand only (snapshot_cost), not by the flush service meanwhile.
    store = open_store(root, snapshot_interval_ms=1 << 40)
    t0 = time.monotonic()
    put_each(store, queue_keys(queues))
    put_s = time.monotonic() - t0
    wait_dispatched(store)
    out: dict[str, Any] = {"put_s": round(put_s, 1),
                           "dispatch_s": round(time.monotonic() - t0, 1),
                           "queues_with_data": sum(1 for cq in store.queues.table.values()
                                                   if cq.max_offset_in_queue),
                           "failed_queues": len(store.queues.failed)}
    out.update(process_stats())
    out.update(snapshot_cost(store, queues))
    t0 = time.monotonic()
    store.shutdown()
    out["shutdown_s"] = round(time.monotonic() - t0, 1)
    return out


def phase_kill(root: str, queues: int, every: int) -> None:
    """Puts after the last snapshot (the one of the start), then SIGKILL once dispatched."""
    store = open_store(root)
    time.sleep(1.5)  # the first flush round writes the snapshot
    put_each(store, queue_keys(queues)[::every] + queue_keys(max(8, queues // 100), "N"))
    wait_dispatched(store)
    print(json.dumps({"killed": True}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def phase_restart(root: str) -> dict[str, Any]:
    t0, c0 = time.monotonic(), cpu_s()
    store = open_store(root)
    out: dict[str, Any] = {"restart_s": round(time.monotonic() - t0, 1),
                           "restart_cpu_s": round(cpu_s() - c0, 2),
                           "load_avg_1m": os.getloadavg()[0],
                           "queues": len(store.queues.table),
                           "crashed": store.recovered_from_crash,
                           "messages_in_queues": sum(cq.max_offset_in_queue - cq.min_offset_in_queue
                                                     for cq in store.queues.table.values())}
    out.update(process_stats())
    result = store.put_message(Message("Q000000", b"after restart", queue_id=0))
    out["put_after_restart"] = result.status.value
    store.shutdown()
    return out


def run_phase(phase: str, root: str, queues: int, every: int = 8) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "bench.store_queues", "--phase", phase,
                           "--dir", root, "--queues", str(queues), "--every", str(every)],
                          capture_output=True, text=True, timeout=DISPATCH_TIMEOUT_S + 600)
    killed = phase == "kill" and proc.returncode == -signal.SIGKILL
    if proc.returncode != 0 and not killed:
        raise SystemExit(f"{phase} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", default="10000,100000",
                    help="comma-separated numbers of queues (default 10000,100000)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir in ./)")
    ap.add_argument("--every", type=int, default=8,
                    help="before the kill -9, one more message into every EVERY-th queue "
                         "(default 8; 1: every queue changed after the snapshot)")
    ap.add_argument("--phase", choices=("write", "kill", "restart"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # as the broker does
    if args.phase == "kill":
        phase_kill(args.dir, int(args.queues), args.every)
    if args.phase:
        result = (phase_write(args.dir, int(args.queues)) if args.phase == "write"
                  else phase_restart(args.dir))
        print(json.dumps(result))
        return
    sizes = [int(s) for s in args.queues.split(",")]
    base = Path(args.dir or tempfile.mkdtemp(prefix="bench-store-queues-", dir="."))
    last: dict[str, Any] = {}
    try:
        for n in sizes:
            root = str(base / f"q{n}")
            shutil.rmtree(root, ignore_errors=True)
            print(f"{n} queues: writing one message into each...", flush=True)
            wrote = run_phase("write", root, n)
            print(f"  {wrote}", flush=True)
            clean = run_phase("restart", root, n)
            print(f"  start after a clean stop: {clean}", flush=True)
            run_phase("kill", root, n, args.every)
            killed = run_phase("restart", root, n)
            # n, every 8th queue (snapshot_cost), the clean restart's put, every EVERY-th
            # queue (phase_kill), the new topics' queues.
            expected = (n + len(queue_keys(n)[::8]) + 1 + len(queue_keys(n)[::args.every])
                        + max(8, n // 100))
            lost = expected - killed["messages_in_queues"]
            print(f"  start after kill -9 (snapshot older than the last puts): {killed}; "
                  f"messages missing from their queues: {lost}", flush=True)
            (Path(root) / "abort").touch()
            crash = run_phase("restart", root, n)
            print(f"  start scanning every queue (abort file put back): {crash}", flush=True)
            last = {"queues": n, "queues_with_data": wrote["queues_with_data"],
                    "dispatch_s": wrote["dispatch_s"], "fds": wrote["fds"],
                    "maps": wrote["maps"], "rss_mib": wrote["rss_mib"],
                    "shutdown_s": wrote["shutdown_s"], "restart_s": clean["restart_s"],
                    "restart_rss_mib": clean["rss_mib"],
                    "restart_rss_anon_mib": clean["rss_anon_mib"], "restart_fds": clean["fds"],
                    "kill9_restart_s": killed["restart_s"],
                    "kill9_restart_cpu_s": killed["restart_cpu_s"],
                    "kill9_restart_rss_mib": killed["rss_mib"], "kill9_lost": lost,
                    "full_scan_restart_s": crash["restart_s"],
                    "full_scan_restart_cpu_s": crash["restart_cpu_s"],
                    "load_avg_1m": crash["load_avg_1m"],
                    **{k: v for k, v in wrote.items() if k.startswith("snapshot_")}}
            shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(last))


if __name__ == "__main__":
    main()
