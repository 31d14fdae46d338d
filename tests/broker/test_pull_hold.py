"""Long polling: waits woken by the store's dispatch thread, coalesced onto the loop."""

from __future__ import annotations

import asyncio
import threading
import time

from broker.pull import PullRequestHoldService
from broker.stats import BrokerStats
from tests.support.clock import FakeClock


def test_wait_is_woken_from_another_thread_quickly() -> None:
    async def main() -> None:
        max_offsets = {("T", 0): 5}
        hold = PullRequestHoldService(asyncio.get_running_loop(),
                                      lambda t, q: max_offsets.get((t, q), 0))

        def dispatch() -> None:
            time.sleep(0.05)
            max_offsets[("T", 0)] = 6
            hold.on_message_arriving("T", 0, 6)

        waiter = asyncio.create_task(hold.wait("T", 0, 5, 5.0))
        await asyncio.sleep(0)
        assert len(hold) == 1
        begin = time.monotonic()
        threading.Thread(target=dispatch).start()
        assert await waiter is True
        assert time.monotonic() - begin < 0.5
        assert len(hold) == 0

    asyncio.run(main())


def test_only_waits_below_the_new_max_offset_wake() -> None:
    async def main() -> None:
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda t, q: 0)
        low = asyncio.create_task(hold.wait("T", 1, 3, 5.0))
        high = asyncio.create_task(hold.wait("T", 1, 10, 0.2))
        other = asyncio.create_task(hold.wait("T", 2, 0, 0.2))
        await asyncio.sleep(0)
        assert hold.notify_message_arriving("T", 1, 4) == 1
        assert await low is True
        assert await high is False  # timed out
        assert await other is False

    asyncio.run(main())


def test_arrived_before_waiting_returns_at_once() -> None:
    async def main() -> None:
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda t, q: 8)
        assert await asyncio.wait_for(hold.wait("T", 0, 7, 5.0), 1.0) is True
        assert await hold.wait("T", 0, 8, 0) is False  # no suspend time: no wait

    asyncio.run(main())


def test_hand_over_is_coalesced() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        hold = PullRequestHoldService(loop, lambda t, q: 0)
        calls = []
        real_drain = hold._drain

        def counting_drain() -> None:
            calls.append(1)
            real_drain()

        hold._drain = counting_drain  # type: ignore[method-assign]
        waiter = asyncio.create_task(hold.wait("T", 0, 0, 5.0))
        await asyncio.sleep(0)
        threads = [threading.Thread(target=lambda i=i: [hold.on_message_arriving("T", q, i)
                                                        for q in range(4)])
                   for i in range(1, 50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert await waiter is True
        await asyncio.sleep(0.01)
        assert len(calls) <= 49  # one pending hand-over at a time, never one per call
        assert hold._arrived == {}

    asyncio.run(main())


def test_shutdown_answers_every_wait() -> None:
    async def main() -> None:
        hold = PullRequestHoldService(asyncio.get_running_loop(), lambda t, q: 0)
        waiters = [asyncio.create_task(hold.wait("T", q, 0, 30.0)) for q in range(3)]
        await asyncio.sleep(0)
        hold.shutdown()
        assert await asyncio.gather(*waiters) == [False, False, False]
        assert await hold.wait("T", 0, 0, 30.0) is False

    asyncio.run(main())


def test_tps_over_the_last_minute() -> None:
    clock = FakeClock()
    stats = BrokerStats(clock)
    assert stats.put_tps() == 0.0
    for _ in range(10):
        clock.advance(1)
        stats.record_put("T", 100)
        stats.record_get("G", "T", 50)
        stats.sample()
    assert stats.put_tps() == 100.0
    assert stats.get_total_tps() == 50.0
    assert stats.consume_tps("G") == 50.0 and stats.consume_tps("other") == 0.0
    for _ in range(120):  # a quiet two minutes: the window forgets the burst
        clock.advance(1)
        stats.sample()
    assert stats.put_tps() == 0.0
    assert stats.put_total == 1000
