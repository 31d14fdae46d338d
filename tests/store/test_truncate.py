"""Controller mode's cuts: a returning master's tail cut before start, a partial record cut
when a slave becomes master."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from store.constants import BrokerRole, PutMessageStatus
from store.message import Message
from store.message_store import DefaultMessageStore
from tests.store.conftest import wait_dispatched

MakeStore = Callable[..., DefaultMessageStore]


def put(store: DefaultMessageStore, n: int, queue_id: int = 0) -> list[int]:
    ends = []
    for i in range(n):
        r = store.put_message(Message(topic="T", queue_id=queue_id, body=b"m%d" % i))
        assert r.status is PutMessageStatus.PUT_OK
        assert r.append is not None
        ends.append(r.append.end_offset)
    return ends


def test_truncate_before_start_cuts_commitlog_queues_and_index(make_store: MakeStore,
                                                               tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = make_store(root=root)
    ends = put(store, 10) + put(store, 3, queue_id=1)
    wait_dispatched(store)
    store.shutdown()
    again = make_store(start=False, root=root)
    again.truncate_before_start(ends[5])  # keeps 6 messages of queue 0, none of queue 1
    again.start()
    assert again.max_phy_offset == ends[5]
    assert again.get_max_offset_in_queue("T", 0) == 6
    assert again.get_max_offset_in_queue("T", 1) == 0
    r = again.put_message(Message(topic="T", queue_id=0, body=b"new"))
    assert r.append is not None and r.append.queue_offsets == [6]
    r = again.put_message(Message(topic="T", queue_id=1, body=b"new"))
    assert r.append is not None and r.append.queue_offsets == [0]
    wait_dispatched(again)
    assert again.get_max_offset_in_queue("T", 0) == 7


def test_cut_undispatched_tail_drops_a_partial_record(make_store: MakeStore,
                                                      tmp_path: Path) -> None:
    master = make_store(root=tmp_path / "m")
    ends = put(master, 4)
    wait_dispatched(master)
    slave = make_store(root=tmp_path / "sl", broker_role=BrokerRole.SLAVE)
    data = master.read_commitlog(0, ends[-1])
    slave.append_commitlog(0, data[: ends[2] + 10])  # 3 records and a piece of the 4th
    assert slave.cut_undispatched_tail() == ends[2]
    assert slave.max_phy_offset == ends[2]
    assert slave.get_max_offset_in_queue("T", 0) == 3
    # Made master, it goes on with the queue's next offset (not 0: replicated appends
    # never set the next queue offsets).
    slave.role = BrokerRole.SYNC_MASTER
    r = slave.put_message(Message(topic="T", queue_id=0, body=b"new"))
    assert r.append is not None and r.append.queue_offsets == [3]
