"""The nemesis: starts and heals the scenario's faults at their times, writing each fault
window's start and end (and the probes taken just before) into the history."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from chaos.cluster import ClusterError, ClusterObserver
from chaos.faults import ALWAYS_HEALED, FaultInjector, heal_fault, start_fault
from chaos.history import (
    END,
    FALL_BEHIND,
    FAULT,
    INFO,
    NEMESIS,
    PROBE,
    START,
    HistoryWriter,
)
from chaos.scenarios import Step
from mqclient.admin import AdminError

log = logging.getLogger(__name__)
ENDS_A_PAUSE = frozenset({"kill", "stop"})


class Nemesis:
    def __init__(self, injector: FaultInjector, observer: ClusterObserver,
                 history: HistoryWriter) -> None:
        self.injector = injector
        self.observer = observer
        self.history = history
        self.open: dict[tuple[str, str], int] = {}  # (fault, node) -> window
        self._windows = 0
        self._lock = threading.Lock()
        self.errors: list[str] = []

    def _note(self, phase: str, fault: str, node: str, window: int, **extra: Any) -> None:
        self.history.append(NEMESIS, INFO, FAULT, {"phase": phase, "fault": fault,
                                                   "node": node, "window": window, **extra})

    def _error(self, text: str) -> None:
        log.error("%s", text)
        self.errors.append(text)

    def start(self, step: Step) -> None:
        with self._lock:
            if (step.fault, step.node) in self.open:
                self._error(f"{step.fault} {step.node} is already active")
                return
            self._windows += 1
            window = self._windows
            if step.probe_fall_behind:
                self.probe_fall_behind(step.probe_fall_behind, before_window=window)
            self._note(START, step.fault, step.node, window)
            try:
                detail = start_fault(self.injector, step.fault, step.node)
            except Exception as e:  # noqa: BLE001 - FaultError, or an OS / API error
                self._error(f"{step.fault} {step.node} failed: {e}")
                self._note(END, step.fault, step.node, window, error=str(e))
                return
            self.open[(step.fault, step.node)] = window
            self._note("applied", step.fault, step.node, window, detail=detail)
            if step.fault in ENDS_A_PAUSE:  # the frozen process is gone: its pause is over
                paused = self.open.pop(("pause", step.node), None)
                if paused is not None:
                    self._note(END, "pause", step.node, paused, ended_by=step.fault)

    def heal(self, fault: str, node: str) -> None:
        with self._lock:
            window = self.open.get((fault, node))
            if window is None:
                self._error(f"{fault} {node} is not active: nothing to heal")
                return
            self._note("healing", fault, node, window)
            try:
                detail = heal_fault(self.injector, fault, node)
            except Exception as e:  # noqa: BLE001 - FaultError, or an OS / API error
                self._error(f"healing {fault} {node} failed: {e}")
                self._note("heal-failed", fault, node, window, error=str(e))
                return
            del self.open[(fault, node)]
            self._note(END, fault, node, window, detail=detail)

    def heal_all(self, *, everything: bool) -> None:
        """Heals the open faults: all of them, or only those that freeze or cut off a node
        (a killed node may stay dead: what it held is then measured as lost)."""
        for fault, node in list(self.open):
            if everything or fault in ALWAYS_HEALED:
                self.heal(fault, node)

    def probe_fall_behind(self, group: str, before_window: int | None = None) -> None:
        try:
            value = self.observer.fall_behind(group)
        except (ClusterError, AdminError) as e:
            self.history.append(NEMESIS, INFO, PROBE, {"kind": FALL_BEHIND, "group": group,
                                                      "before_window": before_window},
                                error=str(e))
            return
        self.history.append(NEMESIS, INFO, PROBE, {"kind": FALL_BEHIND, **value,
                                                  "before_window": before_window})

    def run_steps(self, steps: Sequence[Step], phase_start: float, duration_s: float,
                  stop: threading.Event) -> None:
        """Runs each step at its time (relative to the history's clock); returns early
        when `stop` is set (the steps left are skipped)."""
        for step in sorted(steps, key=lambda s: s.at):
            due = phase_start + step.at * duration_s
            if stop.wait(max(0.0, due - self.history.now())):
                return
            if step.action == START:
                self.start(step)
            else:
                self.heal(step.fault, step.node)
