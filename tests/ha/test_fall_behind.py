"""Fall-behind in seconds (SPEC §5): now - store time of the first record the slave lacks,
read from the master's real commitlog at the slave's ack offset."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ha.codec import SlaveHello, encode_ack, encode_hello
from ha.master import HAService, store_timestamp_at
from store.config import StoreConfig
from store.constants import BrokerRole
from store.message import Message
from store.message_store import DefaultMessageStore
from tests.ha.conftest import proven_hello
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.timeout(30)
FILE = 64 * 1024
BORN = 1_700_000_000_000  # store time of the first record (ms)


def started_store(tmp_path: Path, clock: list[int]) -> DefaultMessageStore:
    """An ASYNC_MASTER store of small commitlog files, stamping records with clock[0]."""
    store = DefaultMessageStore(StoreConfig(
        store_path_root_dir=str(tmp_path), broker_role=BrokerRole.ASYNC_MASTER,
        mapped_file_size_commit_log=FILE), clock_ms=lambda: clock[0])
    store.load()
    store.start()
    return store


def test_store_timestamp_at_records_blanks_and_the_end(tmp_path: Path) -> None:
    clock = [BORN]
    store = started_store(tmp_path, clock)
    try:
        offsets, stamps = [], []
        for i in range(200):  # 200 x ~1 KiB: several files, each ending with a blank
            clock[0] = BORN + 1000 * i
            r = store.put_message(Message("FB", b"x" * 1000, queue_id=0))
            assert r.ok and r.append is not None
            offsets.append(r.append.commit_log_offsets[0])
            stamps.append(clock[0])
        assert [store_timestamp_at(store, o) for o in offsets] == stamps
        # The end of file 0 holds a blank: the first record lacked is file 1's first.
        first_in_file_1 = offsets.index(FILE)
        end_of_records = _record_end(store, offsets[first_in_file_1 - 1])
        assert end_of_records < FILE  # a blank fills the rest of file 0
        assert store_timestamp_at(store, end_of_records) == stamps[first_in_file_1]
        assert store_timestamp_at(store, store.max_phy_offset) is None
        assert store_timestamp_at(store, offsets[3] + 1) is None  # not a record head
    finally:
        store.shutdown()


def put_one_a_second(store: DefaultMessageStore, clock: list[int], count: int) -> list[int]:
    """`count` records stored at BORN, BORN + 1 s, ...; their commitlog offsets."""
    offsets = []
    for i in range(count):
        clock[0] = BORN + 1000 * i
        r = store.put_message(Message("FB", b"y" * 100, queue_id=0))
        assert r.append is not None
        offsets.append(r.append.commit_log_offsets[0])
    return offsets


def _record_end(store: DefaultMessageStore, offset: int) -> int:
    size = int.from_bytes(store.read_commitlog(offset, 4), "big")
    return offset + size


async def test_fall_behind_seconds_of_a_slave_link(tmp_path: Path) -> None:
    clock = [BORN]
    store = started_store(tmp_path, clock)
    now = [BORN]
    service = HAService(store, host="127.0.0.1", heartbeat_interval=0.05,
                        poll_interval=0.01, wall_clock_ms=lambda: now[0])
    await service.start()
    try:
        offsets = put_one_a_second(store, clock, 10)
        reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
        try:
            # A slave holding records 0..3 lacks record 4, stored at BORN + 4 s.
            writer.write(proven_hello(store, offsets[4]) + encode_ack(offsets[4]))
            await writer.drain()
            await wait_until_async(lambda: bool(service.slave_statuses())
                             and service.slave_statuses()[0].ack_offset == offsets[4])
            now[0] = BORN + 12_500
            (status,) = service.slave_statuses()
            assert status.fall_behind_bytes == store.max_phy_offset - offsets[4]
            assert status.fall_behind_seconds == pytest.approx(8.5)
            assert status.in_sync and status.transfer_from >= offsets[4]
            # Caught up: no bytes and no seconds behind.
            assert await reader.read(65536)  # the master streams what the slave lacks
            writer.write(encode_ack(store.max_phy_offset))
            await writer.drain()
            await wait_until_async(lambda: service.slave_statuses()[0].fall_behind_bytes == 0)
            assert service.slave_statuses()[0].fall_behind_seconds == 0.0
        finally:
            writer.close()
    finally:
        await service.stop()
        store.shutdown()


async def test_an_absent_slave_stays_in_the_figures_with_growing_fall_behind(
        tmp_path: Path) -> None:
    clock = [BORN]
    store = started_store(tmp_path, clock)
    now = [BORN]
    service = HAService(store, host="127.0.0.1", heartbeat_interval=0.05, poll_interval=0.01,
                        wall_clock_ms=lambda: now[0], max_time_slave_not_catchup_ms=15_000)
    await service.start()
    hello = SlaveHello(2, "broker-a", "10.0.0.9:10921")
    try:
        offsets = put_one_a_second(store, clock, 10)
        reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
        writer.write(proven_hello(store, offsets[4], 2, hello.broker_addr)
                     + encode_ack(offsets[4]))
        await writer.drain()
        await wait_until_async(lambda: service.connection_count == 1
                         and [s.ack_offset for s in service.slave_statuses()] == [offsets[4]])
        (live,) = service.slave_statuses()
        assert (live.broker_id, live.broker_addr, live.name) == (2, hello.broker_addr,
                                                                 "2@10.0.0.9:10921")
        assert live.connected and live.in_sync and live.address != hello.broker_addr

        # Frozen: no ack for longer than haMaxTimeSlaveNotCatchup is not in sync, however
        # close its last ack was.
        now[0] = BORN + 15_001
        assert not service.slave_statuses()[0].in_sync and not service.slave_ok()

        # Gone: it stays a slave of the group, its fall-behind growing from its last ack.
        writer.close()
        await wait_until_async(lambda: service.connection_count == 0)
        now[0] = BORN + 30_000
        (gone,) = service.slave_statuses()
        assert (gone.broker_id, gone.connected, gone.in_sync) == (2, False, False)
        assert gone.ack_offset == offsets[4]
        assert gone.fall_behind_bytes == store.max_phy_offset - offsets[4]
        assert gone.fall_behind_seconds == pytest.approx(26.0)  # record 4: BORN + 4 s
        clock[0] = BORN + 40_000
        store.put_message(Message("FB", b"z" * 100, queue_id=0))
        now[0] = BORN + 60_000
        (later,) = service.slave_statuses()
        assert later.fall_behind_bytes > gone.fall_behind_bytes
        assert later.fall_behind_seconds == pytest.approx(56.0)

        # Back: one entry again, the live link, caught up.
        reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
        writer.write(proven_hello(store, store.max_phy_offset, 2, hello.broker_addr)
                     + encode_ack(store.max_phy_offset))
        await writer.drain()
        await wait_until_async(lambda: [s.connected for s in service.slave_statuses()] == [True])
        (back,) = service.slave_statuses()
        assert back.fall_behind_bytes == 0 and back.in_sync
        assert not service.remove_slave(2)  # connected: not removable
        writer.close()
        await wait_until_async(lambda: service.connection_count == 0)
        assert service.remove_slave(2) and service.slave_statuses() == []
    finally:
        await service.stop()
        store.shutdown()


async def test_a_new_link_of_the_same_slave_replaces_the_old_one(tmp_path: Path) -> None:
    store = started_store(tmp_path, [BORN])
    service = HAService(store, host="127.0.0.1", heartbeat_interval=0.05, poll_interval=0.01)
    await service.start()
    hello = encode_hello(SlaveHello(1, "broker-a", "10.0.0.9:10911"))
    try:
        _, old = await asyncio.open_connection("127.0.0.1", service.port)
        old.write(hello + encode_ack(0))
        await wait_until_async(lambda: service.connection_count == 1
                         and [s.broker_id for s in service.slave_statuses()] == [1])
        _, new = await asyncio.open_connection("127.0.0.1", service.port)
        new.write(hello + encode_ack(0))
        await wait_until_async(lambda: service.connection_count == 1)
        (status,) = service.slave_statuses()
        assert status.connected and status.broker_id == 1
        old.close()
        new.close()
    finally:
        await service.stop()
        store.shutdown()
