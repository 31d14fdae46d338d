"""Controller mode's ack rule on the master's HA service: only SyncStateSet members' acks
release sends, all of them with allAckInSyncStateSet (a member without a live link holds
every release)."""

from __future__ import annotations

import dataclasses

from ha.master import HAService, SlaveStatus


@dataclasses.dataclass
class Link:
    status: SlaveStatus


def service(*acks: tuple[int, int]) -> tuple[HAService, list[int]]:
    released: list[int] = []
    svc = HAService(None, on_ack=released.append)  # type: ignore[arg-type]
    svc.connections = [Link(SlaveStatus(f"x:{i}", broker_id=i, ack_offset=ack,  # type: ignore[misc]
                                        verified=True)) for i, ack in acks]
    return svc, released


def test_every_verified_slave_counts_by_default() -> None:
    svc, released = service((2, 100), (3, 300))
    svc.acked()
    assert released == [300]


def test_only_sync_state_set_members_count() -> None:
    svc, released = service((2, 100), (3, 300))
    svc.counted_slaves = frozenset({2})
    svc.acked()
    assert released == [100]
    svc.counted_slaves = frozenset()
    svc.acked()
    assert released == [100]  # nobody counts: nothing released


def test_all_ack_waits_for_every_member() -> None:
    svc, released = service((2, 100), (3, 300))
    svc.counted_slaves, svc.all_ack = frozenset({2, 3}), True
    svc.acked()
    assert released == [100]
    svc.counted_slaves = frozenset({2, 3, 4})  # 4 has no live link
    svc.acked()
    assert released == [100]
