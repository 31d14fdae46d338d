"""Many consume queues at store level: `python -m bench.store_queues [--queues 10000,100000]`.

For each size: one 1 KiB message into each of N queues (topics of 8 queues), dispatched; the
store's fds, maps and RSS; a clean shutdown; then, each in a fresh process, a start after the
clean stop (queue positions from the snapshot) and a start after a crash (the abort file put
back: every queue scanned). Progress lines while it runs; the last line is one JSON object for
the largest size. The broker-level figures (topic creation, registration, routes) are
bench.scale's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def open_store(root: str) -> DefaultMessageStore:
    store = DefaultMessageStore(StoreConfig(store_path_root_dir=root,
                                            mapped_file_size_commit_log=256 << 20))
    store.load()
    store.start()
    return store


def phase_write(root: str, queues: int) -> dict[str, Any]:
    store = open_store(root)
    body = os.urandom(1024)
    t0 = time.monotonic()
    batch: list[Message] = []
    for i in range(queues):
        batch.append(Message(f"Q{i // QUEUES_PER_TOPIC:06d}", body, {"TAGS": "a"},
                             queue_id=i % QUEUES_PER_TOPIC))
        if len(batch) == BATCH or i == queues - 1:
            result = store.put_messages(batch)
            if not result.ok:
                raise SystemExit(f"put failed: {result}")
            batch = []
    put_s = time.monotonic() - t0
    deadline = time.monotonic() + DISPATCH_TIMEOUT_S
    while store.dispatch_behind_bytes and time.monotonic() < deadline:
        time.sleep(0.05)
    out: dict[str, Any] = {"put_s": round(put_s, 1),
                           "dispatch_s": round(time.monotonic() - t0, 1),
                           "queues_with_data": sum(1 for cq in store.consume_queues.values()
                                                   if cq.max_offset_in_queue),
                           "failed_queues": len(store.failed_queues)}
    out.update(process_stats())
    t0 = time.monotonic()
    store.shutdown()
    out["shutdown_s"] = round(time.monotonic() - t0, 1)
    return out


def phase_restart(root: str) -> dict[str, Any]:
    t0 = time.monotonic()
    store = open_store(root)
    out: dict[str, Any] = {"restart_s": round(time.monotonic() - t0, 1),
                           "queues": len(store.consume_queues),
                           "crashed": store.recovered_from_crash}
    out.update(process_stats())
    result = store.put_message(Message("Q000000", b"after restart", queue_id=0))
    out["put_after_restart"] = result.status.value
    store.shutdown()
    return out


def run_phase(phase: str, root: str, queues: int) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "bench.store_queues", "--phase", phase,
                           "--dir", root, "--queues", str(queues)],
                          capture_output=True, text=True, timeout=DISPATCH_TIMEOUT_S + 600)
    if proc.returncode != 0:
        raise SystemExit(f"{phase} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", default="10000,100000",
                    help="comma-separated numbers of queues (default 10000,100000)")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir in ./)")
    ap.add_argument("--phase", choices=("write", "restart"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # as the broker does
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
            (Path(root) / "abort").touch()
            crash = run_phase("restart", root, n)
            print(f"  start after a crash: {crash}", flush=True)
            last = {"queues": n, "queues_with_data": wrote["queues_with_data"],
                    "dispatch_s": wrote["dispatch_s"], "fds": wrote["fds"],
                    "maps": wrote["maps"], "rss_mib": wrote["rss_mib"],
                    "shutdown_s": wrote["shutdown_s"], "restart_s": clean["restart_s"],
                    "restart_rss_mib": clean["rss_mib"],
                    "restart_rss_anon_mib": clean["rss_anon_mib"], "restart_fds": clean["fds"],
                    "crash_restart_s": crash["restart_s"],
                    "crash_restart_rss_mib": crash["rss_mib"]}
            shutil.rmtree(root, ignore_errors=True)
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(last))


if __name__ == "__main__":
    main()
