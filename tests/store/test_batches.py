"""The batch paths of the store: coalesced SYNC_FLUSH puts, dispatch of appended batches
(against the parsed-commitlog path), and the recovery scan's fast path and tail zeroing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from common.codec import decode_record
from common.constants import SysFlag
from store.constants import CQ_STORE_UNIT_SIZE, FlushDiskType, GetMessageStatus, PutMessageStatus
from store.consume_queue import ENTRY
from store.mapped_file import AllocateMappedFileService
from store.message import Message
from store.message_store import DefaultMessageStore
from store.reading import TagFilter
from tests.store.conftest import wait_dispatched

MakeStore = Callable[..., DefaultMessageStore]
P = PutMessageStatus
T0 = 1_700_000_000_000


def msg(i: int, queue_id: int = 0, topic: str = "TopicA", size: int = 150,
        born_host: tuple[str, int] = ("10.1.2.3", 4567), **props: str) -> Message:
    properties = {"TAGS": f"T{i % 3}", "KEYS": f"key-{i} shared", "UNIQ_KEY": f"U{i:08d}",
                  **props}
    body = f"message-{i}|".encode().ljust(size, b".")
    return Message(topic, body, properties, queue_id=queue_id, born_timestamp=T0 + i,
                   born_host=born_host)


def fixed_clock() -> dict[str, object]:
    return {"clock_ms": lambda: T0}


def test_concurrent_async_puts_are_appended_together(make_store: MakeStore) -> None:
    store = make_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store._reput_service.stop()  # the appended batches stay where the test can count them
    requests: list[list[Message]] = [[msg(i, queue_id=i % 3)] for i in range(30)]
    requests[7] = [Message("bad topic!", b"x")]
    requests[12] = [msg(1000, queue_id=1), msg(1001, queue_id=1), msg(1002, queue_id=2)]
    requests[20] = [msg(2000), Message("TopicA", b"x", {"k": "v" * 33_000})]

    async def put_all() -> list:
        return await asyncio.gather(*(store.put_messages_async(r) for r in requests))

    results = asyncio.run(put_all())
    assert results[7].status is P.MESSAGE_ILLEGAL
    assert results[20].status is P.PROPERTIES_SIZE_EXCEEDED
    ok = [(r, res) for r, res in zip(requests, results, strict=True) if res.ok]
    assert len(ok) == 28
    assert len(store.commitlog.appended) == 1  # one append for all 28 callers
    flushed = store.commitlog.flushed_offset
    next_in_queue = {0: 0, 1: 0, 2: 0}
    for sent, res in ok:
        a = res.append
        assert len(a.commit_log_offsets) == len(a.queue_offsets) == len(sent)
        assert a.end_offset <= flushed
        for m, phys, qoff in zip(sent, a.commit_log_offsets, a.queue_offsets, strict=True):
            got = store.look_message_by_offset(phys)
            assert got is not None and got.body == m.body and got.queue_offset == qoff
            assert qoff == next_in_queue[m.queue_id]
            next_in_queue[m.queue_id] += 1
        last = store.look_message_by_offset(a.commit_log_offsets[-1])
        assert a.end_offset == a.commit_log_offsets[-1] + last.store_size
    wait_dispatched(store)
    for q, n in next_in_queue.items():
        got = store.get_message("g", "TopicA", q, 0, 64)
        assert got.status is GetMessageStatus.FOUND and len(got.messages) == n


def test_coalesced_puts_time_out_together(make_store: MakeStore) -> None:
    store = make_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=300)
    store._flush_service.stop()  # the disk never answers

    async def put_all() -> tuple[list, float]:
        started = time.monotonic()
        got = await asyncio.gather(*(store.put_messages_async([msg(i)]) for i in range(5)))
        return got, time.monotonic() - started

    results, waited = asyncio.run(put_all())
    assert [r.status for r in results] == [P.FLUSH_DISK_TIMEOUT] * 5
    assert all(r.append.commit_log_offsets for r in results)  # appended, not flushed
    assert 0.3 <= waited < 5


def _put_mixed(store: DefaultMessageStore) -> list[tuple[Message, int]]:
    """Batches that cross commitlog files, several queues and topics, prepared transactions
    (no queue entry) and delayed messages (tags code = delivery time)."""
    sent = []
    i = 0
    for batch_size in (1, 7, 40, 3, 64, 1, 25):
        batch = []
        for _ in range(batch_size):
            if i % 23 == 11:
                m = msg(i, topic="SCHEDULE_TOPIC_XXXX", size=1000, DELAY="3")
            else:
                m = msg(i, queue_id=i % 4, topic=("TopicA", "TopicB")[i % 5 == 0], size=1000)
            if i % 17 == 5:
                m.sys_flag = int(SysFlag.TRANSACTION_PREPARED)
            batch.append(m)
            i += 1
        r = store.append(batch)
        assert r.ok
        sent += zip(batch, r.append.commit_log_offsets, strict=True)
    return sent


def _queue_bytes(store: DefaultMessageStore) -> dict[tuple[str, int], bytes]:
    out = {}
    for key, cq in store.queues.table.items():
        out[key] = b"".join(cq.read_entries(i, 1) for i in range(cq.max_offset_in_queue))
    return out


def _index_entries(store: DefaultMessageStore) -> list[tuple]:
    return [(f.begin_phy_offset, f.end_phy_offset, f.index_count, f.hash_slot_count,
             list(f.entries())) for f in store.index.files()]


def test_dispatch_of_appended_batches_equals_dispatch_of_the_parsed_commitlog(
        make_store: MakeStore, tmp_path: Path) -> None:
    stores = []
    for name in ("batches", "parsed"):
        store = make_store(start=False, root=tmp_path / name, _store_kwargs=fixed_clock())
        store.running = True  # no reput thread: the test dispatches
        sent = _put_mixed(store)
        if name == "parsed":
            store.commitlog.appended.clear()  # what a restarted or replicating store has
        assert store.do_reput() == len(sent) == 141
        assert not store.commitlog.appended
        stores.append(store)
    by_batches, parsed = stores
    assert len(by_batches.commitlog.queue.files) > 2  # batches crossed file ends
    queues = _queue_bytes(by_batches)
    assert queues == _queue_bytes(parsed)
    assert len(queues) == 9  # TopicA and TopicB 0..3, and the schedule topic
    assert _index_entries(by_batches) == _index_entries(parsed)
    assert by_batches.last_dispatched_ts == parsed.last_dispatched_ts == T0
    entries = {}
    for (topic, _), raw in queues.items():
        for i in range(0, len(raw), CQ_STORE_UNIT_SIZE):
            offset, _, code = ENTRY.unpack_from(raw, i)
            entries[offset] = (topic, code)
    prepared = [phys for m, phys in sent if m.sys_flag]
    delayed = [phys for m, phys in sent if m.topic == "SCHEDULE_TOPIC_XXXX"]
    assert prepared and delayed
    assert not set(prepared) & set(entries)
    assert len(entries) == len(sent) - len(prepared)
    assert {entries[p] for p in delayed} == {("SCHEDULE_TOPIC_XXXX", T0 + 10_000)}  # level 3


def test_batch_partly_dispatched_from_the_parsed_commitlog(make_store: MakeStore) -> None:
    store = make_store(start=False, _store_kwargs=fixed_clock())
    store.running = True
    assert store.append([msg(i) for i in range(4)]).ok
    b1 = store.commitlog.appended.popleft()
    assert store.do_reput() == 4  # parsed from the commitlog
    assert store.append([msg(i) for i in range(4, 10)]).ok
    b2 = store.commitlog.appended.popleft()
    # One batch covering both appends: its first 4 records are dispatched already.
    store.commitlog.appended.append((b1[0], b2[1], T0, b1[3] + b2[3], b1[4] + b2[4],
                                     b1[5] + b2[5]))
    assert store.do_reput() == 6
    cq = store.find_consume_queue("TopicA", 0)
    assert cq.max_offset_in_queue == 10
    for i in range(10):
        got = store.get_message("g", "TopicA", 0, i, 1)
        assert got.decoded()[0].body.startswith(f"message-{i}|".encode())
        assert len(store.query_message("TopicA", f"U{i:08d}", 4)) == 1


def _crash(store: DefaultMessageStore) -> Path:
    """Stops the store as a crash leaves it: abort file kept, checkpoint zeroed."""
    root = store.root
    store.shutdown()
    (root / "abort").touch()
    (root / "checkpoint").write_bytes(bytes(4096))
    return root


def test_crash_recovery_scans_ipv6_records(make_store: MakeStore, tmp_path: Path) -> None:
    root = tmp_path / "v6"
    store = make_store(root=root, store_host=("::1", 10911))
    sent = []
    for i in range(300):
        host = ("2001:db8::7", 1234) if i % 3 else ("10.0.0.1", 99)
        m = msg(i, queue_id=i % 2, born_host=host)
        sent.append((m, store.put_message(m).append.commit_log_offsets[0]))
    _crash(store)
    again = make_store(root=root, store_host=("::1", 10911))
    assert again.recovered_from_crash
    for m, phys in sent:
        got = again.look_message_by_offset(phys)
        assert got is not None and got.body == m.body and got.born_host[0] == m.born_host[0]
    assert [again.get_max_offset_in_queue("TopicA", q) for q in (0, 1)] == [150, 150]
    # A damaged body in the middle: recovery cuts exactly there, v6 records or not.
    cut = sent[200][1]
    again.shutdown()
    mf_size = again.config.mapped_file_size_commit_log
    path = root / "commitlog" / f"{cut - cut % mf_size:020d}"
    with open(path, "r+b") as f:
        f.seek(cut % mf_size + 130)
        byte = f.read(1)
        f.seek(cut % mf_size + 130)
        f.write(bytes([byte[0] ^ 0xFF]))
    (root / "abort").touch()
    (root / "checkpoint").write_bytes(bytes(4096))
    cut_store = make_store(root=root, store_host=("::1", 10911))
    assert cut_store.commitlog.max_offset == cut
    assert [cut_store.get_max_offset_in_queue("TopicA", q) for q in (0, 1)] == [100, 100]


def test_truncation_zeroes_the_stale_tail_of_a_large_file(make_store: MakeStore,
                                                          tmp_path: Path) -> None:
    """The file is larger than the zero run that ends zeroing (max message size + margin):
    the stale records behind the cut are still all zeroed."""
    root = tmp_path / "big"
    sizes = dict(mapped_file_size_commit_log=1 << 20, max_message_size=1024)
    store = make_store(root=root, **sizes)
    offsets = [store.put_message(msg(i, size=900)).append.commit_log_offsets[0]
               for i in range(400)]  # ~420 KB of a 1 MiB file
    end = store.commitlog.max_offset
    _crash(store)
    path = root / "commitlog" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[offsets[50] + 100] ^= 0xFF  # the body of record 50
    path.write_bytes(bytes(data))
    again = make_store(root=root, **sizes)
    assert again.commitlog.max_offset == offsets[50]
    again.shutdown()
    after = path.read_bytes()
    assert after[offsets[50] : end + 4096] == bytes(end + 4096 - offsets[50])
    assert after[: offsets[50]] == bytes(data[: offsets[50]])


def test_torn_consume_queue_entry_ends_the_queue(make_store: MakeStore, tmp_path: Path) -> None:
    """A crash inside a consume-queue write can leave an offset without its size; recovery
    ends the queue there and dispatches the record again."""
    root = tmp_path / "torn"
    store = make_store(root=root)
    for i in range(30):
        store.put_message(msg(i))
    wait_dispatched(store)
    cq = store.find_consume_queue("TopicA", 0)
    last = cq.get_entry(29)
    _crash(store)
    qfile = sorted((root / "consumequeue" / "TopicA" / "0").iterdir())[-1]
    data = bytearray(qfile.read_bytes())
    pos = 29 % (2000 // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
    data[pos + 8 : pos + 20] = bytes(12)  # size and tags code never written
    qfile.write_bytes(bytes(data))
    again = make_store(root=root)
    wait_dispatched(again)
    assert again.find_consume_queue("TopicA", 0).get_entry(29) == last



def test_entry_cut_inside_its_tags_code_is_rewritten(make_store: MakeStore,
                                                      tmp_path: Path) -> None:
    """The copy of a block of entries can stop at a page boundary inside the last entry (the
    kill lands in the page fault): offset and size written, the tags code only in part. The
    inspector calls it a crash's cut-off write, not damage; recovery checks the last entry
    against its record, drops it and dispatches the record again (found by the SIGKILL test:
    a message with a zero tags code is lost to tag-filtered consumers)."""
    root = tmp_path / "cut"
    store = make_store(root=root)
    for i in range(30):
        store.put_message(msg(i))
    wait_dispatched(store)
    last = store.find_consume_queue("TopicA", 0).get_entry(29)
    assert last is not None and last[2] != 0
    _crash(store)
    qfile = sorted((root / "consumequeue" / "TopicA" / "0").iterdir())[-1]
    data = bytearray(qfile.read_bytes())
    pos = 29 % (2000 // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
    data[pos + 12 : pos + 20] = bytes(8)  # the tags code never written
    qfile.write_bytes(bytes(data))
    (root / "abort").touch()
    code, out = _inspect(root)
    assert code == 0 and "cut by the crash" in out, out
    again = make_store(root=root)
    wait_dispatched(again)
    assert again.find_consume_queue("TopicA", 0).get_entry(29) == last
    r = again.get_message("g", "TopicA", 0, 29, 1, TagFilter("T2"))  # msg 29 has tag T2
    assert r.status is GetMessageStatus.FOUND and decode_record(r.messages[0]).body == msg(29).body
    again.shutdown()
    code, out = _inspect(root)
    assert code == 0 and "cut by the crash" not in out, out


def _inspect(root: Path) -> tuple[int, str]:
    p = subprocess.run([sys.executable, "-m", "store.inspect", str(root)], capture_output=True,
                       text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr

def test_next_file_prepared_by_one_thread_taken_by_another(tmp_path: Path) -> None:
    """The flush service prepares the next commitlog file while the appending thread may
    take it the same moment: taking must wait for it, never fail."""
    allocator = AllocateMappedFileService(warm=True)
    errors: list[BaseException] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads all the time: the race shows within a few tries
    try:
        for i in range(300):
            path = tmp_path / f"{i * 4096:020d}"
            ready = threading.Barrier(2)

            def prepare(p: Path = path, b: threading.Barrier = ready) -> None:
                b.wait()
                allocator.prepare(p, 4096, False)

            t = threading.Thread(target=prepare)
            t.start()
            ready.wait()
            try:
                mf = allocator.get(path, 4096, False)
                assert mf.path == path and mf.file_size == 4096
                mf.destroy()
            except BaseException as e:  # noqa: BLE001 - collected and reported below
                errors.append(e)
            t.join()
    finally:
        sys.setswitchinterval(switch)
        allocator.shutdown()
    assert not errors, errors[:3]


def test_one_batch_over_several_files_is_committed_from_the_write_buffer(
        make_store: MakeStore) -> None:
    """Write-buffer mode: a batch bigger than two files leaves data in three or more files'
    buffers, and a commit must move all of it (it once took the last two files only, and the
    dispatch service then waited forever at the first file's end)."""
    store = make_store(start=False, transient_store_pool_enable=True, _store_kwargs=fixed_clock())
    store.running = True
    assert store.config.use_write_buffer
    batch = [msg(i, queue_id=i % 2, size=9000) for i in range(40)]  # ~360 KiB, 64 KiB files
    r = store.put_messages(batch)
    assert r.ok
    files = store.commitlog.queue.files
    assert len(files) >= 5
    assert store.commitlog.commit() == r.append.end_offset
    assert all(mf.committed_position == mf.wrote_position for mf in files)
    assert store.do_reput() == 40
    assert store.get_max_offset_in_queue("TopicA", 0) == 20
    last = store.get_message("g", "TopicA", 1, 19, 1)
    assert last.status is GetMessageStatus.FOUND
    assert decode_record(last.messages[0]).body == batch[39].body
