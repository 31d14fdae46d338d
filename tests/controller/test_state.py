"""The replica-set state machine on hand-made states (the cases of RocketMQ's
ReplicasInfoManagerTest and DLedgerControllerTest)."""

from __future__ import annotations

import dataclasses

import pytest

from controller.state import (
    ALTER_SYNC_STATE_SET_FAILED,
    BROKER_NOT_ALIVE,
    ELECT_MASTER_FAILED,
    FENCED_MASTER_EPOCH,
    FENCED_SYNC_STATE_SET_EPOCH,
    INVALID_MASTER,
    MASTER_NOT_AVAILABLE,
    MASTER_STILL_EXIST,
    NOT_REGISTERED,
    ControllerError,
    LiveInfo,
    Replica,
    ReplicaSet,
    alter_sync_state_set,
    clean_broker,
    elect_master,
    register,
)


def group(n: int = 3) -> ReplicaSet:
    rs = None
    for i in range(1, n + 1):
        rs = register(rs, "c", "broker-a", i, Replica(f"127.0.0.1:{1000 + i}", f"h:{i}"))
    assert rs is not None
    return rs


def with_master(rs: ReplicaSet, master: int, members: set[int], epoch: int = 1) -> ReplicaSet:
    return dataclasses.replace(rs, master_id=master, master_epoch=epoch,
                               sync_state_set=frozenset(members), sync_state_set_epoch=epoch)


def live(*ids: int, epoch: int = 1, offset: int = 100) -> dict[int, LiveInfo]:
    return {i: LiveInfo(epoch, offset) for i in ids}


def test_first_broker_to_ask_becomes_master_with_epoch_1() -> None:
    r = elect_master(group(), live(1, 2, 3), broker_id=2)
    assert r.changed and r.replica_set.master_id == 2
    assert r.replica_set.master_epoch == 1
    assert r.replica_set.sync_state_set == {2} and r.replica_set.sync_state_set_epoch == 1


def test_elect_master_old_master_still_alive() -> None:
    rs = with_master(group(), 1, {1, 2, 3})
    r = elect_master(rs, live(1, 2, 3), broker_id=None)
    assert not r.changed and r.code == MASTER_STILL_EXIST and r.replica_set is rs


def test_elect_master_prefer_higher_epoch() -> None:
    rs = with_master(group(), 1, {1, 2, 3})
    alive = {2: LiveInfo(epoch=1, max_offset=500), 3: LiveInfo(epoch=2, max_offset=100)}
    r = elect_master(rs, alive)
    assert r.replica_set.master_id == 3
    assert r.replica_set.master_epoch == 2 and r.replica_set.sync_state_set == {3}


def test_elect_master_prefer_higher_offset_when_epoch_equals() -> None:
    rs = with_master(group(), 1, {1, 2, 3})
    alive = {2: LiveInfo(1, 300), 3: LiveInfo(1, 200)}
    assert elect_master(rs, alive).replica_set.master_id == 2


def test_elect_master_prefer_higher_priority_when_epoch_and_offset_equal() -> None:
    rs = with_master(group(), 1, {1, 2, 3})
    alive = {2: LiveInfo(1, 300, election_priority=3), 3: LiveInfo(1, 300, election_priority=1)}
    assert elect_master(rs, alive).replica_set.master_id == 3


def test_only_sync_state_set_members_are_candidates() -> None:
    rs = with_master(group(), 1, {1, 2})
    alive = {3: LiveInfo(5, 10_000)}  # far ahead but never in sync
    r = elect_master(rs, alive)
    assert r.code == MASTER_NOT_AVAILABLE and r.replica_set.master_id is None
    assert r.replica_set.master_epoch == 2  # the dead master is fenced
    assert r.replica_set.sync_state_set == {1, 2}  # kept: they may come back


def test_enable_elect_unclean_master() -> None:
    rs = with_master(group(), 1, {1, 2})
    r = elect_master(rs, {3: LiveInfo(1, 50)}, enable_elect_unclean_master=True)
    assert r.replica_set.master_id == 3 and r.replica_set.sync_state_set == {3}


