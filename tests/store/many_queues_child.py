"""Child process of tests/store/test_many_queues.py: a store with thousands of queues under
the RLIMIT_NOFILE its parent set (preexec_fn).

    python tests/store/many_queues_child.py STORE_DIR PHASE QUEUES

PHASE `write`: one message into each of QUEUES queues (topics of 8 queues), dispatch, a read
of each queue; then `stop` (clean shutdown) or `crash` (no shutdown: the abort file stays).
PHASE `check`: load (after either), read every queue back, one more message into each, read
that too, clean shutdown. Prints `OK <phase> fds=N` at the end; any failure raises (exit 1).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from store.config import StoreConfig  # noqa: E402
from store.constants import GetMessageStatus  # noqa: E402
from store.message import Message  # noqa: E402
from store.message_store import DefaultMessageStore  # noqa: E402

QUEUES_PER_TOPIC = 8
DISPATCH_TIMEOUT_S = 20.0


def open_store(root: str) -> DefaultMessageStore:
    store = DefaultMessageStore(StoreConfig(
        store_path_root_dir=root, mapped_file_size_commit_log=16 << 20,
        mapped_file_size_consume_queue=1000 * 20, max_hash_slot_num=1024, max_index_num=8192))
    store.load()
    store.start()
    return store


def keys(queues: int) -> list[tuple[str, int]]:
    return [(f"Many{i // QUEUES_PER_TOPIC:05d}", i % QUEUES_PER_TOPIC) for i in range(queues)]


def put_each(store: DefaultMessageStore, queues: int, round_: int) -> None:
    batch = [Message(t, f"{t}-{q}-{round_}".encode(), queue_id=q) for t, q in keys(queues)]
    for i in range(0, len(batch), 200):
        result = store.put_messages(batch[i : i + 200])
        assert result.ok, result
    deadline = time.monotonic() + DISPATCH_TIMEOUT_S
    while store.dispatch_behind_bytes:
        assert time.monotonic() < deadline, f"dispatch stalled, {store.dispatch_behind_bytes} B"
        time.sleep(0.02)


def check_each(store: DefaultMessageStore, queues: int, rounds: int) -> None:
    for t, q in keys(queues):
        got = store.get_message("g", t, q, 0, 32)
        assert got.status is GetMessageStatus.FOUND, (t, q, got.status)
        bodies = [m.body for m in got.decoded()]
        assert bodies == [f"{t}-{q}-{r}".encode() for r in range(rounds)], (t, q, bodies)


def main() -> None:
    root, phase, queues = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(root)
    if phase in ("stop", "crash"):
        put_each(store, queues, 0)
        check_each(store, queues, 1)
        if phase == "stop":
            store.shutdown()
    else:
        assert not store.queues.failed, store.queues.failed
        check_each(store, queues, 1)
        put_each(store, queues, 1)
        check_each(store, queues, 2)
        store.shutdown()
    print(f"OK {phase} fds={len(os.listdir('/proc/self/fd'))}", flush=True)
    if phase == "crash":
        os._exit(0)  # no shutdown: the abort file stays, the next load recovers as after a crash


if __name__ == "__main__":
    main()
