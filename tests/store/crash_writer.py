"""Child process of tests/store/test_crash.py: appends messages until it is killed.

    python tests/store/crash_writer.py STORE_DIR [new-topics]

Opens the store with SYNC_FLUSH and small files, then a few threads append messages over 2 topics
x 8 queues with tags, KEYS and UNIQ_KEY (put_message), and one more thread runs an event loop
whose concurrent tasks put batches of 1-3 messages (put_messages_async: the store appends the
puts of one loop iteration together). After each message of a put that returned PUT_OK it
prints (and flushes) one line:

    ACK <key> <topic> <queueId> <queueOffset> <offsetMsgId>

The key determines the body (see `body_for`), so the parent can check what it reads back.

With `new-topics` the messages go to new topics all the time (a topic per 10 messages of a
writer, named after the writer process), and the consume-queue snapshot is written every
100 ms during the first SNAPSHOTS_FOR_S seconds only, then "SNAPSHOTS STOPPED" goes to
stderr: a kill after that finds a snapshot older than the last puts, and queues made after it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common.codec import encode_offset_msg_id  # noqa: E402
from store.config import StoreConfig  # noqa: E402
from store.constants import FlushDiskType  # noqa: E402
from store.message import Message  # noqa: E402
from store.message_store import DefaultMessageStore  # noqa: E402

TOPICS = ("CrashA", "CrashB")
QUEUES = 8
THREADS = 3
ASYNC_TASKS = 8
SNAPSHOTS_FOR_S = 0.6


def crash_config(store_dir: str | os.PathLike) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(store_dir),
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=300 * 20,
        max_hash_slot_num=4001,  # short chains: every ack is looked up by key after each round
        max_index_num=8000,  # 3 keys per message: the index rolls every ~2700 messages
        sync_flush_timeout=10_000,
        # The host's disk, not the crash, must not decide what is readable: over 85 % full the
        # cleaner deletes the oldest commitlog files at once (what a nearly full disk did to
        # this test once: every entry of round 0 MESSAGE_WAS_REMOVING).
        disk_max_used_space_ratio=100,
        disk_space_clean_forcibly_ratio=100,
    )


def body_for(key: str, n: int) -> bytes:
    return (key + ";").encode() * (1 + n % 37)


def message_for(key: str, n: int, new_topics: bool = False) -> tuple[Message, str, int]:
    topic = TOPICS[n % len(TOPICS)]
    if new_topics:  # the key's first 8 characters: the writer process's own prefix
        topic = f"{topic}{key[:8]}x{n // 10}"
    queue_id = (n * 5 + len(key)) % QUEUES
    msg = Message(topic, body_for(key, n),
                  {"TAGS": f"tag{n % 3}", "KEYS": f"{key} alt-{key}", "UNIQ_KEY": f"U{key}"},
                  queue_id=queue_id)
    return msg, topic, queue_id


def main() -> None:
    config = crash_config(sys.argv[1])
    new_topics = sys.argv[2:] == ["new-topics"]
    if new_topics:
        config.consume_queue_snapshot_interval = 100
        config.flush_interval_consume_queue = 100
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    prefix = os.urandom(4).hex()
    out_lock = threading.Lock()

    def ack(key: str, topic: str, queue_id: int, queue_offset: int, phys: int) -> None:
        line = (f"ACK {key} {topic} {queue_id} {queue_offset} "
                f"{encode_offset_msg_id(config.store_host, phys)}\n")
        with out_lock:
            sys.stdout.write(line)
            sys.stdout.flush()

    def worker(w: int) -> None:
        n = 0
        while True:
            key = f"{prefix}-{w}-{n}"
            msg, topic, queue_id = message_for(key, n, new_topics)
            r = store.put_message(msg)
            if r.ok and r.append is not None:
                ack(key, topic, queue_id, r.append.queue_offsets[0],
                    r.append.commit_log_offsets[0])
            n += 1

    async def async_writer(w: int) -> None:
        n = 0
        while True:
            sent = []
            for _ in range(1 + n % 3):
                key = f"{prefix}-a{w}-{n}"
                sent.append((key, *message_for(key, n, new_topics)))
                n += 1
            r = await store.put_messages_async([m for _, m, _, _ in sent])
            if r.ok and r.append is not None:
                for (key, _, topic, queue_id), qoff, phys in zip(
                        sent, r.append.queue_offsets, r.append.commit_log_offsets, strict=True):
                    ack(key, topic, queue_id, qoff, phys)

    async def async_writers() -> None:
        await asyncio.gather(*(async_writer(w) for w in range(ASYNC_TASKS)))

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(THREADS)]
    threads.append(threading.Thread(target=asyncio.run, args=(async_writers(),), daemon=True))
    for t in threads:
        t.start()
    sys.stderr.write("WRITING\n")
    sys.stderr.flush()
    if new_topics:
        time.sleep(SNAPSHOTS_FOR_S)
        config.consume_queue_snapshot_interval = 0  # no more: the last one gets older
        sys.stderr.write("SNAPSHOTS STOPPED\n")
        sys.stderr.flush()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
