"""A slave proves what it holds before its acks count (issue 16, item 4): a link that
claims the master's data without holding it never releases a SYNC_MASTER send, acks never
go back and end only where a frame sent on the link ends."""

from __future__ import annotations

import asyncio
import time

import pytest

from ha.codec import SlaveHello, decode_hello, encode_ack, encode_hello
from ha.proof import with_proof
from store.waiters import OffsetWaiters
from tests.ha.conftest import MemoryStore, proven_hello
from tests.ha.test_channel import FILE, master, raw_link, read_frames, slave
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.timeout(20)
HELLO = SlaveHello(1, "broker-a", "10.0.0.9:10911")


@pytest.mark.parametrize("claim", ["plain_ack", "hello_without_proof", "wrong_checksum"])
async def test_a_fake_slave_reporting_the_masters_max_offset_releases_no_send(
        claim: str) -> None:
    m = MemoryStore(FILE)
    m.fill(3 * FILE)
    waiters = OffsetWaiters(time.monotonic)
    async with master(m, on_ack=waiters.advance) as service:
        top = m.max_phy_offset
        sent = waiters.wait_async(top, 5)  # a SYNC_MASTER send waiting for a slave
        reader, writer = await raw_link(service.port)
        hello = {"plain_ack": b"",
                 "hello_without_proof": encode_hello(HELLO),
                 "wrong_checksum": encode_hello(HELLO._replace(max_offset=top, tail_size=4096,
                                                               tail_crc=12345))}[claim]
        writer.write(hello + encode_ack(top))
        for _ in range(5):
            writer.write(encode_ack(top))
            await asyncio.sleep(0.05)
        await wait_until_async(lambda: bool(service.slave_statuses())
                         and service.slave_statuses()[0].problem != "")
        assert not sent.done() and not service.slave_ok()
        (status,) = service.slave_statuses()
        assert not status.in_sync and not status.verified
        expected = "diverged" if claim == "wrong_checksum" else "no proof"
        assert expected in status.problem
        writer.close()
        waiters.fail_all()


async def test_a_slave_holding_the_data_proves_it_and_counts() -> None:
    m = MemoryStore(FILE)
    m.fill(2 * FILE + 5000)
    s = MemoryStore(FILE)
    s.files = [(start, bytearray(data)) for start, data in m.files]  # a copy: caught up
    waiters = OffsetWaiters(time.monotonic)
    async with master(m, on_ack=waiters.advance) as service:
        m.fill(3000, seed=5)
        sent = waiters.wait_async(m.max_phy_offset, 5)
        async with slave(s, service.port, hello=HELLO):
            async with asyncio.timeout(5):
                assert await sent is True
            (status,) = service.slave_statuses()
            assert status.verified and status.in_sync and status.problem == ""
    assert s.content() == m.content()


async def test_a_diverged_slave_is_reported_and_never_in_sync() -> None:
    m = MemoryStore(FILE)
    m.fill(FILE + 3000)
    s = MemoryStore(FILE)
    s.files = [(start, bytearray(data)) for start, data in m.files]
    s.files[-1][1][-100] ^= 0xFF  # same length, other bytes
    async with master(m) as service, slave(s, service.port, hello=HELLO) as client:
        await wait_until_async(lambda: client.status.connect_count >= 1
                         and service.connection_count == 0 and bool(service.slave_statuses()))
        (status,) = service.slave_statuses()
        assert "diverged" in status.problem and not status.in_sync and not service.slave_ok()
        assert status.broker_id == 1  # the group's slave 1, absent: reported in haStatus


@pytest.mark.parametrize("bad", ["backwards", "off_a_frame_end"])
async def test_acks_never_go_back_and_end_where_a_frame_ends(bad: str) -> None:
    m = MemoryStore(FILE)
    m.fill(3000)
    start = m.max_phy_offset
    m.fill(2000, seed=2)
    acks: list[int] = []
    async with master(m, on_ack=acks.append) as service:
        reader, writer = await raw_link(service.port)
        writer.write(proven_hello(m, start) + encode_ack(start))
        frames = await read_frames(reader, m.max_phy_offset)
        end = frames[-1][0] + len(frames[-1][1])
        if bad == "backwards":
            writer.write(encode_ack(end))
            await wait_until_async(lambda: service.slave_statuses()[0].ack_offset == end)
            assert service.slave_ok() and acks[-1] == end
            writer.write(encode_ack(start))
        else:  # inside the frame [start, end): not where the slave can have stopped
            writer.write(encode_ack(start + 100))
        await wait_until_async(lambda: service.connection_count == 0)
        (status,) = service.slave_statuses()
        expected = "went back" if bad == "backwards" else "not the end of a frame"
        assert expected in status.problem and not status.in_sync
        assert max(acks) == (end if bad == "backwards" else start)
        writer.close()


def test_hello_proof_round_trip_and_older_hellos() -> None:
    m = MemoryStore(FILE)
    m.fill(10_000)
    proven = with_proof(HELLO, m)
    assert proven.max_offset == m.max_phy_offset and proven.tail_size == 4096
    assert decode_hello(encode_hello(proven)[12:]) == proven
    assert decode_hello(encode_hello(HELLO)[12:]) == HELLO  # no proof: an older slave
    assert with_proof(HELLO, MemoryStore(FILE)) == HELLO  # an empty slave proves nothing
    with pytest.raises(ValueError):
        decode_hello(b'{"brokerId": 1, "brokerName": "a", "brokerAddr": "b", '
                     b'"maxOffset": 10, "tailSize": 99, "tailCrc": 1}')


async def test_a_slave_that_stopped_mid_record_proves_its_bytes_and_catches_up() -> None:
    m = MemoryStore(FILE)
    m.fill(FILE + 5000)
    s = MemoryStore(FILE)
    s.files = [(start, bytearray(data)) for start, data in m.files]
    del s.files[-1][1][-500:]  # the link broke inside a record
    async with master(m) as service, slave(s, service.port, hello=HELLO):
        await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
        (status,) = service.slave_statuses()
        assert status.verified and status.in_sync and status.problem == ""
    assert s.content() == m.content()


async def test_an_empty_slave_of_an_empty_master_counts() -> None:
    m, s = MemoryStore(FILE), MemoryStore(FILE)
    waiters = OffsetWaiters(time.monotonic)
    async with master(m, on_ack=waiters.advance) as service, slave(s, service.port,
                                                                    hello=HELLO):
        await wait_until_async(lambda: service.slave_ok())
        m.fill(2000)
        sent = waiters.wait_async(m.max_phy_offset, 5)
        service.notify_data_arrived()
        async with asyncio.timeout(5):
            assert await sent is True
        assert service.slave_statuses()[0].problem == ""
