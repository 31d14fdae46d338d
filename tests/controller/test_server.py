"""The controller service on a real etcd: registration, elections after a silent master,
SyncStateSet changes, and a second controller taking over."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from controller import protocol as p
from controller.client import ControllerClient, ControllerRefused, parse_addresses
from controller.etcd_process import EtcdCluster
from controller.etcd_store import EtcdStore, parse_endpoints
from controller.server import Controller, ControllerConfig


def make(etcd: EtcdCluster, **kw: Any) -> Controller:
    config = ControllerConfig(etcd_endpoints=etcd.endpoints_text, etcd_prefix="/t",
                              heartbeat_timeout_ms=600, scan_interval_ms=50, lease_ttl_s=1,
                              **kw)
    return Controller(config, EtcdStore(parse_endpoints(etcd.endpoints_text), "/t"))


def beat(broker_id: int, offset: int = 0, epoch: int = 0) -> dict[str, Any]:
    return {"clusterName": "c", "brokerName": "g", "brokerId": broker_id,
            "brokerAddress": f"127.0.0.1:{100 + broker_id}", "haAddress": f"h:{broker_id}",
            "epoch": epoch, "maxOffset": offset}


async def until(cond: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_silent_master_is_replaced_by_the_best_sync_state_set_member(etcd: EtcdCluster
                                                                      ) -> None:
    async def run() -> None:
        ctl = make(etcd)
        addr = await ctl.start()
        client = ControllerClient([addr])
        stop = asyncio.Event()
        offsets = {2: 500, 3: 400}
        try:
            await until(lambda: asyncio.sleep(0, ctl.leading))
            first = await client.call(p.REGISTER, beat(1))
            assert first["masterId"] == 1 and first["masterEpoch"] == 1
            for i in (2, 3):
                info = await client.call(p.REGISTER, beat(i))
                assert info["masterId"] == 1
            info = await client.call(p.ALTER_SYNC_STATE_SET, {
                "brokerName": "g", "masterId": 1, "masterEpoch": 1, "syncStateSetEpoch": 1,
                "syncStateSet": [1, 2, 3]})
            assert info["syncStateSet"] == [1, 2, 3] and info["syncStateSetEpoch"] == 2

            async def slaves() -> None:  # 2 and 3 keep beating, 1 (the master) went silent
                while not stop.is_set():
                    for i in (2, 3):
                        await client.call(p.HEARTBEAT, beat(i, offsets[i], epoch=1))
                    await asyncio.sleep(0.1)
            task = asyncio.create_task(slaves())

            async def elected() -> bool:
                got = await client.call(p.GET_REPLICA_INFO, {"brokerName": "g"})
                return got["masterId"] != 1
            await until(elected)
            got = await client.call(p.GET_REPLICA_INFO, {"brokerName": "g"})
            assert got["masterId"] == 2  # the higher max offset
            assert got["masterEpoch"] == 2 and got["syncStateSet"] == [2]
            # The stale master's SyncStateSet change is fenced by the master epoch.
            with pytest.raises(ControllerRefused) as e:
                await client.call(p.ALTER_SYNC_STATE_SET, {
                    "brokerName": "g", "masterId": 1, "masterEpoch": 1,
                    "syncStateSetEpoch": 2, "syncStateSet": [1]})
            assert e.value.code == "INVALID_MASTER"
            stop.set()
            await task
            # What the controller wrote is in etcd.
            groups = await EtcdStore(parse_endpoints(etcd.endpoints_text), "/t").load_groups()
            assert groups["g"][0].master_id == 2
        finally:
            stop.set()
            await client.close()
            await ctl.stop()
    asyncio.run(run())


def test_a_second_controller_takes_over_and_keeps_the_state(etcd: EtcdCluster) -> None:
    async def run() -> None:
        a, b = make(etcd), make(etcd)
        addr_a = await a.start()
        await until(lambda: asyncio.sleep(0, a.leading))
        addr_b = await b.start()
        client = ControllerClient([addr_b, addr_a])  # asks the standby first: redirected
        try:
            assert (await client.call(p.REGISTER, beat(1)))["masterId"] == 1
            assert client.leader == addr_a
            meta = await client.call(p.GET_METADATA, {})
            assert meta["leader"] == addr_a
            await a.stop()  # resigns: b leads within its campaign period
            await until(lambda: asyncio.sleep(0, b.leading))
            # b read the group from etcd: the master and its epoch are kept.
            info = await client.call(p.HEARTBEAT, beat(1, epoch=1))
            assert info["masterId"] == 1 and info["masterEpoch"] == 1
            assert client.leader == addr_b
        finally:
            await client.close()
            await b.stop()
    asyncio.run(run())


def test_bad_requests_get_clear_codes(etcd: EtcdCluster) -> None:
    async def run() -> None:
        ctl = make(etcd)
        addr = await ctl.start()
        client = ControllerClient([addr])
        try:
            await until(lambda: asyncio.sleep(0, ctl.leading))
            for method, req, code in [
                (p.REGISTER, {"brokerName": "g"}, "INVALID_REQUEST"),
                (p.REGISTER, {**beat(1), "brokerId": 0}, "INVALID_REQUEST"),
                (p.HEARTBEAT, beat(9), "BROKER_NEED_TO_BE_REGISTERED"),
                (p.GET_REPLICA_INFO, {"brokerName": "nope"}, "BROKER_NEED_TO_BE_REGISTERED"),
            ]:
                with pytest.raises(ControllerRefused) as e:
                    await client.call(method, req)
                assert e.value.code == code
        finally:
            await client.close()
            await ctl.stop()
    asyncio.run(run())


def test_parse_addresses() -> None:
    assert parse_addresses("a:1;b:2") == ["a:1", "b:2"]
    with pytest.raises(ValueError):
        parse_addresses("a")


def test_without_etcd_no_election_happens_and_it_resumes_after(etcd: EtcdCluster) -> None:
    """etcd down: the controller steps down within its lease, so nobody is elected (the
    brokers keep their roles: they hear NOT_LEADER); etcd back: it leads again with the
    state it had, and a silent master is replaced again."""
    async def run() -> None:
        ctl = make(etcd)
        addr = await ctl.start()
        client = ControllerClient([addr])
        try:
            await until(lambda: asyncio.sleep(0, ctl.leading))
            await client.call(p.REGISTER, beat(1))
            await client.call(p.REGISTER, beat(2))
            await client.call(p.ALTER_SYNC_STATE_SET, {
                "brokerName": "g", "masterId": 1, "masterEpoch": 1, "syncStateSetEpoch": 1,
                "syncStateSet": [1, 2]})
            etcd.kill(0)
            await until(lambda: asyncio.sleep(0, not ctl.leading), timeout=15)
            with pytest.raises(Exception) as e:  # no active controller: nothing changes
                await client.call(p.HEARTBEAT, beat(2, 10, epoch=1))
            assert "no active controller" in str(e.value)
            await asyncio.to_thread(etcd.restart, 0)
            await until(lambda: asyncio.sleep(0, ctl.leading), timeout=15)
            # Master 1 is silent, 2 beats: once the new term's grace is over, 2 is elected.

            async def elected() -> bool:
                got = await client.call(p.HEARTBEAT, beat(2, 10, epoch=1))
                return got["masterId"] == 2
            await until(elected, timeout=15)
            got = await client.call(p.GET_REPLICA_INFO, {"brokerName": "g"})
            assert got["masterEpoch"] == 2
        finally:
            await client.close()
            await ctl.stop()
    asyncio.run(run())
