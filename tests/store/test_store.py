from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

import pytest

from store import cq_snapshot
from store.constants import BrokerRole, FlushDiskType, GetMessageStatus, PutMessageStatus
from store.consume_queue import ConsumeQueue
from store.message import Message
from store.message_store import DefaultMessageStore
from store.reading import TagFilter
from tests.store.conftest import wait_dispatched

MakeStore = Callable[..., DefaultMessageStore]
S = GetMessageStatus


def msg(i: int, queue_id: int = 0, topic: str = "TopicA", tag: str | None = None,
        size: int = 200) -> Message:
    props = {"KEYS": f"key-{i} shared", "UNIQ_KEY": f"UNIQ{i:08d}"}
    if tag:
        props["TAGS"] = tag
    body = f"message-{i}|".encode().ljust(size, b".")
    return Message(topic, body, props, queue_id=queue_id, born_timestamp=1000 + i,
                   born_host=("10.1.2.3", 4567))


def test_rolling_across_many_files_and_reading_everything_back(make_store: MakeStore) -> None:
    store = make_store()
    results = []
    for i in range(2000):
        r = store.put_message(msg(i, queue_id=i % 4, tag=f"T{i % 3}"))
        assert r.status is PutMessageStatus.PUT_OK
        results.append(r.append)
    wait_dispatched(store)
    files = store.commitlog.queue.files
    assert len(files) > 5
    for a, b in zip(files, files[1:], strict=False):
        assert b.file_from_offset == a.file_from_offset + a.file_size
        assert b.path.name == f"{b.file_from_offset:020d}"
    # Consume-queue files rolled too (100 entries per file, 500 per queue).
    assert len(store.find_consume_queue("TopicA", 0).files) == 5

    by_queue: dict[int, list[bytes]] = {q: [] for q in range(4)}
    for q in range(4):
        offset = 0
        while True:
            got = store.get_message("g", "TopicA", q, offset, 32)
            if got.status is not S.FOUND:
                assert got.status is S.OFFSET_OVERFLOW_ONE
                break
            by_queue[q].extend(m.body for m in got.decoded())
            offset = got.next_begin_offset
    for i in range(2000):
        assert by_queue[i % 4][i // 4].startswith(f"message-{i}|".encode())
        a = results[i]
        assert a.queue_offsets == [i // 4]
        m = store.look_message_by_msg_id(
            store.look_message_by_offset(a.commit_log_offsets[0]).msg_id)
        assert m is not None and m.body.startswith(f"message-{i}|".encode())
        assert m.born_host == ("10.1.2.3", 4567)
    for i in (0, 1, 777, 1999):
        found = store.query_message("TopicA", f"key-{i}", 10)
        assert [m.queue_offset for m in found] == [i // 4]
        found = store.query_message("TopicA", f"UNIQ{i:08d}", 10)
        assert len(found) == 1 and found[0].body.startswith(f"message-{i}|".encode())
    newest = store.query_message("TopicA", "shared", 5)
    assert [m.born_timestamp for m in newest] == [1000 + i for i in range(1999, 1994, -1)]
    assert store.query_message("TopicB", "key-1", 10) == []


def test_every_get_message_status(make_store: MakeStore) -> None:
    store = make_store()
    assert store.get_message("g", "Nope", 0, 0, 32).status is S.NO_MATCHED_LOGIC_QUEUE
    for i in range(10):
        store.put_message(msg(i, tag="A" if i % 2 else "B"))
    wait_dispatched(store)
    got = store.get_message("g", "TopicA", 0, 0, 32)
    assert got.status is S.FOUND and len(got.messages) == 10 and got.next_begin_offset == 10
    assert (got.min_offset, got.max_offset) == (0, 10)
    assert store.get_message("g", "TopicA", 0, 10, 32).status is S.OFFSET_OVERFLOW_ONE
    bad = store.get_message("g", "TopicA", 0, 50, 32)
    # As RocketMQ: back to min when the queue still starts at 0, else to max.
    assert bad.status is S.OFFSET_OVERFLOW_BADLY and bad.next_begin_offset == 0
    only_a = store.get_message("g", "TopicA", 0, 0, 32, TagFilter("A"))
    assert only_a.status is S.FOUND and only_a.queue_offsets == [1, 3, 5, 7, 9]
    none = store.get_message("g", "TopicA", 0, 0, 32, TagFilter("C || D"))
    assert none.status is S.NO_MATCHED_MESSAGE and none.next_begin_offset == 10
    assert store.get_message("g", "TopicA", 0, 0, 3).queue_offsets == [0, 1, 2]

    # A queue that exists but is empty: a prepared transaction half message is stored
    # without a consume-queue entry; create the queue by a message elsewhere then expire.
    empty = make_store(root=store.root.parent / "empty")
    empty.put_message(msg(0, queue_id=1))
    wait_dispatched(empty)
    cq = empty.find_consume_queue("TopicA", 1)
    cq.destroy()
    assert empty.get_message("g", "TopicA", 1, 0, 32).status is S.NO_MESSAGE_IN_QUEUE

    # Old files removed: OFFSET_TOO_SMALL, MESSAGE_WAS_REMOVING, OFFSET_FOUND_NULL.
    big = make_store(root=store.root.parent / "big")
    for i in range(1000):
        big.put_message(msg(i))
    wait_dispatched(big)
    cq = big.find_consume_queue("TopicA", 0)
    # Remove the first two commitlog files by hand, as expiry would (but keep the queue).
    deleted = big.commitlog.queue.delete_first_files(lambda mf: True, 2)
    assert deleted == 2
    removing = big.get_message("g", "TopicA", 0, 0, 32)
    assert removing.status is S.MESSAGE_WAS_REMOVING and removing.next_begin_offset > 0
    big.clean_expired_files(force_time=True)
    assert cq.min_offset_in_queue > 0
    small = big.get_message("g", "TopicA", 0, 0, 32)
    assert small.status is S.OFFSET_TOO_SMALL
    assert small.next_begin_offset == cq.min_offset_in_queue
    assert big.get_message("g", "TopicA", 0, cq.min_offset_in_queue, 32).status is S.FOUND
    # A consume-queue file vanished under a valid offset.
    cq.handles.pwrite(cq.files[0].path, bytes(20), 0)
    gone_offset = cq.min_offset_in_queue
    cq._delete_file(cq.files.pop(0))
    null = big.get_message("g", "TopicA", 0, gone_offset, 32)
    assert null.status is S.OFFSET_FOUND_NULL
    assert null.next_begin_offset == (gone_offset // 100 + 1) * 100


def test_batch_stops_at_32_messages_and_256_kib(make_store: MakeStore) -> None:
    store = make_store(mapped_file_size_commit_log=4 * 1024 * 1024)
    for i in range(40):
        store.put_message(msg(i, size=100))
    for i in range(40, 50):
        store.put_message(msg(i, size=100 * 1024))
    wait_dispatched(store)
    assert len(store.get_message("g", "TopicA", 0, 0, 1000).messages) == 32
    got = store.get_message("g", "TopicA", 0, 40, 1000)
    assert len(got.messages) == 2 and got.next_begin_offset == 42
    assert got.buffer_total_size <= 256 * 1024


def test_put_status_checks(make_store: MakeStore) -> None:
    store = make_store()
    P = PutMessageStatus
    assert store.put_message(Message("bad topic!", b"x")).status is P.MESSAGE_ILLEGAL
    assert store.put_message(Message("T" * 128, b"x")).status is P.MESSAGE_ILLEGAL
    assert store.put_message(Message("", b"x")).status is P.MESSAGE_ILLEGAL
    big_props = {"k": "v" * 33_000}
    assert store.put_message(Message("T", b"x", big_props)).status is P.PROPERTIES_SIZE_EXCEEDED
    store.config.max_message_size = 1000
    assert store.put_message(Message("T", b"x" * 1001)).status is P.MESSAGE_ILLEGAL
    assert store.put_message(Message("T", b"x" * 1000)).status is P.PUT_OK
    # A record that cannot fit any commitlog file is refused, nothing written.
    store.config.max_message_size = 1 << 20
    before = store.commitlog.max_wrote_offset
    assert store.put_message(Message("T", b"x" * 70_000)).status is P.MESSAGE_ILLEGAL
    assert store.commitlog.max_wrote_offset == before
    # Put lock held too long -> OS_PAGECACHE_BUSY.
    store.commitlog.begin_time_in_lock = store.clock_ms() - 5000
    assert store.put_message(Message("T", b"x")).status is P.OS_PAGECACHE_BUSY
    store.commitlog.begin_time_in_lock = 0
    store.writeable = False
    assert store.put_message(Message("T", b"x")).status is P.SERVICE_NOT_AVAILABLE
    store.writeable = True
    store.role = BrokerRole.SLAVE
    assert store.put_message(Message("T", b"x")).status is P.SERVICE_NOT_AVAILABLE
    store.role = BrokerRole.ASYNC_MASTER
    store.shutdown()
    assert store.put_message(Message("T", b"x")).status is P.SERVICE_NOT_AVAILABLE


def test_sync_flush_waits_for_disk_and_groups_writers(make_store: MakeStore) -> None:
    store = make_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    assert store.config.use_write_buffer
    r = store.put_message(msg(0))
    assert r.ok and store.commitlog.flushed_offset >= r.append.end_offset

    async def many() -> list[PutMessageStatus]:
        results = await asyncio.gather(*(store.put_messages_async([msg(i)]) for i in range(200)))
        return [x.status for x in results]

    assert set(asyncio.run(many())) == {PutMessageStatus.PUT_OK}
    assert store.commitlog.flushed_offset == store.commitlog.max_wrote_offset


def test_commit_listeners_hear_when_buffered_appends_become_readable(
        make_store: MakeStore) -> None:
    store = make_store(start=False, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store.running = True  # accepts puts; no flush / reput thread commits behind the test
    heard: list[int] = []
    store.commit_listeners.append(heard.append)
    r = store.append([msg(0)])
    assert r.ok and store.commitlog.max_offset == 0  # buffered: not readable yet
    assert heard == []
    store.commitlog.commit()
    assert heard == [r.append.end_offset] == [store.commitlog.max_offset]
    store.commitlog.commit()  # nothing new: nobody is woken
    assert heard == [r.append.end_offset]


def test_sync_flush_timeout(make_store: MakeStore) -> None:
    store = make_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=200)
    store._flush_service.stop()  # the disk never answers
    assert store.put_message(msg(0)).status is PutMessageStatus.FLUSH_DISK_TIMEOUT


def test_async_flush_flushes_in_the_background(make_store: MakeStore) -> None:
    store = make_store(flush_interval_commit_log=20, flush_commit_log_least_pages=0)
    r = store.put_message(msg(0))
    assert r.ok
    for _ in range(200):
        if store.commitlog.flushed_offset >= r.append.end_offset:
            break
        asyncio.run(asyncio.sleep(0.01))
    assert store.commitlog.flushed_offset >= r.append.end_offset


def test_offset_in_queue_by_time_and_store_timestamps(make_store: MakeStore) -> None:
    now = [1_000_000]
    store = make_store(_store_kwargs={"clock_ms": lambda: now[0]})
    for i in range(50):
        now[0] = 1_000_000 + i * 1000
        store.put_message(msg(i))
    wait_dispatched(store)
    assert store.get_message_store_timestamp("TopicA", 0, 7) == 1_007_000
    assert store.get_offset_in_queue_by_time("TopicA", 0, 0) == 0
    assert store.get_offset_in_queue_by_time("TopicA", 0, 1_007_000) == 7
    assert store.get_offset_in_queue_by_time("TopicA", 0, 1_007_001) == 8
    assert store.get_offset_in_queue_by_time("TopicA", 0, 9_999_999) == 50


def test_queue_bytes_exact_then_estimated(make_store: MakeStore) -> None:
    store = make_store()
    sizes = []
    for i in range(40):
        r = store.put_message(Message("TopicA", b"x" * (100 + 10 * i), queue_id=0))
        sizes.append(r.append.wrote_bytes)
    wait_dispatched(store)
    assert store.get_queue_bytes("TopicA", 0, 5, 25) == (sum(sizes[5:25]), True)
    assert store.get_queue_bytes("TopicA", 0, 25, 25) == (0, True)
    assert store.get_queue_bytes("TopicB", 0, 0, 10) == (0, True)
    # Past exact_max: the mean of the first entries times the count.
    assert store.get_queue_bytes("TopicA", 0, 0, 40, exact_max=10) == (
        sum(sizes[:10]) * 40 // 10, False)


def test_restart_keeps_queue_offsets_and_reads(make_store: MakeStore, tmp_path) -> None:
    store = make_store(root=tmp_path / "s")
    for i in range(300):
        store.put_message(msg(i, queue_id=i % 3))
    store.shutdown()
    again = make_store(root=tmp_path / "s")
    assert not again.recovered_from_crash
    assert again.get_max_offset_in_queue("TopicA", 2) == 100
    r = again.put_message(msg(300, queue_id=2))
    assert r.append.queue_offsets == [100]
    wait_dispatched(again)
    got = again.get_message("g", "TopicA", 2, 98, 32)
    # One pull never crosses a consume-queue file (100 entries each here).
    assert [m.queue_offset for m in got.decoded()] == [98, 99]
    got = again.get_message("g", "TopicA", 2, got.next_begin_offset, 32)
    assert [m.queue_offset for m in got.decoded()] == [100]


def test_expired_files_are_deleted_with_their_queues_and_index(make_store: MakeStore) -> None:
    now = [10_000_000_000]
    # Snapshots written by hand only (below), not by the flush service meanwhile.
    store = make_store(file_reserved_time=1, consume_queue_snapshot_interval=0,
                       _store_kwargs={"clock_ms": lambda: now[0]})
    for i in range(1000):
        store.put_message(msg(i))
    wait_dispatched(store)
    n_files = len(store.commitlog.queue.files)
    assert store.clean_expired_files() == 0  # not the hour, disk not full: nothing
    # Age every file but the newest by two hours.
    for mf in store.commitlog.queue.files[:-1]:
        os.utime(mf.path, (1, (now[0] - 2 * 3600 * 1000) / 1000))
    for mf in store.commitlog.queue.files[-1:]:
        os.utime(mf.path, (1, now[0] / 1000))
    store.config.delete_when = str(__import__("time").localtime(now[0] / 1000).tm_hour)
    snapshot = store.queues.encode_snapshot(cq_snapshot.RUNNING, store.reput_from_offset)
    assert snapshot is not None
    store.queues.write_snapshot(*snapshot)
    deleted = store.clean_expired_files()
    assert 0 < deleted <= 10
    # The consume-queue snapshot listed deleted files: gone until the next one is written,
    # and one encoded before the deletion is not written.
    assert not os.path.exists(store.queues.snapshot_path)
    store.queues.write_snapshot(*snapshot)
    assert not os.path.exists(store.queues.snapshot_path)
    while store.clean_expired_files():
        pass
    assert len(store.commitlog.queue.files) == 1 < n_files
    cq = store.find_consume_queue("TopicA", 0)
    first = store.get_message("g", "TopicA", 0, cq.min_offset_in_queue, 1)
    assert first.status is S.FOUND
    assert first.decoded()[0].commit_log_offset >= store.commitlog.min_offset
    assert store.query_message("TopicA", "key-0", 5) == []
    assert store.query_message("TopicA", "key-999", 5)


def test_disk_full_refuses_writes_and_recovers(make_store: MakeStore) -> None:
    usage = [0.5]
    store = make_store(_store_kwargs={"disk_usage": lambda path: usage[0]})
    for i in range(400):
        store.put_message(msg(i))
    usage[0] = 0.95
    store.clean_expired_files()
    r = store.put_message(msg(1))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "disk" in r.append.error
    # Over the forcibly ratio, old files go even though they are not expired.
    assert len(store.commitlog.queue.files) < 7
    usage[0] = 0.5
    store.clean_expired_files()
    assert store.put_message(msg(2)).ok


def test_consume_queues_follow_the_min_offset_only_when_it_moves(make_store: MakeStore,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """Over diskMaxUsedSpaceRatio cleaning runs every 10 s; with no commitlog file deleted the
    queues are not read again (a pass over 400,000 of them held the GIL for seconds)."""
    store = make_store(_store_kwargs={"disk_usage": lambda path: 0.8})  # over 75 %, under 85
    for i in range(10):
        store.put_message(msg(i, queue_id=i % 2))
    wait_dispatched(store)
    passes: list[int] = []
    monkeypatch.setattr(ConsumeQueue, "delete_expired",
                        lambda self, offset: passes.append(offset) or 0)
    store.clean_expired_files()  # the first pass after start (unless the service ran it)
    passes.clear()
    assert store.clean_expired_files() == 0
    assert passes == []
    # The min offset moves (files deleted): the queues follow it.
    monkeypatch.setattr(type(store.commitlog), "min_offset", property(lambda self: 4096))
    store.clean_expired_files()
    assert passes[-2:] == [4096, 4096]


def test_disk_usage_reads_as_df_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's reserve is neither used nor ours: 30 used, 60 available of 250 is 33 %, not
    the 76 % that total minus available would say (this machine's disk looks like that)."""
    from store import message_store
    fake = os.statvfs_result((4096, 1, 250, 220, 60, 0, 0, 0, 0, 255))
    monkeypatch.setattr(message_store.os, "statvfs", lambda path: fake)
    assert message_store._disk_used_ratio("/any") == pytest.approx(30 / 90)


def test_arriving_listener_sees_dispatch(make_store: MakeStore) -> None:
    store = make_store()
    seen: list[tuple[str, int, int]] = []
    store.arriving_listeners.append(lambda t, q, m: seen.append((t, q, m)))
    store.put_message(msg(0, queue_id=2))
    wait_dispatched(store)
    assert ("TopicA", 2, 1) in seen


def test_empty_slave_store_starts_at_the_masters_first_file(make_store: MakeStore,
                                                            tmp_path) -> None:
    master = make_store(root=tmp_path / "m")
    for i in range(600):
        master.put_message(msg(i))
    wait_dispatched(master)
    master.commitlog.queue.delete_first_files(lambda mf: True, 2)
    slave = make_store(root=tmp_path / "s", broker_role=BrokerRole.SLAVE)
    offset = master.min_phy_offset
    assert offset > 0
    with pytest.raises(ValueError):
        slave.append_commitlog(offset + 1, b"x")  # not a file boundary
    while offset < master.max_phy_offset:
        data = master.read_commitlog(offset, 32 * 1024)
        slave.append_commitlog(offset, data)
        offset += len(data)
    wait_dispatched(slave)
    assert slave.min_phy_offset == master.min_phy_offset
    assert slave.max_phy_offset == master.max_phy_offset
    got = slave.get_message("g", "TopicA", 0, 599, 1)
    assert got.status is S.FOUND and got.decoded()[0].body.startswith(b"message-599|")


def test_slave_dispatches_a_record_split_across_appends_once_it_is_whole(
        make_store: MakeStore, tmp_path) -> None:
    master = make_store(root=tmp_path / "m")
    for i in range(3):
        master.put_message(msg(i))
    wait_dispatched(master)
    data = master.read_commitlog(0, 1 << 20)
    slave = make_store(start=False, root=tmp_path / "s", broker_role=BrokerRole.SLAVE)
    cut = len(data) - 100  # inside the third record, as a frame boundary may fall
    slave.append_commitlog(0, data[:cut])
    assert slave.do_reput() == 2  # the cut record waits; no CorruptRecord
    assert slave.get_max_offset_in_queue("TopicA", 0) == 2
    slave.append_commitlog(cut, data[cut:])
    assert slave.do_reput() == 1
    got = slave.get_message("g", "TopicA", 0, 2, 1)
    assert got.status is S.FOUND and got.decoded()[0].body.startswith(b"message-2|")


def test_async_flush_wait_times_out_without_any_advance() -> None:
    from store.waiters import OffsetWaiters

    waiters = OffsetWaiters(lambda: 0.0)

    async def wait() -> bool:
        return await waiters.wait_async(100, 0.05)

    assert asyncio.run(wait()) is False
