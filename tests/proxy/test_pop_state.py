"""The pop state and its log (proxy/pop.py), pure: replay after a restart, compaction, a
torn last line; receipt handles (proxy/convert.py); the delivery timer's hops."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqproto.v2 import definition_pb2 as D
from proxy.convert import ReceiptHandle, V2Error
from proxy.pop import LOG_NAME, InFlight, PopStateStore
from proxy.timer import hop_level

KEY = ("G", "T", 0)


class Commits:
    def __init__(self) -> None:
        self.offsets: dict[tuple[str, str, int], int] = {}

    def __call__(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets[(group, topic, queue_id)] = offset


def opened(tmp_path: Path, commits: Commits, compact_after: int = 1000) -> PopStateStore:
    store = PopStateStore(tmp_path, commits, compact_after=compact_after)
    store.load()
    return store


def test_commit_moves_only_past_acked_offsets(tmp_path: Path) -> None:
    commits = Commits()
    store = opened(tmp_path, commits)
    store.state(*KEY, start=lambda: 10)
    assert commits.offsets[KEY] == 10
    for offset in range(10, 14):
        store.delivered(KEY, offset, InFlight(1, 1_000, offset * 100))
    store.acked(KEY, 11, 12)
    store.acked(KEY, 13, 14)
    assert commits.offsets[KEY] == 10  # 10 is still in flight
    store.acked(KEY, 10, 11)
    assert commits.offsets[KEY] == 12  # 12 is in flight
    state = store.queues[KEY]
    assert (state.commit, state.next, sorted(state.inflight), state.acked) == (12, 14, [12], {13})


@pytest.mark.parametrize("compact_after", [1000, 3])
def test_replay_after_restart(tmp_path: Path, compact_after: int) -> None:
    store = opened(tmp_path, Commits(), compact_after)
    store.state(*KEY, start=lambda: 0)
    for offset in range(5):
        store.delivered(KEY, offset, InFlight(1, 1_000, offset))
    store.acked(KEY, 0, 1)
    store.acked(KEY, 3, 4)
    store.changed(KEY, 2, 9_999)
    store.delivered(KEY, 4, InFlight(2, 5_000, 4))
    # No close(): as if the process was killed.
    again = opened(tmp_path, Commits(), compact_after)
    state = again.queues[KEY]
    assert state.commit == 1 and state.next == 5
    assert {o: (f.attempt, f.deadline_ms) for o, f in state.inflight.items()} == {
        1: (1, 1_000), 2: (1, 9_999), 4: (2, 5_000)}
    assert state.acked == {3}


@pytest.mark.parametrize("compact_after", [1000, 3])
def test_a_batch_is_logged_in_one_write_at_its_end(tmp_path: Path, compact_after: int
                                                   ) -> None:
    store = opened(tmp_path, Commits(), compact_after)
    log_size = (tmp_path / LOG_NAME).stat().st_size
    with store.batch():
        store.state(*KEY, start=lambda: 0)
        for offset in range(4):
            store.delivered(KEY, offset, InFlight(1, 1_000, offset))
        with store.batch():  # nested: the outer one writes
            store.acked(KEY, 0, 2)
        assert (tmp_path / LOG_NAME).stat().st_size == log_size  # nothing written yet
    # No close(): as if the process was killed.
    state = opened(tmp_path, Commits(), compact_after).queues[KEY]
    assert (state.commit, state.next, sorted(state.inflight)) == (2, 4, [2, 3])


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    store = opened(tmp_path, Commits())
    store.state(*KEY, start=lambda: 0)
    store.delivered(KEY, 0, InFlight(1, 1_000, 0))
    store.close()
    with (tmp_path / LOG_NAME).open("a") as f:
        f.write('{"k":"ack","g":"G","t":"T","q":0,"o":0,')
    again = opened(tmp_path, Commits())
    assert sorted(again.queues[KEY].inflight) == [0]


def test_receipt_handles() -> None:
    handle = ReceiptHandle("broker-a", 3, 42, 2, 1_700_000_000_000)
    assert ReceiptHandle.decode(handle.encode()) == handle
    for bad in ("", "v1 broker-a 3 42 2", "v2 broker-a 3 42 2 1", "v1 b x 42 2 1"):
        with pytest.raises(V2Error) as e:
            ReceiptHandle.decode(bad)
        assert e.value.code == D.INVALID_RECEIPT_HANDLE


def test_timer_hops_never_pass_the_delivery_time() -> None:
    levels = [1_000, 5_000, 10_000, 30_000]
    assert hop_level(0, levels) == 0
    assert hop_level(999, levels) == 0
    assert hop_level(1_000, levels) == 1
    assert hop_level(4_999, levels) == 1
    assert hop_level(12_000, levels) == 3
    assert hop_level(10**9, levels) == 4


def test_skip_past_expired_offsets(tmp_path: Path) -> None:
    commits = Commits()
    store = opened(tmp_path, commits)
    store.state(*KEY, start=lambda: 0)
    for offset in range(3):
        store.delivered(KEY, offset, InFlight(1, 1_000, offset))
    store.skipped(KEY, 1_000_000)  # the queue's files expired: a big jump, no per-offset work
    assert commits.offsets[KEY] == 1_000_000
    again = opened(tmp_path, Commits())
    state = again.queues[KEY]
    assert (state.commit, state.next, state.inflight, state.acked) == (1_000_000, 1_000_000,
                                                                        {}, set())


def test_a_full_disk_leaves_the_log_whole_and_loses_no_delivery(tmp_path: Path) -> None:
    """ENOSPC under the pop log (a real tmpfs): the failed write is cut off, the request
    fails with PopLogUnwritable (reported once to the caller's hook), and once space is back
    the log is rewritten from memory, so a restart still has every message in flight."""
    from proxy.pop import PopLogUnwritable
    from tests.support.small_fs import fill, mounted_tmpfs

    with mounted_tmpfs(tmp_path / "fs", size="1m") as fs:
        failures: list[OSError] = []
        store = PopStateStore(fs, Commits(), on_write_failed=failures.append)
        store.load()
        store.state(*KEY, start=lambda: 0)
        store.delivered(KEY, 0, InFlight(1, 1_000, 0))
        ballast = fill(fs)
        # Delivered in memory; the request's reply is an error.
        with pytest.raises(PopLogUnwritable, match="No space left"), store.batch():
            for offset in range(1, 400):
                store.delivered(KEY, offset, InFlight(1, 1_000, offset))
        with pytest.raises(PopLogUnwritable):
            store.acked(KEY, 0, 1)  # behind: the rewrite fails too, the old log stays
        assert len(failures) == 2
        logged = (fs / LOG_NAME).read_bytes()
        assert logged.endswith(b"\n") and b'"o":1,' not in logged  # whole records only
        ballast.unlink()
        store.delivered(KEY, 400, InFlight(1, 1_000, 400))  # rewrites from memory first
        again = PopStateStore(fs, Commits())
        again.load()
        state = again.queues[KEY]
        assert (state.commit, state.next) == (1, 401)
        assert sorted(state.inflight) == list(range(1, 401))
        store.close()
        again.close()
