"""The history of a run: one JSON object per line, written while the run goes on and read
back by the checkers (`mqchaos check HISTORY` reads a kept file again).

Each entry (Jepsen's operation model, OpenMessaging Chaos's history file):

    {"index": 41, "time": 12.503121, "process": "producer-2", "type": "ok", "f": "send",
     "value": {"id": "k05#17", "key": "k05", "seq": 17, ...}, "latency": 0.0042}

- `time`: seconds since the run started (monotonic clock); the run's first entry holds the
  wall-clock start (`value.wall_time`).
- `type`: `invoke` (an operation begins), `ok` (it did what was asked), `fail` (it certainly
  did not), `info` (unknown outcome: a timeout, a broken connection; or an event that is not
  an operation: run, fault and probe entries).
- `f`: `send`, `consume` (an `ok` only: a message a listener was given), `read` (an `ok`
  only: a message the final read found still stored on a broker, though never consumed),
  `fault` (value
  `phase` start / end of a fault window, with its `window` number), `probe` (what the
  cluster reported, e.g. replication fall-behind), `run` (start / end of the run).
- `error` on `fail` / `info` completions: the client's status (`TIMEOUT`, `SEND_FAILED`,
  `NO_ROUTE`, a broker ResponseCode name).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
TYPES = frozenset({INVOKE, OK, FAIL, INFO})
SEND, CONSUME, READ, FAULT, PROBE, RUN = "send", "consume", "read", "fault", "probe", "run"
FINAL_READ = "final-read"
START, END = "start", "end"
APPLIED = "applied"  # a fault entry's phase: the fault took effect (the node seen dead...)
NEMESIS = "nemesis"
FALL_BEHIND = "fall-behind"  # probe kind: a master's view of its slave's replication
CONSUMER_OFFSETS = "consumer-offsets"  # probe kind: a group's offsets committed on a master
AWAIT = "await"  # probe kind: an await step of the nemesis (met or not, how long it took)
RUNNER = "runner"

Entry = dict[str, Any]


class HistoryError(Exception):
    """A history file that cannot be read; the message names the line."""


def message_id(key: str, seq: int) -> str:
    """The workload's identity of a message: its key and its sequence number in that key."""
    return f"{key}#{seq}"


class HistoryWriter:
    """Appends entries from any thread, in order, each on its own line; `time` is taken
    under the lock so the file is in time order."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.monotonic,
                 flush_every_s: float = 0.5) -> None:
        self.path = path
        self._clock = clock
        self._start = clock()
        self._file: IO[str] = path.open("w", encoding="utf-8")
        self._lock = threading.Lock()
        self._index = 0
        self._flush_every_s = flush_every_s
        self._last_flush = self._start

    def now(self) -> float:
        return self._clock() - self._start

    def append(self, process: str, type_: str, f: str, value: dict[str, Any] | None = None,
               **extra: Any) -> Entry:
        if type_ not in TYPES:
            raise ValueError(f"unknown entry type {type_!r}")
        with self._lock:
            now = self._clock()
            entry: Entry = {"index": self._index, "time": round(now - self._start, 6),
                            "process": process, "type": type_, "f": f,
                            "value": value if value is not None else {}}
            entry.update({k: v for k, v in extra.items() if v is not None})
            self._index += 1
            self._file.write(json.dumps(entry, separators=(",", ":")) + "\n")
            if now - self._last_flush >= self._flush_every_s:
                self._file.flush()
                self._last_flush = now
        return entry

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_lines(lines: Iterable[str], source: str = "history") -> Iterator[Entry]:
    """Entries of JSON lines; a blank line is skipped, a broken last line (a run killed
    while writing) is dropped, anything else broken is a HistoryError."""
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, 1):
        if pending is not None:
            raise HistoryError(f"{source} line {pending[0]}: {pending[1]}")
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as e:
            pending = (number, f"not JSON ({e})")
            continue
        problem = _problem(entry)
        if problem:
            raise HistoryError(f"{source} line {number}: {problem}")
        yield entry


def _problem(entry: Any) -> str:
    if not isinstance(entry, dict):
        return "not a JSON object"
    for key, kind in (("time", (int, float)), ("process", str), ("type", str), ("f", str)):
        if not isinstance(entry.get(key), kind):
            return f"no valid {key!r}"
    if entry["type"] not in TYPES:
        return f"unknown type {entry['type']!r}"
    if not isinstance(entry.get("value", {}), dict):
        return "'value' is not an object"
    return ""


def read_history(path: Path) -> list[Entry]:
    with path.open(encoding="utf-8") as f:
        entries = list(parse_lines(f, str(path)))
    for entry in entries:
        entry.setdefault("value", {})
    return entries
