"""A broker in controller mode (RocketMQ 5's ReplicasManager): it registers with the
controllers, heartbeats every `brokerHeartbeatInterval` with what an election weighs (its
newest epoch, max offset, election priority) and learns its role from each answer.

It acts on the controller's word only when it names a higher master epoch than the one
applied (or at start): made master, it cuts a partial record its old master left, appends
`<epoch, max offset>` to its epoch file and switches role (the broker's `RoleSwitch`);
made slave, it follows the new master's HA address. A broker that comes back after another
became master cuts its own tail before its store starts, at the end of the newest epoch it
shares with the master (ha/epoch_file.py), so that it never serves or replicates what the
new master does not have.

As master it keeps the group's SyncStateSet: a slave joins once its ack reaches the
confirm offset (the least ack among the set's slaves, or the master's max offset when it has
none) and leaves when its link goes or it falls out of sync; changes go to the controller
(AlterSyncStateSet, fenced by the master and set epochs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from broker.config import BrokerConfig
from controller import protocol as cp
from controller.client import (
    ControllerClient,
    ControllerRefused,
    ControllerUnavailable,
    parse_addresses,
)
from ha.epoch_file import EpochEntry, EpochFile, find_consistent_point
from ha.master import SlaveStatus
from store.message_store import DefaultMessageStore

log = logging.getLogger(__name__)

# At start, how long a returning broker waits for the master's epoch entries (they come with
# the master's heartbeats) before it starts without cutting anything.
EPOCH_ENTRIES_WAIT_S = 3.0


class RoleSwitch(Protocol):
    """What the broker (broker/controller.py) does when the controller changes its role."""

    async def become_master(self, epoch: int) -> None: ...

    async def become_slave(self, master_addr: str, master_ha_addr: str) -> None: ...

    def slave_statuses(self) -> list[SlaveStatus]: ...

    def count_acks_of(self, slaves: frozenset[int]) -> None: ...

    def master_linked(self) -> bool: ...

    def request_restart(self, reason: str) -> None: ...


@dataclasses.dataclass
class RoleState:
    role: str = "NONE"  # NONE (not told yet), MASTER, SLAVE
    master_epoch: int = -1  # the master epoch last applied
    master_id: int | None = None
    master_addr: str = ""
    sync_state_set: tuple[int, ...] = ()
    sync_state_set_epoch: int = 0
    switched_at: float = 0.0  # monotonic, last role change


class ReplicasManager:
    def __init__(self, config: BrokerConfig, store: DefaultMessageStore, epoch_path: Path,
                 broker_addr: str, ha_addr: str, *, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.config = config
        self.store = store
        self.epochs = EpochFile(epoch_path)
        self.broker_addr = broker_addr
        self.ha_addr = ha_addr
        self.clock = clock
        self.client = ControllerClient(parse_addresses(config.controller_addr),
                                       timeout_s=max(0.5, config.broker_heartbeat_interval
                                                     / 1000 * 3))
        self.state = RoleState()
        self.switch: RoleSwitch | None = None
        self._applying = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._registered = False
        self.last_answer = 0.0  # monotonic: the controller's last answer

    @property
    def replica_id(self) -> int:
        return self.config.replica_id

    # -- what the controller hears -----------------------------------------------------------
    def _request(self) -> dict[str, Any]:
        c = self.config
        return {
            "clusterName": c.broker_cluster_name, "brokerName": c.broker_name,
            "brokerId": self.replica_id, "brokerAddress": self.broker_addr,
            "haAddress": self.ha_addr, "epoch": self.epochs.last_epoch,
            "maxOffset": self.store.max_phy_offset, "confirmOffset": self.store.max_phy_offset,
            "electionPriority": c.broker_election_priority,
            "epochEntries": [[e.epoch, e.start_offset] for e in self.epochs.entries],
        }

    # -- before the store starts -------------------------------------------------------------
    async def prepare(self) -> None:
        """Loads the epoch file, registers, and cuts a tail the current master never had
        (store loaded, not started). A controller that does not answer is not waited for:
        the broker starts as a slave and registers from its heartbeat loop."""
        await asyncio.to_thread(self.epochs.load)
        deadline = self.clock() + EPOCH_ENTRIES_WAIT_S
        while True:
            try:
                info = await self.client.call(cp.REGISTER, self._request())
            except (ControllerUnavailable, ControllerRefused) as e:
                log.warning("controller mode: cannot register with the controller yet: %s", e)
                return
            self._registered = True
            self.last_answer = self.clock()
            master = info.get("masterId")
            if master is None or master == self.replica_id:
                return
            entries = info.get("masterEpochEntries") or []
            if entries and entries[-1][0] == info.get("masterEpoch"):
                await self._cut_to_master(info)
                return
            if self.clock() > deadline:
                log.warning("controller mode: master %s has not reported its epoch %s yet: "
                            "starting without checking this broker's tail against it",
                            master, info.get("masterEpoch"))
                return
            await asyncio.sleep(0.1)

    async def _cut_to_master(self, info: dict[str, Any]) -> None:
        remote = [EpochEntry(int(e), int(s)) for e, s in info["masterEpochEntries"]]
        local_max = self.store.max_phy_offset
        point = find_consistent_point(self.epochs.entries, local_max, remote,
                                      int(info.get("masterMaxOffset", -1)))
        if point < 0:
            log.error("controller mode: this broker's epochs %s share none with master %s's "
                      "%s: it cannot follow it (clear its store to copy everything again)",
                      self.epochs.entries, info.get("masterAddress"), remote)
            return
        if point < local_max:
            log.warning("controller mode: cutting this broker's commitlog from %d to %d, the "
                        "end of the newest epoch it shares with master %s", local_max, point,
                        info.get("masterAddress"))
            await asyncio.to_thread(self.store.truncate_before_start, point)
            await asyncio.to_thread(self.epochs.truncate_suffix, point)

    # -- running ------------------------------------------------------------------------------
    def start(self, switch: RoleSwitch) -> None:
        self.switch = switch
        self._task = asyncio.create_task(self._run(), name="controllerHeartbeat")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        await self.client.close()

    async def _run(self) -> None:
        interval = self.config.broker_heartbeat_interval / 1000
        failing = False
        while True:
            try:
                method = cp.HEARTBEAT if self._registered else cp.REGISTER
                try:
                    info = await self.client.call(method, self._request())
                except ControllerRefused as e:
                    if e.code != "BROKER_NEED_TO_BE_REGISTERED":
                        raise
                    info = await self.client.call(cp.REGISTER, self._request())
                self._registered = True
                self.last_answer = self.clock()
                if failing:
                    log.info("controller mode: controller %s answers again", self.client.leader)
                    failing = False
                await self.apply(info)
                if self.state.role == "MASTER":
                    await self._check_sync_state_set()
                elif self.state.role == "SLAVE":
                    await self._follow_epochs(info)
            except (ControllerUnavailable, ControllerRefused) as e:
                if not failing:
                    log.warning("controller mode: heartbeat failed, keeping role %s: %s",
                                self.state.role, e)
                failing = True
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller mode: heartbeat")
            await asyncio.sleep(interval)

    async def apply(self, info: dict[str, Any]) -> None:
        """Acts on the controller's replica info if it names a newer master epoch."""
        async with self._applying:
            epoch = int(info.get("masterEpoch", 0))
            master = info.get("masterId")
            s = self.state
            if epoch >= s.master_epoch:
                s.sync_state_set = tuple(info.get("syncStateSet") or ())
                s.sync_state_set_epoch = int(info.get("syncStateSetEpoch", 0))
                self._count_acks()
            if master is None or epoch < s.master_epoch:
                return
            if epoch == s.master_epoch and s.role != "NONE":
                return
            if epoch < self.epochs.last_epoch:
                log.error("controller mode: refusing master epoch %d below this broker's "
                          "own %d", epoch, self.epochs.last_epoch)
                return
            assert self.switch is not None
            if master == self.replica_id:
                await self._to_master(epoch)
            else:
                await self._to_slave(epoch, int(master), str(info.get("masterAddress", "")),
                                     str(info.get("masterHaAddress", "")), info)

    async def _to_master(self, epoch: int) -> None:
        assert self.switch is not None
        started = self.clock()
        end = await asyncio.to_thread(self.store.cut_undispatched_tail)
        if epoch > self.epochs.last_epoch:  # else: restarted within its own epoch
            await asyncio.to_thread(self.epochs.append, epoch, end)
        await self.switch.become_master(epoch)
        s = self.state
        s.role, s.master_epoch, s.master_id = "MASTER", epoch, self.replica_id
        s.master_addr = self.broker_addr
        s.switched_at = self.clock()
        self._count_acks()
        log.info("controller mode: this broker is master of %s (epoch %d, from offset %d) "
                 "in %.0f ms", self.config.broker_name, epoch, end,
                 (self.clock() - started) * 1000)

    async def _to_slave(self, epoch: int, master: int, master_addr: str, master_ha: str,
                        info: dict[str, Any]) -> None:
        assert self.switch is not None
        entries = info.get("masterEpochEntries") or []
        if entries and self.epochs.entries:
            remote = [EpochEntry(int(e), int(s)) for e, s in entries]
            point = find_consistent_point(self.epochs.entries, self.store.max_phy_offset,
                                          remote, int(info.get("masterMaxOffset", -1)))
            if 0 <= point < self.store.max_phy_offset:
                # A master demoted while running (it was paused or cut off past the
                # heartbeat timeout): it stops serving as master now, and restarts in place
                # to cut, before its store starts, what the new master does not have.
                await self.switch.become_slave(master_addr, master_ha)
                self.switch.request_restart(
                    f"it holds {self.store.max_phy_offset - point} bytes past offset {point} "
                    f"that master {master_addr} (epoch {epoch}) does not have")
                return
        await self.switch.become_slave(master_addr, master_ha)
        s = self.state
        s.role, s.master_epoch, s.master_id, s.master_addr = "SLAVE", epoch, master, master_addr
        s.switched_at = self.clock()
        log.info("controller mode: this broker is a slave of %d (%s, HA %s), master epoch %d",
                 master, master_addr, master_ha, epoch)

    async def _follow_epochs(self, info: dict[str, Any]) -> None:
        """A linked slave records the master's epochs its data has reached, so that its
        epoch file tells which master wrote which part of its commitlog (its data up to its
        max offset is the master's: the link proved it)."""
        assert self.switch is not None
        if info.get("masterId") != self.state.master_id or not self.switch.master_linked():
            return
        local_max = self.store.max_phy_offset
        for epoch, start in info.get("masterEpochEntries") or []:
            last = self.epochs.last
            if epoch <= self.epochs.last_epoch or start > local_max:
                continue
            if last is not None and start < last.start_offset:
                continue
            await asyncio.to_thread(self.epochs.append, int(epoch), int(start))

    # -- the master keeps the SyncStateSet -------------------------------------------------------
    def desired_sync_state_set(self, statuses: list[SlaveStatus]) -> set[int]:
        """The master's own id, the members still in sync and the slaves whose ack reached
        the confirm offset: what a send may have been acknowledged for (the best ack of
        the set's slaves; the epoch's start while it has none)."""
        current = set(self.state.sync_state_set)
        by_id = {st.broker_id: st for st in statuses if st.broker_id > 0}
        member_acks = [by_id[i].ack_offset for i in current
                       if i in by_id and i != self.replica_id and by_id[i].connected]
        start = self.epochs.last.start_offset if self.epochs.last is not None else 0
        confirm = max([start, *member_acks])
        new = {self.replica_id}
        for broker_id, st in by_id.items():
            if not (st.connected and st.verified and st.ack_offset >= 0):
                continue
            # A member stays while in sync; another joins once its ack reaches the confirm
            # offset (everything the set's members all have).
            if st.in_sync and (broker_id in current or st.ack_offset >= confirm):
                new.add(broker_id)
        return new

    def _count_acks(self) -> None:
        """A master counts the acks of its SyncStateSet's slaves only: a send is confirmed
        only once a broker that can be elected holds it."""
        if self.switch is not None and self.state.role == "MASTER":
            self.switch.count_acks_of(frozenset(self.state.sync_state_set) - {self.replica_id})

    async def _check_sync_state_set(self) -> None:
        assert self.switch is not None
        s = self.state
        desired = self.desired_sync_state_set(self.switch.slave_statuses())
        if desired == set(s.sync_state_set):
            return
        try:
            info = await self.client.call(cp.ALTER_SYNC_STATE_SET, {
                "brokerName": self.config.broker_name, "masterId": self.replica_id,
                "masterEpoch": s.master_epoch, "syncStateSetEpoch": s.sync_state_set_epoch,
                "syncStateSet": sorted(desired)})
        except ControllerRefused as e:
            log.warning("controller mode: SyncStateSet %s refused: %s", sorted(desired), e)
            return
        s.sync_state_set = tuple(info.get("syncStateSet") or ())
        s.sync_state_set_epoch = int(info.get("syncStateSetEpoch", 0))
        self._count_acks()
        log.info("controller mode: SyncStateSet of %s is %s (epoch %d)",
                 self.config.broker_name, list(s.sync_state_set), s.sync_state_set_epoch)
