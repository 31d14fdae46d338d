"""Store benchmark: `python -m bench.store [--messages N] [--batch B] [--dir DIR]`.

Appends 1 KiB messages (with TAGS and UNIQ_KEY, as a producer sends them by default;
consume-queue and index dispatch included in the time), reads them back, recovers after a
simulated crash, and measures the same disk raw as the reference. The last line is one JSON object.

ASYNC_FLUSH, one writer, is measured twice: `append_async_msgs_s` hands the store lists of
`--batch` messages per put_messages call (what the broker does for a batch send; the batch
size is in `append_async_batch`), `append_async_single_msgs_s` one put_message per message.
With the C fast paths built, `append_async_python_msgs_s` is the batch figure without them.
SYNC_FLUSH: 1 and 32 concurrent asyncio writers, each awaiting put_messages_async of single
messages (the store appends the puts of one loop iteration together).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from common import native
from store.config import StoreConfig
from store.constants import FlushDiskType
from store.message import Message
from store.message_store import DefaultMessageStore

BODY = os.urandom(1024)
QUEUES = 8


def make_messages(n: int, start: int = 0) -> list[Message]:
    """Messages built before the clock starts. They are frozen out of the garbage collector:
    a broker holds only the messages in flight, while hundreds of thousands of live objects
    made up front would have every full collection walk them all."""
    msgs = [
        Message("BenchTopic", BODY,
                {"TAGS": f"Tag{i % 4}", "UNIQ_KEY": f"7F0000010001{i:020X}"},
                queue_id=i % QUEUES, born_timestamp=1)
        for i in range(start, start + n)
    ]
    gc.collect()
    gc.freeze()
    return msgs


def open_store(root: Path, flush: FlushDiskType, file_size: int) -> DefaultMessageStore:
    cfg = StoreConfig(store_path_root_dir=str(root), flush_disk_type=flush,
                      mapped_file_size_commit_log=file_size)
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    store.commitlog.allocator.wait_prepared()  # the first file is warmed before timing
    return store


def wait_dispatched(store: DefaultMessageStore) -> None:
    while store.reput_from_offset < store.commitlog.max_wrote_offset:
        time.sleep(0.0005)


def bench_append_async(root: Path, n: int, file_size: int, batch: int,
                       pure_python: bool = False) -> tuple[float, DefaultMessageStore]:
    """One writer, `batch` messages per put_messages call (1: put_message per message);
    `pure_python`: without the store's C fast paths."""
    lib = native.lib
    if pure_python:
        native.lib = None  # taken by the store's objects when they are made
    try:
        store = open_store(root, FlushDiskType.ASYNC_FLUSH, file_size)
    finally:
        native.lib = lib
    msgs = make_messages(n)
    t0 = time.perf_counter()
    if batch == 1:
        put = store.put_message
        for m in msgs:
            put(m)
    else:
        puts = store.put_messages
        for i in range(0, n, batch):
            puts(msgs[i : i + batch])
    wait_dispatched(store)
    rate = n / (time.perf_counter() - t0)
    del msgs
    gc.unfreeze()
    return rate, store


def bench_read(store: DefaultMessageStore) -> float:
    t0 = time.perf_counter()
    count = 0
    for q in range(QUEUES):
        offset = store.get_min_offset_in_queue("BenchTopic", q)
        end = store.get_max_offset_in_queue("BenchTopic", q)
        while offset < end:
            r = store.get_message("bench", "BenchTopic", q, offset, 32)
            count += len(r.messages)
            offset = r.next_begin_offset
    return count / (time.perf_counter() - t0)


def bench_recover(root: Path, rebuild: bool) -> float:
    """Crash recovery (abort file present) with a zeroed checkpoint, so every record of the
    commitlog is checked (magic, size, CRC). With `rebuild` the consume queues and index are
    deleted first and every record is re-dispatched as well."""
    (root / "abort").touch()
    (root / "checkpoint").write_bytes(bytes(4096))
    if rebuild:
        shutil.rmtree(root / "consumequeue", ignore_errors=True)
        shutil.rmtree(root / "index", ignore_errors=True)
    store = DefaultMessageStore(StoreConfig(store_path_root_dir=str(root),
                                            mapped_file_size_commit_log=_file_size(root)))
    t0 = time.perf_counter()
    store.load()
    elapsed = time.perf_counter() - t0
    data_end = store.commitlog.max_offset
    store.running = True
    store.shutdown()
    return elapsed / (data_end / (1 << 30))


