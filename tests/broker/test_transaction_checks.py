"""Which producer a check goes to (broker/transaction/checks.py): any live member of the
half's group, round-robin; a member whose stream ended is never chosen."""

from __future__ import annotations

import asyncio

from broker.transaction.checks import MAX_QUEUED_CHECKS, ProducerCheckStreams


def test_checks_rotate_over_live_members_and_skip_departed_ones() -> None:
    async def scenario() -> None:
        streams: ProducerCheckStreams[str] = ProducerCheckStreams()
        assert streams.send("PG", "nobody listens") is None
        a = streams.subscribe("PG", "a")
        b = streams.subscribe("PG", "b")
        streams.subscribe("OTHER", "c")
        chosen = [streams.send("PG", f"check {i}") for i in range(4)]
        assert sorted(chosen) == ["a", "a", "b", "b"]
        assert a.qsize() == b.qsize() == 2
        assert streams.unsubscribe("PG", "a", a) is True
        assert [streams.send("PG", "after a left") for _ in range(3)] == ["b", "b", "b"]
        assert streams.groups() == {"PG": 1, "OTHER": 1}
        assert streams.members("PG") == ["b"]

    asyncio.run(scenario())


def test_a_member_that_does_not_keep_up_is_skipped() -> None:
    async def scenario() -> None:
        streams: ProducerCheckStreams[int] = ProducerCheckStreams()
        slow = streams.subscribe("PG", "slow")
        for i in range(MAX_QUEUED_CHECKS):
            slow.put_nowait(i)
        assert streams.send("PG", -1) is None  # full: asked again at the next run
        streams.subscribe("PG", "fast")
        assert streams.send("PG", -1) == "fast"

    asyncio.run(scenario())
