"""Background services of the store: flush of the commitlog (group commit or periodic),
flush of consume queues / index with the checkpoint, and the dispatch ("reput") loop.
Each is a thread that sleeps on a wake-up signal so shutdown and tests can wake it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class ServiceThread:
    """A named daemon thread running `step` until stopped; `step` returns seconds to wait."""

    def __init__(self, name: str, step: Callable[[], float]) -> None:
        self.name = name
        self._step = step
        # A wake-up signal: unlocked = a wake-up is pending. A bare lock costs one C call on
        # each side, where Event.set / Event.wait go through a Condition in Python (the group
        # commit service is woken once per round, on the critical path of every SYNC_FLUSH put).
        self._signal = threading.Lock()
        self._signal.acquire()
        self.stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        signal = self._signal
        step = self._step
        while not self.stopped:
            signal.acquire(False)  # before the step: a wake-up during the step is not lost
            try:
                wait = step()
            except Exception:  # keep the service alive; the failure is in the log
                log.exception("%s failed", self.name)
                wait = 1.0
            if wait > 0 and not self.stopped:
                signal.acquire(True, wait)  # at once when a wake-up is pending

    def wake(self) -> None:
        try:
            self._signal.release()
        except RuntimeError:  # a wake-up is pending already
            pass

    def stop(self) -> None:
        self.stopped = True
        self.wake()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)


def monotonic() -> float:
    return time.monotonic()