def test_all_replicas_shutdown_and_restart() -> None:
    rs = with_master(group(), 1, {1, 2, 3})
    down = elect_master(rs, {}).replica_set
    assert down.master_id is None and down.master_epoch == 2
    # 3 restarts first and asks: it is a SyncStateSet member, so it may lead.
    again = elect_master(down, live(3), broker_id=3)
    assert again.replica_set.master_id == 3 and again.replica_set.master_epoch == 3


def test_restart_of_a_replica_outside_the_set_does_not_make_it_master() -> None:
    rs = with_master(group(), 1, {1, 2})
    down = elect_master(rs, {}).replica_set
    r = elect_master(down, live(3), broker_id=3)
    assert not r.changed and r.code == ELECT_MASTER_FAILED


def test_designated_election() -> None:
    rs = with_master(group(), 1, {1, 2, 3})
    r = elect_master(rs, live(1, 2, 3), broker_id=3, designated=True)
    assert r.replica_set.master_id == 3 and r.replica_set.master_epoch == 2
    outside = with_master(group(), 1, {1, 2})
    assert not elect_master(outside, live(1, 2, 3), broker_id=3, designated=True).changed


def test_unknown_group_or_broker_must_register() -> None:
    with pytest.raises(ControllerError) as e:
        elect_master(None, {}, broker_id=1)
    assert e.value.code == NOT_REGISTERED
    with pytest.raises(ControllerError):
        elect_master(group(2), {}, broker_id=7)


def test_alter_sync_state_set_checks_master_and_epochs() -> None:
    rs = with_master(group(), 1, {1}, epoch=4)
    grown = alter_sync_state_set(rs, 1, 4, frozenset({1, 2}), 4, alive={1, 2, 3})
    assert grown.sync_state_set == {1, 2} and grown.sync_state_set_epoch == 5
    cases = [
        ((2, 4, {1, 2}, 4, {1, 2}), INVALID_MASTER),
        ((1, 3, {1, 2}, 4, {1, 2}), FENCED_MASTER_EPOCH),
        ((1, 4, {1, 2}, 3, {1, 2}), FENCED_SYNC_STATE_SET_EPOCH),
        ((1, 4, {1, 2}, 4, {1}), BROKER_NOT_ALIVE),
        ((1, 4, {2}, 4, {1, 2}), ALTER_SYNC_STATE_SET_FAILED),
        ((1, 4, {1}, 4, {1}), ALTER_SYNC_STATE_SET_FAILED),
    ]
    for (master, epoch, members, set_epoch, alive), code in cases:
        with pytest.raises(ControllerError) as e:
            alter_sync_state_set(rs, master, epoch, frozenset(members), set_epoch, alive)
        assert e.value.code == code


def test_register_updates_a_changed_address_and_refuses_id_0() -> None:
    rs = group(2)
    moved = register(rs, "c", "broker-a", 2, Replica("10.0.0.9:1", "10.0.0.9:2"))
    assert moved.replicas[2].address == "10.0.0.9:1"
    assert register(moved, "c", "broker-a", 2, Replica("10.0.0.9:1", "10.0.0.9:2")) is moved
    with pytest.raises(ControllerError):
        register(rs, "c", "broker-a", 0, Replica("x:1"))
    with pytest.raises(ControllerError):
        register(rs, "other", "broker-a", 3, Replica("x:1"))


def test_clean_broker_data() -> None:
    rs = with_master(group(), 1, {1, 2})
    cleaned = clean_broker(rs, [1])
    assert cleaned is not None and 1 not in cleaned.replicas
    assert cleaned.master_id is None and cleaned.master_epoch == 2
    assert cleaned.sync_state_set == {2}
    assert clean_broker(rs, None) is None


def test_json_round_trip_and_bad_document() -> None:
    rs = with_master(group(), 2, {2, 3}, epoch=7)
    assert ReplicaSet.from_json(rs.to_json()) == rs
    with pytest.raises(ValueError):
        ReplicaSet.from_json(b'{"clusterName": 1}')
