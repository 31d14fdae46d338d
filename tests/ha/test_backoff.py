"""The slave's reconnect waits (ha/backoff.py), on a fake clock: a master that is down is
tried again within a few hundred milliseconds but not hammered; a master that takes the
connection and drops it is tried less and less often; a link that worked starts over."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Awaitable, Callable

import pytest

from ha.backoff import ReconnectBackoff
from ha.slave import HAClient
from tests.ha.conftest import MemoryStore, master
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.timeout(30)
FIRST, DOWN_CAP, REFUSED_CAP = 0.05, 0.5, 5.0


def test_waits_double_from_a_short_first_step_to_the_cap_of_the_failure() -> None:
    top = ReconnectBackoff(FIRST, DOWN_CAP, REFUSED_CAP, rng=lambda: 0.999999)
    down = [round(top.after_failure(connected=False), 3) for _ in range(7)]
    assert down == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.5]
    refused = [round(top.after_failure(connected=True), 3) for _ in range(5)]
    assert refused == [0.5, 1.0, 2.0, 4.0, 5.0]
    # The master down again: its attempts come at the short cap at once.
    assert round(top.after_failure(connected=False), 3) == 0.5
    top.reset()
    assert round(top.after_failure(connected=False), 3) == 0.05


def test_each_wait_is_jittered_within_its_upper_half() -> None:
    rng = random.Random(5)
    backoff = ReconnectBackoff(FIRST, DOWN_CAP, REFUSED_CAP, rng=rng.random)
    waits = [backoff.after_failure(connected=False) for _ in range(200)]
    assert FIRST / 2 <= waits[0] <= FIRST
    assert all(DOWN_CAP / 2 <= w <= DOWN_CAP for w in waits[4:])
    assert len({round(w, 6) for w in waits[4:]}) > 150  # not in step with other slaves


def test_bad_waits_are_refused() -> None:
    with pytest.raises(ValueError, match="reconnect waits"):
        ReconnectBackoff(1.0, 0.5, 5.0)


class SkippingTime:
    """The slave's clock and sleep: a sleep returns at once, having moved the clock by its
    delay and run what was due meanwhile (at its own time), so that a minute of retries
    runs in a moment (tests.support.clock.FakeTime waits for a driver to advance it)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []
        self.due: list[tuple[float, Callable[[], Awaitable[None]]]] = []

    def clock(self) -> float:
        return self.now

    def at(self, when: float, action: Callable[[], Awaitable[None]]) -> None:
        self.due.append((when, action))
        self.due.sort(key=lambda d: d[0])

    async def sleep(self, delay: float) -> None:
        self.waits.append(delay)
        end = self.now + delay
        while self.due and self.due[0][0] <= end:
            when, action = self.due.pop(0)
            self.now = when
            await action()
        self.now = end
        await asyncio.sleep(0)


def closed_port() -> int:
    """A loopback port nobody listens on (connects are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_slave(store: MemoryStore, port: int, time: SkippingTime) -> HAClient:
    return HAClient(store, f"127.0.0.1:{port}", clock=time.clock, sleep=time.sleep,
                    report_interval=0.05, housekeeping_interval=10.0, connect_timeout=10.0,
                    backoff=ReconnectBackoff(FIRST, DOWN_CAP, REFUSED_CAP,
                                             rng=random.Random(11).random))


async def test_a_master_down_a_minute_is_tried_boundedly_and_its_return_seen_within_the_cap(
        ) -> None:
    port = closed_port()
    time = SkippingTime()
    m, s = MemoryStore(), MemoryStore()
    m.fill(10_000)
    server: list[asyncio.AbstractAsyncContextManager[object]] = []
    up_at = 60.0

    async def master_up() -> None:
        ctx = master(m, port=port)
        await ctx.__aenter__()
        server.append(ctx)

    time.at(up_at, master_up)
    client = fake_slave(s, port, time)
    client.start()
    try:
        await wait_until_async(lambda: client.status.connected, timeout=20)
        back_after = time.now - up_at
        down_waits = time.waits
        await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
    finally:
        await client.stop()
        for ctx in server:
            await ctx.__aexit__(None, None, None)
    # The first retry comes soon; none waits more than the cap while the master is down...
    assert down_waits[0] <= FIRST and max(down_waits) <= DOWN_CAP
    # ...and a minute of it is not many attempts (each a refused connect).
    attempts = len(down_waits)
    assert up_at / DOWN_CAP <= attempts <= up_at / (DOWN_CAP / 2) + 10, attempts
    # The master back: the slave is linked within one wait of it listening.
    assert 0 <= back_after <= DOWN_CAP, back_after


async def test_a_master_that_drops_every_link_is_tried_less_and_less_often() -> None:
    connects = 0

    async def dropping_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connects
        connects += 1
        writer.close()

    server = await asyncio.start_server(dropping_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    time = SkippingTime()
    client = fake_slave(MemoryStore(), port, time)
    client.start()
    try:
        await wait_until_async(lambda: time.now >= 60.0, timeout=20)
    finally:
        await client.stop()
        server.close()
        await server.wait_closed()
    assert max(time.waits) > DOWN_CAP and all(w <= REFUSED_CAP for w in time.waits)
    assert all(w >= REFUSED_CAP / 2 for w in time.waits[8:])
    assert connects <= 30, connects  # a minute at 2.5-5 s apart, not 2 a second


async def test_a_link_that_worked_is_retried_after_the_first_step_again() -> None:
    port = closed_port()
    time = SkippingTime()
    m, s = MemoryStore(), MemoryStore()
    m.fill(10_000)
    client = fake_slave(s, port, time)
    client.start()
    try:
        await wait_until_async(lambda: time.now >= 10.0, timeout=20)  # waits at the cap by now
        async with master(m, port=port):
            await wait_until_async(lambda: s.max_phy_offset == m.max_phy_offset)
            before = len(time.waits)
        await wait_until_async(lambda: len(time.waits) > before)
        assert time.waits[before] <= FIRST
    finally:
        await client.stop()


async def test_a_connect_without_answer_is_given_up_after_the_connect_timeout() -> None:
    # A listener whose accept queue is full: the kernel drops further SYNs, as from a host
    # that is gone; each attempt is given up after the connect timeout, not hung on.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    queued = socket.create_connection(listener.getsockname())
    time = SkippingTime()
    client = HAClient(MemoryStore(), f"127.0.0.1:{listener.getsockname()[1]}",
                      clock=time.clock, sleep=time.sleep, housekeeping_interval=20.0,
                      connect_timeout=0.2, backoff=ReconnectBackoff(FIRST, DOWN_CAP,
                                                                    REFUSED_CAP))
    client.start()
    try:
        await wait_until_async(lambda: len(time.waits) >= 3, timeout=5)
        assert "TimeoutError" in client.status.last_error
        # given up as the master's port not answering: the short waits
        assert max(time.waits) <= DOWN_CAP
    finally:
        await client.stop()
        queued.close()
        listener.close()
