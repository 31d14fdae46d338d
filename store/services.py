"""Background services of the store: flush of the commitlog (group commit or periodic),
flush of consume queues / index with the checkpoint, and the dispatch ("reput") loop.
Each is a thread that sleeps on an Event so shutdown and tests can wake it."""

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
        self.wakeup = threading.Event()
        self.stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self.stopped:
            self.wakeup.clear()  # before the step: a wake-up during the step is not lost
            try:
                wait = self._step()
            except Exception:  # keep the service alive; the failure is in the log
                log.exception("%s failed", self.name)
                wait = 1.0
            if wait > 0 and not self.stopped:
                self.wakeup.wait(wait)

    def wake(self) -> None:
        self.wakeup.set()

    def stop(self) -> None:
        self.stopped = True
        self.wakeup.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)


def monotonic() -> float:
    return time.monotonic()
