"""The controller's persistence on a real etcd: writes fenced by the group's revision and
by the leader's term (lease)."""

from __future__ import annotations

import asyncio

import pytest

from controller.etcd_process import EtcdCluster
from controller.etcd_store import EtcdStore, EtcdUnreachable, Fenced, parse_endpoints
from controller.state import Replica, register


def store(etcd: EtcdCluster, prefix: str = "/t") -> EtcdStore:
    return EtcdStore(parse_endpoints(etcd.endpoints_text), prefix, timeout_s=2.0)


def test_writes_are_fenced_by_revision_and_term(etcd: EtcdCluster) -> None:
    async def run() -> None:
        a, b = store(etcd), store(etcd)
        try:
            assert await a.campaign("ctl-a:1", ttl_s=1)
            assert not await b.campaign("ctl-b:1", ttl_s=1)
            assert await b.leader() == "ctl-a:1"
            rs = register(None, "c", "g", 1, Replica("x:1"))
            rev = await a.save_group(rs, "g", 0)
            with pytest.raises(Fenced):  # written meanwhile: the old revision is stale
                await a.save_group(rs, "g", 0)
            with pytest.raises(Fenced):  # b does not lead
                await b.save_group(rs, "g", rev)
            loaded = await b.load_groups()
            assert loaded == {"g": (rs, rev)}
            # a stops refreshing its lease (a pause, a partition): b takes over, a is fenced.
            deadline = asyncio.get_running_loop().time() + 10
            while not await b.campaign("ctl-b:1", ttl_s=1):
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.1)
            with pytest.raises(Fenced):
                await a.save_group(rs, "g", rev)
            assert not await a.keep_alive()
            rev2 = await b.save_group(register(rs, "c", "g", 2, Replica("y:1")), "g", rev)
            assert rev2 > rev
        finally:
            await a.close()
            await b.close()
    asyncio.run(run())


def test_unreachable_etcd_is_a_clear_error(etcd: EtcdCluster) -> None:
    async def run() -> None:
        s = EtcdStore([("127.0.0.1", 1)], timeout_s=0.5)
        with pytest.raises(EtcdUnreachable):
            await s.load_groups()
        await s.close()
    asyncio.run(run())


def test_three_members_survive_the_loss_of_one(etcd3: EtcdCluster) -> None:
    async def run() -> None:
        s = store(etcd3)
        try:
            assert await s.campaign("ctl:1", ttl_s=5)
            rs = register(None, "c", "g", 1, Replica("x:1"))
            rev = await s.save_group(rs, "g", 0)
            etcd3.kill(0)  # the member the client talks to first
            rev = await s.save_group(register(rs, "c", "g", 2, Replica("y:1")), "g", rev)
            assert (await s.load_groups())["g"][1] == rev
        finally:
            await s.close()
    asyncio.run(run())


def test_parse_endpoints() -> None:
    assert parse_endpoints("a:1;b:2,http://c:3") == [("a", 1), ("b", 2), ("c", 3)]
    for bad in ("", "a", "a:x"):
        with pytest.raises(ValueError):
            parse_endpoints(bad)
