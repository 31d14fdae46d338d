"""A broker's side of controller mode without a network: which controller answers make it
switch role (only a higher master epoch), the epoch file it keeps, and the SyncStateSet a
master asks for."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from broker.config import parse_config
from broker.replicas import ReplicasManager
from ha.epoch_file import EpochEntry
from ha.master import SlaveStatus


@dataclasses.dataclass
class FakeStore:
    max_phy_offset: int = 1000

    def cut_undispatched_tail(self) -> int:
        return self.max_phy_offset


class FakeSwitch:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.counted: frozenset[int] | None = None
        self.statuses: list[SlaveStatus] = []

    async def become_master(self, epoch: int) -> None:
        self.calls.append(("master", epoch))

    async def become_slave(self, master_addr: str, master_ha_addr: str) -> None:
        self.calls.append(("slave", master_addr, master_ha_addr))

    def slave_statuses(self) -> list[SlaveStatus]:
        return self.statuses

    def count_acks_of(self, slaves: frozenset[int]) -> None:
        self.counted = slaves

    def master_linked(self) -> bool:
        return True

    def request_restart(self, reason: str) -> None:
        self.calls.append(("restart", reason))


def manager(tmp_path: Path, broker_id: int = 2) -> tuple[ReplicasManager, FakeSwitch]:
    loaded = parse_config({"brokerName": "g", "enableControllerMode": "true",
                           "controllerAddr": "127.0.0.1:1", "brokerId": str(broker_id)})
    m = ReplicasManager(loaded.broker, FakeStore(), tmp_path / "epoch",  # type: ignore[arg-type]
                        "127.0.0.1:100", "127.0.0.1:101")
    m.epochs.load()
    switch = FakeSwitch()
    m.switch = switch
    return m, switch


def info(master: int | None, epoch: int, members: list[int] | None = None,
         entries: list[list[int]] | None = None, max_offset: int = 10_000) -> dict[str, Any]:
    return {"masterId": master, "masterEpoch": epoch, "masterAddress": f"a:{master}",
            "masterHaAddress": f"h:{master}", "syncStateSet": members or [],
            "syncStateSetEpoch": 1, "masterEpochEntries": entries or [],
            "masterMaxOffset": max_offset}


def test_acts_only_on_a_higher_master_epoch(tmp_path: Path) -> None:
    m, switch = manager(tmp_path)

    async def run() -> None:
        await m.apply(info(1, 1))  # the first answer is acted on
        await m.apply(info(1, 1))  # the same again: nothing
        await m.apply(info(2, 1))  # a stale answer naming another master: nothing
        await m.apply(info(None, 2))  # no master (being elected): stays a slave of 1
        await m.apply(info(2, 3, [2]))  # made master
        await m.apply(info(1, 2))  # older epoch: ignored
    asyncio.run(run())
    assert switch.calls == [("slave", "a:1", "h:1"), ("master", 3)]
    assert m.state.role == "MASTER" and m.state.master_epoch == 3
    assert m.epochs.entries == [EpochEntry(3, 1000)]
    assert switch.counted == frozenset()  # the SyncStateSet is itself: no slave ack counts


def test_a_master_restarted_within_its_epoch_goes_on_with_it(tmp_path: Path) -> None:
    m, switch = manager(tmp_path)
    m.epochs.append(1, 0)  # master of epoch 1 since offset 0, killed and restarted at once
    asyncio.run(m.apply(info(2, 1, [2])))
    assert switch.calls == [("master", 1)]
    assert m.epochs.entries == [EpochEntry(1, 0)]


def test_refuses_an_epoch_below_its_own(tmp_path: Path) -> None:
    m, switch = manager(tmp_path)
    m.epochs.append(5, 0)
    asyncio.run(m.apply(info(1, 4)))
    assert switch.calls == []


def test_a_master_demoted_while_running_with_a_tail_the_new_master_lacks_restarts(
        tmp_path: Path) -> None:
    m, switch = manager(tmp_path)
    asyncio.run(m.apply(info(2, 1, [2])))  # master of epoch 1 from 1000
    m.store.max_phy_offset = 1500  # type: ignore[misc]  # it wrote 500 more bytes
    # Paused past the timeout: 3 took over at 1200 (what it had of epoch 1).
    asyncio.run(m.apply(info(3, 2, entries=[[1, 1000], [2, 1200]])))
    assert switch.calls[-2] == ("slave", "a:3", "h:3")
    assert switch.calls[-1][0] == "restart" and "300 bytes past offset 1200" in \
        switch.calls[-1][1]


def test_a_linked_slave_records_the_master_epochs_its_data_reached(tmp_path: Path) -> None:
    m, switch = manager(tmp_path)
    m.epochs.append(1, 0)  # it was master of epoch 1, its data all in the master's epoch 2
    asyncio.run(m.apply(info(3, 2, entries=[[1, 0], [2, 1000]])))
    assert switch.calls == [("slave", "a:3", "h:3")]
    asyncio.run(m._follow_epochs(info(3, 2, entries=[[1, 0], [2, 900]])))
    asyncio.run(m._follow_epochs(info(3, 2, entries=[[1, 0], [2, 900]])))
    assert m.epochs.entries == [EpochEntry(1, 0), EpochEntry(2, 900)]
    # An epoch that starts past its data is not recorded yet.
    asyncio.run(m._follow_epochs(info(3, 2, entries=[[1, 0], [2, 900], [3, 5000]])))
    assert m.epochs.last_epoch == 2


def status(broker_id: int, ack: int, in_sync: bool = True, connected: bool = True
           ) -> SlaveStatus:
    return SlaveStatus(f"x:{broker_id}", broker_id=broker_id, connected=connected,
                       ack_offset=ack, in_sync=in_sync, verified=True)


def test_sync_state_set_joins_at_the_confirm_offset_and_drops_lost_members(tmp_path: Path
                                                                           ) -> None:
    m, switch = manager(tmp_path, broker_id=1)
    asyncio.run(m.apply(info(1, 1, [1])))  # master from offset 1000
    # Alone, a slave joins once it has everything from the epoch's start.
    assert m.desired_sync_state_set([status(2, 1000), status(3, 999)]) == {1, 2}
    m.state.sync_state_set = (1, 2)
    # With a member, a slave joins once its ack reaches the member's (the best ack).
    assert m.desired_sync_state_set([status(2, 5000), status(3, 4000)]) == {1, 2}
    assert m.desired_sync_state_set([status(2, 5000), status(3, 5000)]) == {1, 2, 3}
    # A member out of sync or disconnected leaves; one not in sync never joins.
    assert m.desired_sync_state_set([status(2, 5000, in_sync=False), status(3, 6000)]) \
        == {1, 3}
    assert m.desired_sync_state_set([status(2, 5000, connected=False)]) == {1}
