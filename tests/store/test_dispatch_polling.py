"""The dispatch service polls while records keep coming (RocketMQ's reput: a pass every
1 ms) instead of being woken by every append, dispatches a first record after a quiet spell
at once, and goes back to sleep when appends stop."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from store import message_store
from store.message_store import DefaultMessageStore
from tests.store.test_batches import msg

MakeStore = Callable[..., DefaultMessageStore]
APPENDS = 400


def _wait(check: Callable[[], bool], timeout: float) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, "not dispatched in time"
        time.sleep(0.0005)
    return time.monotonic() - started


def _count_wakes(store: DefaultMessageStore) -> list[int]:
    wakes = [0]
    wake = store._reput_service.wake

    def counted() -> None:
        wakes[0] += 1
        wake()

    store._reput_service.wake = counted  # type: ignore[method-assign]
    return wakes


def _steady_appends(store: DefaultMessageStore) -> None:
    """APPENDS one-record appends 0.2 ms apart (one-at-a-time sends, ~5,000 a second)."""
    for i in range(APPENDS):
        assert store.append([msg(i)]).ok
        time.sleep(0.0002)


def test_steady_appends_do_not_wake_the_dispatch_service_each(
        make_store: MakeStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # A long period for the test (1 ms in the store): on a loaded machine the appends below
    # may come a few ms apart, which must not count as appends stopping.
    monkeypatch.setattr(message_store, "REPUT_POLL_INTERVAL_S", 0.05)
    store = make_store()
    wakes = _count_wakes(store)
    dispatched = lambda n: store.get_max_offset_in_queue("TopicA", 0) >= n  # noqa: E731
    _wait(lambda: store._reput_idle, 1.0)
    # A first record after a quiet spell wakes the service at once.
    assert store.append([msg(0)]).ok
    assert wakes[0] == 1
    _wait(lambda: dispatched(1), 1.0)
    _steady_appends(store)
    _wait(lambda: dispatched(APPENDS + 1), 2.0)
    # Polling meanwhile: no append had to wake it (each used to: ~APPENDS wake-ups).
    assert wakes[0] <= 1 + APPENDS // 20, wakes[0]
    # Appends stopped: after a pass that found nothing the service sleeps again.
    _wait(lambda: store._reput_idle, 1.0)
