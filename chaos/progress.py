"""The progress line while a run goes on: rewritten in place on a terminal, one line every
few seconds otherwise (a log, CI)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, TextIO

from chaos.constants import PROGRESS_INTERVAL_S, PROGRESS_LOG_INTERVAL_S

if TYPE_CHECKING:
    from chaos.nemesis import Nemesis
    from chaos.workload import Counters


class Progress:
    def __init__(self, stream: TextIO | None, name: str, duration_s: float,
                 counters: Counters, nemesis: Nemesis) -> None:
        self.stream = stream
        self.name = name
        self.duration_s = duration_s
        self.counters = counters
        self.nemesis = nemesis
        self.tty = bool(stream is not None and stream.isatty())
        self._interval = PROGRESS_INTERVAL_S if self.tty else PROGRESS_LOG_INTERVAL_S
        self._last = 0.0
        self._width = 0

    def line(self, elapsed: float, draining: bool = False) -> str:
        c = self.counters
        with c.lock:
            ok, failed, consumed = c.sent_ok, c.sent_failed, c.consumed
            missing = len(c.acked.keys() - c.delivered)
        faults = ", ".join(f"{f} {n}" for f, n in self.nemesis.open) or "none"
        phase = "draining" if draining else f"{elapsed:5.1f}/{self.duration_s:.0f}s"
        return (f"{self.name} {phase}  sent ok {ok} failed/unknown {failed}  consumed "
                f"{consumed}  waiting {missing}  faults: {faults}")

    def tick(self, elapsed: float, draining: bool = False) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        if now - self._last < self._interval:
            return
        self._last = now
        self._write(self.line(elapsed, draining))

    def _write(self, text: str) -> None:
        assert self.stream is not None
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def say(self, text: str) -> None:
        """A line of its own (an event worth keeping on screen)."""
        if self.stream is None:
            return
        if self.tty and self._width:
            self.stream.write("\n")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.stream is not None and self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
