"""The HA channel over real loopback sockets, with in-memory stores."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from ha.codec import FrameParser, encode_ack, encode_frame, encode_heartbeat
from store.waiters import OffsetWaiters
from tests.ha.conftest import MemoryStore, master, slave
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.timeout(20)
FILE = 64 * 1024


async def raw_link(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def read_frames(reader: asyncio.StreamReader, until: int,
                      timeout: float = 5.0) -> list[tuple[int, bytes]]:
    parser = FrameParser()
    frames: list[tuple[int, bytes]] = []
    async with asyncio.timeout(timeout):
        while not frames or frames[-1][0] + len(frames[-1][1]) < until:
            chunk = await reader.read(65536)
            assert chunk, "master closed the link"
            frames.extend(parser.feed(chunk))
    return frames


async def test_slave_catches_up_and_follows_new_data() -> None:
    m, s = MemoryStore(FILE), MemoryStore(FILE)
    m.fill(300_000)
    acks: list[int] = []
    async with master(m, on_ack=acks.append) as service, slave(s, service.port) as client:
        await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
        m.fill(50_000, seed=2)
        service.notify_data_arrived()
        await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
        assert s.content() == m.content()
        await wait_until_async(lambda: acks and acks[-1] == m.max_phy_offset)
        assert client.status.connected
        (status,) = service.slave_statuses()
        assert status.ack_offset == m.max_phy_offset and status.in_sync
        assert status.fall_behind_bytes == 0 and status.transfer_rate > 0 and not status.problem
    assert acks == sorted(acks)


async def test_frames_are_batched_never_cross_a_file_and_heartbeats_when_idle() -> None:
    m = MemoryStore(FILE)
    m.fill(5 * FILE + 1234)
    async with master(m, transfer_batch_size=10_000) as service:
        reader, writer = await raw_link(service.port)
        writer.write(encode_ack(0))
        frames = await read_frames(reader, m.max_phy_offset)
        data = b"".join(body for _, body in frames)
        assert data == m.content()
        for offset, body in frames:
            assert 0 < len(body) <= 10_000
            assert offset // FILE == (offset + len(body) - 1) // FILE
        parser = FrameParser()
        async with asyncio.timeout(2):
            got = parser.feed(await reader.readexactly(24))
        assert [(f.phy_offset, f.body) for f in got] == [(m.max_phy_offset, b"")] * 2
        writer.close()


async def test_slave_buffer_smaller_than_a_frame_grows_and_split_frames_apply() -> None:
    # 200 KiB files, frames of up to 150 KiB, a slave buffer of 64 KiB: every frame arrives
    # in pieces and needs the buffer grown; the copy is still byte-identical.
    m, s = MemoryStore(200 * 1024), MemoryStore(200 * 1024)
    m.fill(1_000_000, body_size=7000)
    async with master(m, transfer_batch_size=150 * 1024) as service, \
            slave(s, service.port, read_size=64 * 1024) as client:
        await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
        assert s.content() == m.content()
        assert max(size for _, size in s.appends) > 64 * 1024
        assert client.status.last_error == "" and client.status.connect_count == 1


async def test_empty_slave_gets_whole_retained_log_from_min_offset() -> None:
    m, s = MemoryStore(FILE), MemoryStore(FILE)
    m.fill(6 * FILE)
    m.drop_first_file()
    m.drop_first_file()  # retained: files 2.. (several files, not only the last)
    assert m.min_phy_offset == 2 * FILE and len(m.files) >= 4
    async with master(m) as service, slave(s, service.port):
        await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
    assert s.min_phy_offset == m.min_phy_offset
    assert s.content() == m.content()
    assert s.appends[0][0] == 2 * FILE


async def test_slave_reconnects_after_master_restarts() -> None:
    m, s = MemoryStore(FILE), MemoryStore(FILE)
    m.fill(100_000)
    async with master(m) as service:
        port = service.port
        async with slave(s, port) as client:
            await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
            await service.stop()
            await wait_until_async(lambda: not client.status.connected)
            m.fill(100_000, seed=3)
            async with master(m, port=port):
                await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
            assert client.status.connect_count >= 2
    assert s.content() == m.content()


async def test_offset_mismatch_closes_the_link() -> None:
    s = MemoryStore(FILE)
    s.fill(1000)
    closed = asyncio.Event()

    async def bad_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(8)
        writer.write(encode_frame(s.max_phy_offset + 100, b"junk"))
        await writer.drain()
        while await reader.read(100):
            pass
        closed.set()

    server = await asyncio.start_server(bad_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    before = s.content()
    async with slave(s, port, reconnect_interval=10) as client:
        async with asyncio.timeout(3):
            await closed.wait()
        assert "link closed" in client.status.last_error
        assert "ends at" in client.status.last_error
    assert s.content() == before
    server.close()


async def test_ack_beyond_master_max_is_rejected_and_never_acked() -> None:
    m = MemoryStore(FILE)
    m.fill(10_000)
    acks: list[int] = []
    async with master(m, on_ack=acks.append) as service:
        reader, writer = await raw_link(service.port)
        writer.write(encode_ack(m.max_phy_offset))  # a good first report
        writer.write(encode_ack(m.max_phy_offset + 4096))  # bogus
        async with asyncio.timeout(3):
            while await reader.read(65536):
                pass  # heartbeats until the master closes the link
        await wait_until_async(lambda: service.connection_count == 0)
        assert all(a <= m.max_phy_offset for a in acks)
        (status,) = service.slave_statuses()
        assert not status.connected and not status.in_sync
        assert "beyond the master's max offset" in status.problem
        writer.close()


async def test_bogus_ack_never_releases_sync_waits(caplog: pytest.LogCaptureFixture
                                                   ) -> None:
    m = MemoryStore(FILE)
    m.fill(10_000)
    waiters = OffsetWaiters(time.monotonic)
    async with master(m, on_ack=waiters.advance) as service:
        fut = waiters.wait_async(m.max_phy_offset + 100, 5)
        reader, writer = await raw_link(service.port)
        writer.write(encode_ack(m.max_phy_offset + 1000))
        async with asyncio.timeout(3):
            assert await reader.read(100) == b""
        assert not fut.done()
        assert "rejected, link closed" in caplog.text
        assert service.slave_statuses() == []  # beyond max: not a slave of this master
        writer.close()
        waiters.fail_all()


async def test_sync_waits_released_by_slave_acks() -> None:
    m, s = MemoryStore(FILE), MemoryStore(FILE)
    m.fill(50_000)
    waiters = OffsetWaiters(time.monotonic)
    async with master(m, on_ack=waiters.advance) as service, slave(s, service.port):
        await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
        m.fill(3000, seed=9)
        fut = waiters.wait_async(m.max_phy_offset, 3)
        service.notify_data_arrived()
        async with asyncio.timeout(3):
            assert await fut is True


@pytest.mark.parametrize("offset_kind", ["below_min", "not_a_boundary"])
async def test_slave_below_min_or_diverged_is_reported(offset_kind: str) -> None:
    m = MemoryStore(FILE)
    m.fill(4 * FILE)
    m.drop_first_file()
    report = FILE // 2 if offset_kind == "below_min" else m.min_phy_offset + 3
    async with master(m) as service:
        reader, writer = await raw_link(service.port)
        writer.write(encode_ack(report))
        async with asyncio.timeout(3):
            assert await reader.read(100) == b""
        await wait_until_async(lambda: service.connection_count == 0)
        (status,) = service.slave_statuses()
        expected = ("below the master's min offset" if offset_kind == "below_min"
                    else "not a record boundary")
        assert expected in status.problem and str(report) in status.problem
        writer.close()


async def test_master_drops_a_silent_slave() -> None:
    m = MemoryStore(FILE)
    async with master(m, housekeeping_interval=0.2) as service:
        reader, writer = await raw_link(service.port)
        writer.write(encode_ack(0))  # a 4.x-style slave (no hello): listed
        t0 = time.monotonic()
        async with asyncio.timeout(3):
            while await reader.read(65536):  # the data, then EOF
                pass
        assert 0.15 < time.monotonic() - t0 < 2
        await wait_until_async(lambda: service.connection_count == 0)
        assert "no report from the slave" in service.slave_statuses()[0].problem
        writer.close()


async def test_links_that_never_spoke_are_not_listed_as_slaves(
        caplog: pytest.LogCaptureFixture) -> None:
    """A connection opened and closed (a port probe) or dropped silent, or one sending
    garbage, is logged but never a row of the master's slaves (haStatus)."""
    m = MemoryStore(FILE)
    async with master(m, housekeeping_interval=0.2) as service:
        for _ in range(3):
            _, writer = await raw_link(service.port)
            writer.close()
        reader, writer = await raw_link(service.port)  # silent: dropped
        async with asyncio.timeout(3):
            assert await reader.read(100) == b""
        writer.close()
        reader, writer = await raw_link(service.port)
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        async with asyncio.timeout(3):
            assert await reader.read(100) == b""
        writer.close()
        await wait_until_async(lambda: service.connection_count == 0)
        assert service.slave_statuses() == []
        assert "no report from the slave" in caplog.text


