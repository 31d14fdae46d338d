"""Which producer a check goes to (broker/transaction/checks.py): any live member of the
half's group, round-robin; a member whose stream ended is never chosen."""

from __future__ import annotations

import asyncio

from acl.config import Account
from broker.transaction.checks import MAX_QUEUED_CHECKS, ProducerCheckStreams


def test_checks_rotate_over_live_members_and_skip_departed_ones() -> None:
    async def scenario() -> None:
        streams: ProducerCheckStreams[str] = ProducerCheckStreams()
        assert streams.send("PG", "nobody listens", topic="T") is None
        a = streams.subscribe("PG", "a")
        b = streams.subscribe("PG", "b")
        streams.subscribe("OTHER", "c")
        chosen = [streams.send("PG", f"check {i}", topic="T") for i in range(4)]
        assert sorted(chosen) == ["a", "a", "b", "b"]
        assert a.qsize() == b.qsize() == 2
        assert streams.unsubscribe("PG", "a", a) is True
        after = [streams.send("PG", "after a left", topic="T") for _ in range(3)]
        assert after == ["b", "b", "b"]
        assert streams.groups() == {"PG": 1, "OTHER": 1}
        assert streams.members("PG") == ["b"]

    asyncio.run(scenario())


def test_a_member_that_does_not_keep_up_is_skipped() -> None:
    async def scenario() -> None:
        streams: ProducerCheckStreams[int] = ProducerCheckStreams()
        slow = streams.subscribe("PG", "slow")
        for i in range(MAX_QUEUED_CHECKS):
            slow.put_nowait(i)
        assert streams.send("PG", -1, topic="T") is None  # full: asked again at the next run
        streams.subscribe("PG", "fast")
        assert streams.send("PG", -1, topic="T") == "fast"

    asyncio.run(scenario())


def test_checks_go_only_to_streams_whose_account_may_publish_the_topic() -> None:
    """A check carries the half's body: a stream opened by an account (acl.caller) gets the
    checks of topics it may PUB only, as the account table has it at each check; one opened
    unrestricted (no access control) all."""
    from acl import caller
    from acl.config import parse_acl

    def table(reader_perms: list[str]) -> dict[str, Account]:
        return parse_acl({"accounts": [
            {"accessKey": "pub", "secretKey": "12345678", "topicPerms": ["T=PUB"]},
            {"accessKey": "sub", "secretKey": "12345678", "topicPerms": reader_perms},
        ]}).accounts

    accounts = table(["T=SUB", "U=PUB"])

    def serve(access_key: str | None) -> None:
        caller.serve_as(caller.Caller(accounts[access_key], lambda: accounts)
                        if access_key else None)

    async def scenario() -> None:
        nonlocal accounts
        streams: ProducerCheckStreams[str] = ProducerCheckStreams()
        serve("sub")
        reader = streams.subscribe("PG", "reader")
        assert streams.send("PG", "half of T", topic="T") is None
        assert streams.send("PG", "half of U", topic="U") == "reader"
        serve("pub")
        streams.subscribe("PG", "producer")
        assert [streams.send("PG", f"T {i}", topic="T") for i in range(3)] == ["producer"] * 3
        assert reader.get_nowait() == "half of U" and reader.empty()
        # The account file reloaded: PUB on U taken away, given back, the account removed.
        accounts = table(["T=SUB"])
        assert streams.send("PG", "half of U", topic="U") is None
        accounts = table(["T=SUB", "U=PUB"])
        assert streams.send("PG", "half of U", topic="U") == "reader"
        accounts = {k: v for k, v in accounts.items() if k != "sub"}
        assert streams.send("PG", "half of U", topic="U") is None
        serve(None)
        streams.subscribe("PG", "unrestricted")
        chosen = {streams.send("PG", f"T {i}", topic="T") for i in range(6)}
        assert chosen == {"producer", "unrestricted"}
        assert streams.send("PG", "half of U", topic="U") == "unrestricted"

    asyncio.run(scenario())
