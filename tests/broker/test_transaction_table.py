"""The pending table (broker/transaction/table.py) on hand-made records: copies, ops seen
before or after their half, and the progress offsets a restart rescans from."""

from __future__ import annotations

from broker.transaction.table import PendingTable
from common.codec import MessageExt


def copy(tid: str, queue_offset: int, checks: int = 0) -> MessageExt:
    return MessageExt(store_size=100, body_crc=0, queue_id=0, flag=0, queue_offset=queue_offset,
                      commit_log_offset=1000 + queue_offset * 100, sys_flag=0,
                      born_timestamp=1, born_host=("127.0.0.1", 1), store_timestamp=2,
                      store_host=("127.0.0.1", 2), reconsume_times=0,
                      prepared_transaction_offset=0, body=b"", topic="RMQ_SYS_TRANS_HALF_TOPIC",
                      properties={"UNIQ_KEY": tid, "PGROUP": "PG",
                                  "TRANSACTION_CHECK_TIMES": str(checks)})


def scan(table: PendingTable, *copies: MessageExt) -> None:
    for c in copies:
        table.add_half(c, 6000, int(c.properties["TRANSACTION_CHECK_TIMES"]), recovered=False)


def test_a_renewed_copy_supersedes_the_older_one() -> None:
    table = PendingTable()
    scan(table, copy("A", 0), copy("B", 1), copy("A", 2, checks=1))
    assert {t: (e.queue_offset, e.check_times) for t, e in table.pending.items()} == {
        "A": (2, 1), "B": (1, 0)}
    assert table.half_offset() == 1  # B is the oldest pending copy
    # An op naming A's old copy (written before a restart) does not end A...
    assert table.add_op(0, 0) is None
    # ... one naming its latest copy does.
    assert table.add_op(1, 2) == "A"
    assert table.half_offset() == 1 and table.op_offset() == 1
    assert table.add_op(2, 1) == "B"
    assert table.pending == {} and table.half_offset() == 3 and table.op_offset() == 3


def test_an_op_scanned_before_its_half_ends_it_when_the_half_is_reached() -> None:
    table = PendingTable()
    assert table.add_op(0, 1) is None  # the half at 1 is not scanned yet
    scan(table, copy("A", 0), copy("B", 1))
    assert list(table.pending) == ["A"]
    assert table.half_offset() == 0 and table.op_offset() == 0  # B's op is past A's offset


def test_ended_live_ahead_of_the_scan() -> None:
    table = PendingTable()
    scan(table, copy("A", 0))
    entry = table.pending["A"]
    table.renewed(entry, copy("A", 5, checks=1), 1)  # a check put copy 5, not scanned yet
    table.ended(entry)  # and then its op record
    assert table.pending == {} and table.half_offset() == 1
    scan(table, copy("A", 5, checks=1))  # the scan reaches copy 5: it stays ended
    assert table.pending == {} and table.half_offset() == 6


def test_a_restart_rescans_from_the_first_pending_copy() -> None:
    table = PendingTable(half_offset=10, op_offset=4)
    scan(table, copy("C", 10), copy("D", 11))
    table.add_op(4, 10)
    assert list(table.pending) == ["D"]
    assert table.half_offset() == 11 and table.op_offset() == 5
