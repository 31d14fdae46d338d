"""The nemesis: starts and heals the scenario's faults at their times, writing each fault
window's start and end (and the probes taken just before) into the history."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from chaos.cluster import ClusterError, ClusterObserver
from chaos.constants import AWAIT_POLL_S
from chaos.faults import ALWAYS_HEALED, FaultInjector, heal_fault, start_fault
from chaos.history import (
    APPLIED,
    AWAIT,
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
# what an await step can wait for, about its node
UNLISTED, LISTED, CAUGHT_UP = "unlisted", "listed", "caught-up"
CONDITIONS = frozenset({UNLISTED, LISTED, CAUGHT_UP})


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
        # node -> history time of the latest start / end of a fault on it (for awaits)
        self.started_at: dict[str, float] = {}
        self.ended_at: dict[str, float] = {}

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
            self.started_at[step.node] = self.history.now()
            self._note(APPLIED, step.fault, step.node, window, detail=detail)
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
            self.ended_at[node] = self.history.now()
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
            elif step.action == AWAIT:
                self.await_condition(step.fault, step.node, step.timeout_s, stop)
            else:
                self.heal(step.fault, step.node)

    def _met(self, condition: str, node: str) -> bool:
        group, _, broker_id = node.rpartition("-")
        if condition == CAUGHT_UP:
            return self.observer.caught_up(group)
        listed, of = self.observer.listed_by(group, int(broker_id))
        return listed == 0 if condition == UNLISTED else listed == of

    def await_condition(self, condition: str, node: str, timeout_s: float,
                        stop: threading.Event | None = None) -> bool:
        """Waits until `condition` holds for `node` (unlisted: no name server lists it;
        listed: every one does; caught-up: its group's master reports a slave in sync with
        nothing to copy), at most `timeout_s`; writes an `await` probe: whether it was met,
        how long it took, and how long after the latest fault on the node started and
        ended."""
        if condition not in CONDITIONS:
            self._error(f"unknown await condition {condition!r}")
            return False
        began = self.history.now()
        met = False
        while True:
            try:
                met = self._met(condition, node)
            except Exception as e:  # noqa: BLE001 - an answer we could not read: not met
                log.debug("await %s %s: %s", condition, node, e)
            if met or self.history.now() - began > timeout_s or (stop and stop.is_set()):
                break
            time.sleep(AWAIT_POLL_S)
        now = self.history.now()
        started, ended = self.started_at.get(node), self.ended_at.get(node)
        self.history.append(NEMESIS, INFO, PROBE, {
            "kind": AWAIT, "condition": condition, "node": node, "met": met,
            "waited_s": round(now - began, 3), "timeout_s": timeout_s,
            "since_fault_start_s": round(now - started, 3) if started is not None else None,
            "since_fault_end_s": (round(now - ended, 3) if ended is not None
                                  and (started is None or ended >= started) else None)})
        if not met:
            self._error(f"{node} not {condition} after {timeout_s:.0f} s")
        return met
