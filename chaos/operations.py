"""Operations and fault windows made out of a history's entries (history.py): the shapes the
checkers work on. Pure functions, no I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from chaos.history import CONSUME, END, FAULT, INVOKE, OK, PROBE, READ, RUN, SEND, Entry

SEND_OK = "SEND_OK"


@dataclasses.dataclass(frozen=True)
class Operation:
    """One operation: its invocation and its completion (`type` None when it never
    completed: the run ended or crashed first)."""

    process: str
    f: str
    invoke_time: float
    complete_time: float | None
    type: str | None  # OK, FAIL, INFO or None
    value: dict[str, Any]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.type == OK

    @property
    def failed(self) -> bool:
        """Failed or unknown: anything but ok (an operation that never completed too)."""
        return self.type != OK

    @property
    def latency(self) -> float | None:
        return None if self.complete_time is None else self.complete_time - self.invoke_time

    @property
    def id(self) -> str:
        return str(self.value.get("id", ""))

    @property
    def acknowledged(self) -> bool:
        """A send the broker answered SEND_OK (stored with the durability asked for)."""
        return self.type == OK and self.value.get("status", SEND_OK) == SEND_OK


@dataclasses.dataclass(frozen=True)
class FaultWindow:
    window: int
    fault: str  # kill, pause, stop, disconnect, ...
    node: str
    start: float
    end: float | None  # None: never healed within the history
    start_value: dict[str, Any]
    end_value: dict[str, Any]

    def until(self, history_end: float) -> float:
        return self.end if self.end is not None else history_end

    def covers(self, t0: float, t1: float, history_end: float) -> bool:
        """The interval [t0, t1] meets the window."""
        return t0 <= self.until(history_end) and t1 >= self.start

    @property
    def name(self) -> str:
        return f"{self.fault} {self.node}"


def ordered_entries(entries: Iterable[Entry]) -> list[Entry]:
    """In time order (ties by index), as written; hand-written histories may omit index."""
    return sorted(entries, key=lambda e: (e["time"], e.get("index", 0)))


def operations(entries: Sequence[Entry], f: str) -> list[Operation]:
    """The operations of kind `f`, paired invoke -> completion per process (a process runs
    one operation at a time, as in Jepsen). A `consume` is an `ok` without an invoke."""
    pending: dict[str, Entry] = {}
    out: list[Operation] = []
    for e in entries:
        if e["f"] != f:
            continue
        process, kind = e["process"], e["type"]
        if kind == INVOKE:
            if process in pending:  # the previous one never completed
                out.append(_op(pending.pop(process), None))
            pending[process] = e
        elif process in pending:
            out.append(_op(pending.pop(process), e))
        else:  # a completion alone (e.g. consume): invoked when it completed
            latency = e.get("latency")
            start = e["time"] - latency if isinstance(latency, (int, float)) else e["time"]
            out.append(Operation(process, f, start, e["time"], kind, dict(e.get("value", {})),
                                 e.get("error")))
    out.extend(_op(invoke, None) for invoke in pending.values())
    out.sort(key=lambda op: (op.complete_time if op.complete_time is not None
                             else float("inf"), op.invoke_time))
    return out


def _op(invoke: Entry, completion: Entry | None) -> Operation:
    value = dict(invoke.get("value", {}))
    if completion is None:
        return Operation(invoke["process"], invoke["f"], invoke["time"], None, None, value)
    value.update(completion.get("value", {}))
    return Operation(invoke["process"], invoke["f"], invoke["time"], completion["time"],
                     completion["type"], value, completion.get("error"))


def sends(entries: Sequence[Entry]) -> list[Operation]:
    return operations(entries, SEND)


def consumes(entries: Sequence[Entry]) -> list[Operation]:
    return [op for op in operations(entries, CONSUME) if op.type == OK]


def final_reads(entries: Sequence[Entry]) -> set[str]:
    """Ids of the messages the final read found stored on a broker."""
    return {str(e["value"].get("id")) for e in entries if e["f"] == READ and e["type"] == OK}


def fault_windows(entries: Sequence[Entry]) -> list[FaultWindow]:
    """Start / end entries paired by their `window` number (else by fault and node)."""
    starts: dict[Any, Entry] = {}
    windows: list[FaultWindow] = []
    for e in entries:
        if e["f"] != FAULT:
            continue
        v = e.get("value", {})
        key = v.get("window", (v.get("fault"), v.get("node")))
        if v.get("phase") == "start":
            starts[key] = e
        elif v.get("phase") == END and key in starts:
            s = starts.pop(key)
            windows.append(_window(s, e))
    windows.extend(_window(s, None) for s in starts.values())
    windows.sort(key=lambda w: w.start)
    return windows


def _window(start: Entry, end: Entry | None) -> FaultWindow:
    v = start.get("value", {})
    return FaultWindow(int(v.get("window", 0)), str(v.get("fault", "?")), str(v.get("node", "?")),
                       start["time"], end["time"] if end is not None else None, dict(v),
                       dict(end.get("value", {})) if end is not None else {})


def probes(entries: Sequence[Entry], kind: str) -> list[Entry]:
    return [e for e in entries if e["f"] == PROBE and e.get("value", {}).get("kind") == kind]


def run_info(entries: Sequence[Entry]) -> dict[str, Any]:
    """The value of the run's start entry ({} when the history has none)."""
    for e in entries:
        if e["f"] == RUN and e.get("value", {}).get("phase") == "start":
            return dict(e["value"])
    return {}


def history_end(entries: Sequence[Entry]) -> float:
    return max((e["time"] for e in entries), default=0.0)

