from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from store.config import StoreConfig
from store.message_store import DefaultMessageStore

SMALL = dict(
    mapped_file_size_commit_log=64 * 1024,
    mapped_file_size_consume_queue=100 * 20,
    max_hash_slot_num=64,
    max_index_num=256,
)


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., DefaultMessageStore]]:
    """Opens stores on small files under tmp_path; every one is shut down after the test.
    The disk reads 10 % used unless a test says otherwise: how full the host's disk is must
    not decide whether a store test deletes files or refuses writes."""
    opened: list[DefaultMessageStore] = []

    def make(start: bool = True, root: Path | None = None, **overrides: Any) -> DefaultMessageStore:
        store_kwargs = {"disk_usage": lambda path: 0.1, **overrides.pop("_store_kwargs", {})}
        cfg = StoreConfig(store_path_root_dir=str(root or tmp_path / "store"),
                          **{**SMALL, **overrides})
        store = DefaultMessageStore(cfg, **store_kwargs)
        store.load()
        if start:
            store.start()
        opened.append(store)
        return store

    yield make
    for s in opened:
        if not s.shutdown_done:
            s.running = True
            s.shutdown()


def wait_dispatched(store: DefaultMessageStore) -> None:
    store.commitlog.commit()
    store.do_reput()