def _file_size(root: Path) -> int:
    return next((root / "commitlog").iterdir()).stat().st_size


def bench_sync(root: Path, writers: int, seconds: float, file_size: int) -> float:
    store = open_store(root, FlushDiskType.SYNC_FLUSH, file_size)
    done = 0
    stop_at = time.perf_counter() + seconds

    pool = make_messages(20_000)

    async def writer(w: int) -> None:
        nonlocal done
        i = w
        while time.perf_counter() < stop_at:
            r = await store.put_messages_async([pool[i % len(pool)]])
            assert r.ok, r.status
            done += 1
            i += writers

    async def main() -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*(writer(w) for w in range(writers)))
        return done / (time.perf_counter() - t0)

    try:
        return asyncio.run(main())
    finally:
        store.shutdown()
        gc.unfreeze()


def disk_reference(root: Path) -> tuple[float, float]:
    path = root / "raw"
    chunk = os.urandom(1 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0 = time.perf_counter()
        for _ in range(256):
            os.write(fd, chunk)
        os.fsync(fd)
        seq = 256 / (time.perf_counter() - t0)
        page = os.urandom(4096)
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 2.0:
            os.pwrite(fd, page, n * 4096)
            os.fdatasync(fd)
            n += 1
        syncs = n / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    return seq, syncs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--file-size", type=int, default=1 << 30)
    ap.add_argument("--sync-seconds", type=float, default=3.0)
    ap.add_argument("--batch", type=int, default=32,
                    help="messages per put_messages call for append_async_msgs_s")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir in ./)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-store-", dir=args.dir or "."))
    results: dict[str, float] = {}
    try:
        seq, syncs = disk_reference(base)
        results["disk_seq_mb_s"] = seq
        results["disk_fdatasync_per_s"] = syncs
        print(f"raw disk: {seq:.0f} MB/s sequential, {syncs:.0f} fdatasync/s", flush=True)

        rate, store = bench_append_async(base / "single", args.messages, args.file_size, 1)
        store.shutdown()
        shutil.rmtree(base / "single")
        results["append_async_single_msgs_s"] = rate
        print(f"append ASYNC_FLUSH, 1 writer, put_message per message: {rate:,.0f} msgs/s",
              flush=True)
        rate, store = bench_append_async(base / "async", args.messages, args.file_size,
                                         args.batch)
        results["append_async_msgs_s"] = rate
        results["append_async_batch"] = args.batch
        results["native"] = native.lib is not None
        print(f"append ASYNC_FLUSH, 1 writer, put_messages of {args.batch} messages per call "
              f"(as a broker for a batch send): {rate:,.0f} msgs/s", flush=True)
        if native.lib is not None:  # the same without the C fast paths, for comparison
            py_rate, py_store = bench_append_async(base / "python", args.messages,
                                                   args.file_size, args.batch, pure_python=True)
            py_store.shutdown()
            shutil.rmtree(base / "python")
            results["append_async_python_msgs_s"] = py_rate
            print(f"  the same in pure Python (STORE_NATIVE=0): {py_rate:,.0f} msgs/s", flush=True)
        rate = bench_read(store)
        results["read_msgs_s"] = rate
        print(f"getMessage, batches of 32: {rate:,.0f} msgs/s", flush=True)
        store.shutdown()
        rate = bench_recover(base / "async", rebuild=False)
        results["recover_s_per_gib"] = rate
        print(f"crash recovery (full commitlog scan): {rate:.2f} s/GiB", flush=True)
        rate = bench_recover(base / "async", rebuild=True)
        results["rebuild_s_per_gib"] = rate
        print(f"crash recovery rebuilding consume queues and index: {rate:.2f} s/GiB", flush=True)
        shutil.rmtree(base / "async")

        for writers in (1, 32):
            rate = bench_sync(base / f"sync{writers}", writers, args.sync_seconds, args.file_size)
            results[f"append_sync{writers}_msgs_s"] = rate
            print(f"append SYNC_FLUSH, {writers} writers: {rate:,.0f} msgs/s", flush=True)
            shutil.rmtree(base / f"sync{writers}")
        results["threads_alive"] = threading.active_count()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({k: round(v, 2) for k, v in results.items()}))


if __name__ == "__main__":
    main()