async def test_slave_drops_a_silent_master_reports_periodically_and_reconnects() -> None:
    s = MemoryStore(FILE)
    s.fill(500)
    links: list[list[bytes]] = []

    async def silent_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got: list[bytes] = []
        links.append(got)
        while chunk := await reader.read(100):
            got.append(chunk)

    server = await asyncio.start_server(silent_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with slave(s, port, housekeeping_interval=0.3, report_interval=0.05) as client:
        await wait_until_async(lambda: len(links) >= 2, timeout=5)
        assert "nothing from the master" in client.status.last_error
    reports = b"".join(links[0])
    assert len(reports) >= 3 * 8 and reports[:8] == encode_ack(s.max_phy_offset)
    server.close()


async def test_slave_accepts_heartbeats_at_its_offset() -> None:
    s = MemoryStore(FILE)
    s.fill(700)
    served = asyncio.Event()

    async def heartbeat_master(reader: asyncio.StreamReader,
                               writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(8)
        for _ in range(5):
            writer.write(encode_heartbeat(s.max_phy_offset))
        await writer.drain()
        served.set()
        while await reader.read(100):
            pass

    server = await asyncio.start_server(heartbeat_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with slave(s, port) as client:
        await served.wait()
        await wait_until_async(lambda: client.status.master_offset == s.max_phy_offset)
        await asyncio.sleep(0.05)
        assert client.status.connected and client.status.last_error == ""
    server.close()


async def test_replication_throughput() -> None:
    m, s = MemoryStore(1024 * 1024), MemoryStore(1024 * 1024)
    m.fill(64 * 1024 * 1024, body_size=4000)
    async with master(m) as service:
        t0 = time.perf_counter()
        async with slave(s, service.port):
            await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset, timeout=15,
                             step=0.001)
        elapsed = time.perf_counter() - t0
    mb_s = m.max_phy_offset / elapsed / 1e6
    print(f"\nHA replication from empty over loopback: {m.max_phy_offset / 1e6:.1f} MB in "
          f"{elapsed:.3f} s = {mb_s:.0f} MB/s")
    assert s.content() == m.content()


class EarlyMaxStore(MemoryStore):
    """A store whose max offset runs ahead of its readable data while `hidden` is set."""

    def __init__(self, file_size: int) -> None:
        super().__init__(file_size)
        self.hidden = 0  # bytes at the end that cannot be read yet

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes:
        readable = super().max_phy_offset - self.hidden
        return super().read_commitlog(offset, min(max_bytes, max(0, readable - offset)))


async def test_an_unreadable_max_offset_waits_instead_of_closing_the_link() -> None:
    m, s = EarlyMaxStore(FILE), MemoryStore(FILE)
    m.fill(20_000)
    async with master(m) as service, slave(s, service.port) as client:
        await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
        m.fill(5_000, seed=4)
        m.hidden = 3_000  # max offset already reports data that is not readable yet
        service.notify_data_arrived()
        await asyncio.sleep(0.2)
        assert service.connection_count == 1 and not service.slave_statuses()[0].problem
        m.hidden = 0
        service.notify_data_arrived()
        await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
        assert client.status.connect_count == 1
    assert s.content() == m.content()


class FailingStore(MemoryStore):
    """Reads of more than a record head (the transfer loop's) fail: the loop ends."""

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes:
        if max_bytes > 1024:
            raise OSError("disk gone")
        return super().read_commitlog(offset, max_bytes)


async def test_a_failed_transfer_closes_the_link_at_once_while_acks_stream_in() -> None:
    m = FailingStore(FILE)
    m.files.append((0, bytearray(4000)))
    for _ in range(5):
        async with master(m, housekeeping_interval=10.0) as service:
            reader, writer = await raw_link(service.port)
            # Acks always waiting in the socket: every read of the master completes at once,
            # also in the loop turn in which the link's reader is cancelled.
            writer.write(encode_ack(0) * 200_000)
            t0 = time.monotonic()
            with contextlib.suppress(ConnectionResetError):  # acks left unread: a reset
                async with asyncio.timeout(5):
                    while await reader.read(65536):
                        pass
            assert time.monotonic() - t0 < 2.0
            await wait_until_async(lambda: service.connection_count == 0)
            assert "disk gone" in service.slave_statuses()[0].problem
            writer.close()


def from_thread(fn: Callable[[], object]) -> None:
    """Runs fn on another thread (as the store's threads call it) and waits for it."""
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join(10)


async def test_data_arrived_wakes_the_loop_only_for_connected_slaves() -> None:
    """notify_data_arrived from a store thread (each put and commit): with no slave link it
    costs the loop nothing (it used to write the loop's self-pipe every time); with a link it
    wakes the link, and the link then follows the data."""
    m, s = MemoryStore(FILE), MemoryStore(FILE)
    m.fill(10_000)
    loop = asyncio.get_running_loop()
    async with master(m) as service:
        calls = 0
        threadsafe = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return threadsafe(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        try:
            from_thread(lambda: [service.notify_data_arrived() for _ in range(100)])
            assert calls == 0
            async with slave(s, service.port):
                await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
                m.fill(5_000, seed=2)
                from_thread(service.notify_data_arrived)
                assert calls >= 1
                await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
        finally:
            del loop.call_soon_threadsafe
