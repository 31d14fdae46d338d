"""Replication between two real DefaultMessageStores (small files) over loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ha.master import HAService
from ha.slave import HAClient
from store.config import StoreConfig
from store.constants import BrokerRole
from store.message import Message
from store.message_store import DefaultMessageStore
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.timeout(30)
SMALL = dict(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=100 * 20,
             max_hash_slot_num=64, max_index_num=256)


def open_store(root: Path, role: BrokerRole) -> DefaultMessageStore:
    store = DefaultMessageStore(StoreConfig(store_path_root_dir=str(root), broker_role=role,
                                            **SMALL))  # type: ignore[arg-type]
    store.load()
    store.start()
    return store


def drain_queue(store: DefaultMessageStore, topic: str, queue_id: int) -> list[bytes]:
    got: list[bytes] = []
    offset = 0
    while True:
        r = store.get_message("g", topic, queue_id, offset, 32)
        if not r.messages:
            return got
        got.extend(r.messages)
        offset = r.next_begin_offset


async def test_slave_store_is_byte_identical_and_serves_the_same_messages(
        tmp_path: Path) -> None:
    master = open_store(tmp_path / "master", BrokerRole.ASYNC_MASTER)
    slave = open_store(tmp_path / "slave", BrokerRole.SLAVE)
    try:
        for i in range(0, 5000, 50):
            batch = [Message("TopicHA", f"body-{n}".encode() * 5, {"TAGS": f"t{n % 3}",
                                                                    "KEYS": f"k{n}"},
                             queue_id=n % 4) for n in range(i, i + 50)]
            assert master.put_messages(batch).ok
        service = HAService(master, host="127.0.0.1", poll_interval=0.01)
        await service.start()
        client = HAClient(slave, f"127.0.0.1:{service.port}", reconnect_interval=0.05)
        client.start()
        try:
            await wait_until_async(lambda: slave.max_phy_offset == master.max_phy_offset,
                                   timeout=15)
            await asyncio.to_thread(slave.do_reput)
            await wait_until_async(lambda: slave.dispatch_behind_bytes == 0)
        finally:
            await client.stop()
            await service.stop()
        assert master.max_phy_offset > 4 * 64 * 1024  # several files
        for q in range(4):
            want = drain_queue(master, "TopicHA", q)
            assert len(want) == 1250
            assert drain_queue(slave, "TopicHA", q) == want
        msg = slave.look_message_by_offset(0)
        assert msg is not None and msg.topic == "TopicHA"
    finally:
        master.shutdown()
        slave.shutdown()
    master_files = {p.name: p.read_bytes() for p in (tmp_path / "master/commitlog").iterdir()}
    slave_files = {p.name: p.read_bytes() for p in (tmp_path / "slave/commitlog").iterdir()}
    assert slave_files
    for name, data in slave_files.items():
        assert master_files[name] == data, name
    extra = set(master_files) - set(slave_files)  # only a pre-allocated, empty next file
    assert all(not any(master_files[n]) for n in extra)
