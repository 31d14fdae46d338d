"""`make run` until the cluster exists: a short produce / consume / lag demo on one store.

Appends messages to a store under ./demo-store, consumes part of them with a consumer offset,
prints the per-queue lag, looks messages up by key and by msgId, then restarts the store to
show recovery. Run it again to continue where it left off.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from store.config import StoreConfig
from store.constants import FlushDiskType
from store.message import Message
from store.message_store import DefaultMessageStore

TOPIC = "DemoTopic"
QUEUES = 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", default="demo-store")
    ap.add_argument("--messages", type=int, default=10_000)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = StoreConfig(store_path_root_dir=str(Path(args.dir).resolve()),
                      flush_disk_type=FlushDiskType.SYNC_FLUSH,
                      mapped_file_size_commit_log=16 * 1024 * 1024)
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    base = sum(store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES))
    t0 = time.perf_counter()
    batch: list[Message] = []
    last = None
    for i in range(base, base + args.messages):
        batch.append(Message(TOPIC, f"order {i} paid".encode(),
                             {"TAGS": "paid", "KEYS": f"order-{i}", "UNIQ_KEY": f"DEMO{i:012d}"},
                             queue_id=i % QUEUES, born_timestamp=int(time.time() * 1000)))
        if len(batch) == 32:
            last = store.put_messages(batch)
            assert last.ok, last.status
            batch = []
    if batch:
        last = store.put_messages(batch)
    elapsed = time.perf_counter() - t0
    print(f"\nproduced {args.messages} messages (SYNC_FLUSH, batches of 32) in {elapsed:.2f} s")
    store.commitlog.commit()
    store.do_reput()

    print(f"\n{'queue':>5} {'minOffset':>10} {'maxOffset':>10} {'consumerOffset':>15} {'lag':>8}")
    for q in range(QUEUES):
        max_offset = store.get_max_offset_in_queue(TOPIC, q)
        consumed = 0
        offset = store.get_min_offset_in_queue(TOPIC, q)
        while offset < max_offset * 3 // 4:  # consume three quarters of every queue
            got = store.get_message("demo-group", TOPIC, q, offset, 32)
            consumed += len(got.messages)
            offset = got.next_begin_offset
        print(f"{q:>5} {store.get_min_offset_in_queue(TOPIC, q):>10} {max_offset:>10} "
              f"{offset:>15} {max_offset - offset:>8}")

    key = f"order-{base + args.messages - 1}"
    found = store.query_message(TOPIC, key, 1)
    print(f"\nquery by key {key!r}: {[m.body.decode() for m in found]}")
    if found:
        by_id = store.look_message_by_msg_id(found[0].msg_id)
        print(f"query by msgId {found[0].msg_id}: {by_id.body.decode() if by_id else None}")
    store.shutdown()
    store = DefaultMessageStore(cfg)
    store.load()
    print(f"\nrestarted: commitlog ends at {store.commitlog.max_offset}, "
          f"queue {TOPIC}/0 holds {store.get_max_offset_in_queue(TOPIC, 0)} messages")
    store.running = True
    store.shutdown()
    print(f"\nstore directory: {cfg.store_path_root_dir} "
          f"(verify it with: python -m store.inspect {args.dir})")


if __name__ == "__main__":
    main()
