"""The replica-set state machine of one broker group (RocketMQ 5's ReplicasInfoManager and
DefaultElectPolicy), as pure code: no clock, no network, no store.

A group (`ReplicaSet`) is its brokers (replica id -> addresses), its master (a replica id
or None), the master epoch, the SyncStateSet (the replicas that hold everything the master
acknowledged) and its epoch. Every change is a new `ReplicaSet` returned by a function of
this module; the caller persists it (controller/etcd_store.py) and only then acts on it.

Replica ids are the brokers' own `brokerId` (1, 2, 3...): a master registers with the name
servers as brokerId 0, as every master does, and keeps its replica id here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

# electionPriority of a broker that sets none (RocketMQ: Integer.MAX_VALUE, lowest).
DEFAULT_ELECTION_PRIORITY = 2**31 - 1


class ControllerError(Exception):
    """A request the state machine refuses; `code` names why (RocketMQ's response codes)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# Codes, after RocketMQ's ResponseCode.CONTROLLER_*.
NOT_REGISTERED = "BROKER_NEED_TO_BE_REGISTERED"
MASTER_STILL_EXIST = "MASTER_STILL_EXIST"
ELECT_MASTER_FAILED = "ELECT_MASTER_FAILED"
MASTER_NOT_AVAILABLE = "MASTER_NOT_AVAILABLE"
FENCED_MASTER_EPOCH = "FENCED_MASTER_EPOCH"
FENCED_SYNC_STATE_SET_EPOCH = "FENCED_SYNC_STATE_SET_EPOCH"
INVALID_MASTER = "INVALID_MASTER"
INVALID_REPLICAS = "INVALID_REPLICAS"
BROKER_NOT_ALIVE = "BROKER_NOT_ALIVE"
ALTER_SYNC_STATE_SET_FAILED = "ALTER_SYNC_STATE_SET_FAILED"
INVALID_REQUEST = "INVALID_REQUEST"


@dataclasses.dataclass(frozen=True)
class Replica:
    """Where one broker of the group serves: clients (gRPC) and slaves (HA)."""

    address: str
    ha_address: str = ""


@dataclasses.dataclass(frozen=True)
class LiveInfo:
    """What the last heartbeat of a live broker said: the inputs of an election."""

    epoch: int = 0  # the newest master epoch in its epoch file
    max_offset: int = 0  # its commitlog max offset
    election_priority: int = DEFAULT_ELECTION_PRIORITY  # lower wins


@dataclasses.dataclass(frozen=True)
class ReplicaSet:
    cluster_name: str
    broker_name: str
    replicas: Mapping[int, Replica] = dataclasses.field(default_factory=dict)
    master_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0

    @property
    def first_election(self) -> bool:
        """Never had a master: the first broker that asks becomes it (RocketMQ's
        isFirstTimeForElect)."""
        return self.master_epoch == 0 and self.master_id is None

    @property
    def master(self) -> Replica | None:
        return self.replicas.get(self.master_id) if self.master_id is not None else None

    # -- persistence (one JSON document per group) ------------------------------------------
    def to_json(self) -> bytes:
        return json.dumps({
            "clusterName": self.cluster_name, "brokerName": self.broker_name,
            "replicas": {str(i): {"address": r.address, "haAddress": r.ha_address}
                         for i, r in sorted(self.replicas.items())},
            "masterId": self.master_id, "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
        }, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ReplicaSet:
        try:
            d: dict[str, Any] = json.loads(raw)
            return cls(
                cluster_name=str(d["clusterName"]), broker_name=str(d["brokerName"]),
                replicas={int(i): Replica(str(r["address"]), str(r.get("haAddress", "")))
                          for i, r in d["replicas"].items()},
                master_id=None if d["masterId"] is None else int(d["masterId"]),
                master_epoch=int(d["masterEpoch"]),
                sync_state_set=frozenset(int(i) for i in d["syncStateSet"]),
                sync_state_set_epoch=int(d["syncStateSetEpoch"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a replica set document: {e}") from None


def register(rs: ReplicaSet | None, cluster_name: str, broker_name: str, broker_id: int,
             replica: Replica) -> ReplicaSet:
    """A broker joins its group (or comes back, perhaps at another address)."""
    if broker_id <= 0:
        raise ControllerError(INVALID_REQUEST, f"brokerId must be 1 or more in controller "
                                               f"mode (a replica id), got {broker_id}")
    if rs is None:
        rs = ReplicaSet(cluster_name, broker_name)
    elif rs.cluster_name != cluster_name:
        raise ControllerError(INVALID_REQUEST, f"broker group {broker_name} belongs to cluster "
                                               f"{rs.cluster_name}, not {cluster_name}")
    if rs.replicas.get(broker_id) == replica:
        return rs
    return dataclasses.replace(rs, replicas={**rs.replicas, broker_id: replica})


def _best(candidates: Iterable[int], live: Mapping[int, LiveInfo]) -> int | None:
    """Highest epoch, then highest max offset, then lowest election priority (then lowest
    id, so that the choice does not depend on iteration order)."""
    ranked = sorted(candidates, key=lambda i: (-live[i].epoch, -live[i].max_offset,
                                               live[i].election_priority, i))
    return ranked[0] if ranked else None


def _try_elect(brokers: Iterable[int], live: Mapping[int, LiveInfo], old_master: int | None,
               prefer: int | None) -> int | None:
    alive = {i for i in brokers if i in live}
    if not alive:
        return None
    if old_master in alive and (prefer is None or prefer == old_master):
        return old_master
    if prefer is not None:
        return prefer if prefer in alive else None
    return _best(alive, live)


def choose_master(rs: ReplicaSet, live: Mapping[int, LiveInfo], *,
                  enable_elect_unclean_master: bool = False,
                  prefer: int | None = None) -> int | None:
    """DefaultElectPolicy: among the alive members of the SyncStateSet (then, only with
    enableElectUncleanMaster, among every alive replica): the old master if it is still
    valid; a designated broker only if it is a candidate; else the best by epoch, max
    offset, election priority. None: nobody can be master."""
    chosen = _try_elect(rs.sync_state_set, live, rs.master_id, prefer)
    if chosen is None and enable_elect_unclean_master:
        chosen = _try_elect(rs.replicas, live, rs.master_id, prefer)
    return chosen


@dataclasses.dataclass(frozen=True)
class ElectResult:
    replica_set: ReplicaSet
    changed: bool  # a new state to persist
    code: str = ""  # "" for a new master; else why not


def elect_master(rs: ReplicaSet | None, live: Mapping[int, LiveInfo], *,
                 broker_id: int | None = None, designated: bool = False,
                 enable_elect_unclean_master: bool = False) -> ElectResult:
    """CONTROLLER_ELECT_MASTER. `broker_id`: the broker that asks (None: the controller,
    after its master went silent); `designated`: make exactly that broker master (mqadmin
    electMaster), if it is a candidate.

    A new master gets master epoch + 1 and a SyncStateSet of itself (epoch + 1). When the
    controller finds no candidate for a dead master, the master is cleared and the master
    epoch still goes up (the old master is fenced), the SyncStateSet kept: its members,
    when they come back, are the candidates."""
    if rs is None or (broker_id is not None and broker_id not in rs.replicas):
        raise ControllerError(NOT_REGISTERED, "broker has not registered with the controller")
    if designated and broker_id is None:
        raise ControllerError(INVALID_REQUEST, "a designated election needs a brokerId")
    if rs.first_election and broker_id is not None:
        new_master: int | None = broker_id
    else:
        new_master = choose_master(rs, live, enable_elect_unclean_master=(
            enable_elect_unclean_master), prefer=broker_id if designated else None)
    if new_master is not None and new_master == rs.master_id:
        return ElectResult(rs, False, MASTER_STILL_EXIST)
    if new_master is not None:
        return ElectResult(dataclasses.replace(
            rs, master_id=new_master, master_epoch=rs.master_epoch + 1,
            sync_state_set=frozenset({new_master}),
            sync_state_set_epoch=rs.sync_state_set_epoch + 1), True)
    if broker_id is None and rs.master_id is not None:
        return ElectResult(dataclasses.replace(rs, master_id=None,
                                               master_epoch=rs.master_epoch + 1),
                           True, MASTER_NOT_AVAILABLE)
    return ElectResult(rs, False, ELECT_MASTER_FAILED)


def alter_sync_state_set(rs: ReplicaSet | None, master_id: int, master_epoch: int,
                         new_set: frozenset[int], set_epoch: int,
                         alive: Iterable[int]) -> ReplicaSet:
    """CONTROLLER_ALTER_SYNC_STATE_SET from the master: refused unless it comes from the
    current master at the current master epoch and SyncStateSet epoch, names registered
    alive replicas only and keeps the master in the set. Returns the new state (set epoch
    + 1)."""
    if rs is None:
        raise ControllerError(NOT_REGISTERED, "broker group has not registered")
    if new_set == rs.sync_state_set:
        raise ControllerError(ALTER_SYNC_STATE_SET_FAILED,
                              "the new SyncStateSet is the current one")
    if rs.master_id != master_id:
        raise ControllerError(INVALID_MASTER, f"the master is {rs.master_id}, not {master_id}")
    if rs.master_epoch != master_epoch:
        raise ControllerError(FENCED_MASTER_EPOCH,
                              f"master epoch is {rs.master_epoch}, not {master_epoch}")
    if rs.sync_state_set_epoch != set_epoch:
        raise ControllerError(FENCED_SYNC_STATE_SET_EPOCH,
                              f"SyncStateSet epoch is {rs.sync_state_set_epoch}, not {set_epoch}")
    alive_ids = set(alive)
    for replica in sorted(new_set):
        if replica not in rs.replicas:
            raise ControllerError(INVALID_REPLICAS, f"replica {replica} is not registered")
        if replica not in alive_ids:
            raise ControllerError(BROKER_NOT_ALIVE, f"replica {replica} is not alive")
    if master_id not in new_set:
        raise ControllerError(ALTER_SYNC_STATE_SET_FAILED,
                              f"the new SyncStateSet lacks its master {master_id}")
    return dataclasses.replace(rs, sync_state_set=frozenset(new_set),
                               sync_state_set_epoch=rs.sync_state_set_epoch + 1)


def clean_broker(rs: ReplicaSet, broker_ids: Iterable[int] | None = None) -> ReplicaSet | None:
    """CLEAN_BROKER_DATA: forgets replicas (all of them: None, the group goes). A master or
    SyncStateSet member forgotten leaves the group without them."""
    if broker_ids is None:
        return None
    gone = set(broker_ids)
    replicas = {i: r for i, r in rs.replicas.items() if i not in gone}
    if not replicas:
        return None
    master = rs.master_id if rs.master_id not in gone else None
    return dataclasses.replace(
        rs, replicas=replicas, master_id=master,
        master_epoch=rs.master_epoch + (1 if master != rs.master_id else 0),
        sync_state_set=frozenset(rs.sync_state_set - gone),
        sync_state_set_epoch=rs.sync_state_set_epoch + (1 if rs.sync_state_set & gone else 0))
