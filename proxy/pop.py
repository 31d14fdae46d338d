"""The SimpleConsumer's pop model over the broker's consume queues.

Per (group, topic, queue) the proxy keeps:

- `commit`: every offset below it is acked; it is also the group's consumer offset on the
  broker (consumerOffset.json), so `mqadmin consumerProgress` and the lag analytics see the
  group's lag like any other group's;
- `next`: the first offset never delivered;
- `inflight`: offset -> (delivery attempt, deadline, commitlog offset, message group) of
  the messages received and not acked;
- `acked`: offsets at or past `commit` that were acked (or skipped by the filter).

Every offset in [commit, next) is in flight or acked. A receive first hands out again the
in-flight messages whose deadline passed (attempt + 1), then new ones. A message whose
deadline passed after its last allowed attempt moves to `%DLQ%{group}`. A FIFO message
(one with a message group) is not handed out while an earlier message of its group is in
flight: the queue waits there until that one is acked or dead-lettered.

Each change is appended (one line; a request's lines in one write) to `popState.log` before
the reply: a broker killed at any point finds, after its restart, every message received and
not acked still in flight (delivered again once its deadline passed) and every ack it
answered. The log starts with a snapshot of the whole state and is rewritten (atomically)
when it grows.

A write that fails (a full disk) is cut off again, so the log holds whole records only, and the
request answers an error; the next write first rewrites the log as a snapshot of the state in
memory (which took the failed request's changes): a record missing from the middle of the log
could otherwise leave an offset neither in flight nor acked after a restart, never delivered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

QueueKey = tuple[str, str, int]  # group, topic, queue id
LOG_NAME = "popState.log"
# Records appended after the snapshot before the log is rewritten as one snapshot.
COMPACT_AFTER_RECORDS = 20_000
_encode = json.JSONEncoder(separators=(",", ":")).encode  # built once, not per record


@dataclasses.dataclass
class InFlight:
    attempt: int
    deadline_ms: int
    commit_log_offset: int
    message_group: str = ""  # a FIFO message's group: none of it is delivered meanwhile


@dataclasses.dataclass
class QueueState:
    commit: int
    next: int
    inflight: dict[int, InFlight] = dataclasses.field(default_factory=dict)
    acked: set[int] = dataclasses.field(default_factory=set)

    def advance(self) -> bool:
        """Moves `commit` past the acked offsets at its head; True when it moved."""
        moved = False
        while self.commit in self.acked:
            self.acked.discard(self.commit)
            self.commit += 1
            moved = True
        if self.commit > self.next:
            self.next = self.commit
        return moved

    def to_json(self) -> dict[str, Any]:
        return {"c": self.commit, "n": self.next,
                "i": [[o, f.attempt, f.deadline_ms, f.commit_log_offset, f.message_group]
                      for o, f in sorted(self.inflight.items())],
                "a": sorted(self.acked)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueueState:
        return cls(int(data["c"]), int(data["n"]),
                   {int(o): InFlight(int(a), int(d), int(p), str(m))
                    for o, a, d, p, m in data["i"]},
                   {int(o) for o in data["a"]})


def _mark_delivered(state: QueueState, offset: int, flight: InFlight) -> None:
    state.inflight[offset] = flight
    state.next = max(state.next, offset + 1)


def _mark_acked(state: QueueState, start: int, end: int) -> bool:
    """Offsets [start, end) acked, skipped or dead-lettered; True when `commit` moved."""
    for offset in range(start, end):
        state.inflight.pop(offset, None)
        if offset >= state.commit:
            state.acked.add(offset)
    state.next = max(state.next, end)
    return state.advance()


def _skip(state: QueueState, offset: int) -> bool:
    """Moves `state` past every offset below `offset`; True when its commit moved."""
    if offset <= state.commit:
        return False
    state.inflight = {o: f for o, f in state.inflight.items() if o >= offset}
    state.acked = {o for o in state.acked if o >= offset}
    state.commit = offset
    state.next = max(state.next, offset)
    state.advance()
    return True


class PopLogUnwritable(Exception):
    """The pop state log could not be written (`cause`: the OSError, e.g. ENOSPC)."""

    def __init__(self, path: Path, cause: OSError) -> None:
        super().__init__(f"cannot write the pop state log {path}: {cause.strerror or cause}")
        self.cause = cause


class PopStateStore:
    """The pop state of one broker and its log. `on_commit(group, topic, queue, offset)` is
    called whenever a queue's commit offset moves (the broker's consumer offset);
    `on_write_failed(error)` when a write of the log fails (the broker's disk-full report)."""

    def __init__(self, directory: Path, on_commit: Callable[[str, str, int, int], None],
                 compact_after: int = COMPACT_AFTER_RECORDS,
                 on_write_failed: Callable[[OSError], object] | None = None) -> None:
        self.path = directory / LOG_NAME
        self.on_commit = on_commit
        self.on_write_failed = on_write_failed
        self.compact_after = compact_after
        self.queues: dict[QueueKey, QueueState] = {}
        self._fd: int | None = None
        self._records = 0
        self._pending: list[bytes] | None = None  # records of the batch() under way
        self._behind = False  # a write failed: the log lacks records the memory has

    # -- persistence -----------------------------------------------------------------------
    def load(self) -> None:
        """Reads the log (snapshot + records) and opens it for appending."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            with self.path.open("r", encoding="utf-8") as f:
                for number, line in enumerate(f, start=1):
                    if not line.endswith("\n"):
                        log.warning("%s: incomplete last line %d ignored", self.path, number)
                        break
                    try:
                        self._apply(json.loads(line))
                    except (ValueError, KeyError, TypeError) as e:
                        log.error("%s: line %d unreadable (%s); the rest is ignored",
                                  self.path, number, e)
                        break
            log.info("pop state loaded: %d queues, %d messages in flight", len(self.queues),
                     sum(len(s.inflight) for s in self.queues.values()))
        self._rewrite()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _apply(self, rec: dict[str, Any]) -> None:
        kind = rec["k"]
        if kind == "snap":
            self.queues = {(g, t, int(q)): QueueState.from_json(s) for g, t, q, s in rec["q"]}
            return
        key = (rec["g"], rec["t"], int(rec["q"]))
        if kind in ("init", "reset"):  # first consumed / moved by an admin
            self.queues[key] = QueueState(int(rec["o"]), int(rec["o"]))
            return
        state = self.queues[key]
        if kind == "d":  # delivered (again): offset, attempt, deadline, commitlog offset
            _mark_delivered(state, int(rec["o"]), InFlight(
                int(rec["a"]), int(rec["d"]), int(rec["p"]), str(rec.get("m", ""))))
        elif kind == "ack":  # acked / skipped / moved to the DLQ: offsets [o, e)
            _mark_acked(state, int(rec["o"]), int(rec["e"]))
        elif kind == "inv":  # new deadline of an in-flight message
            flight = state.inflight.get(int(rec["o"]))
            if flight is not None:
                flight.deadline_ms = int(rec["d"])
        elif kind == "skip":  # everything below o is gone from the store
            _skip(state, int(rec["o"]))

    def _rewrite(self) -> None:
        """The log as one snapshot line, written aside and renamed over; the old log stays
        (and open) when the new one cannot be written."""
        snapshot = {"k": "snap", "q": [[g, t, q, s.to_json()]
                                        for (g, t, q), s in sorted(self.queues.items())]}
        tmp = self.path.with_suffix(".tmp")
        try:
            with tmp.open("w", encoding="utf-8") as f:
                f.write(_encode(snapshot) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        self.close()
        os.replace(tmp, self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._records = 0
        self._behind = False

    def _append(self, rec: dict[str, Any]) -> None:
        line = (_encode(rec) + "\n").encode()
        if self._pending is not None:
            self._pending.append(line)
        else:
            self._write([line])

    def _write(self, lines: list[bytes]) -> None:
        if self._fd is None:
            raise RuntimeError("pop state log is closed")
        try:
            if self._behind:  # the snapshot holds these lines' changes too
                self._rewrite()
                return
            self._write_whole(b"".join(lines))
        except OSError as e:
            self._behind = True
            if self.on_write_failed is not None:
                self.on_write_failed(e)
            raise PopLogUnwritable(self.path, e) from e
        self._records += len(lines)
        if self._records >= self.compact_after:
            self._rewrite()

    def _write_whole(self, data: bytes) -> None:
        """One write: a killed process leaves whole records (the page cache has them; a
        machine crash may lose the last ones, as an asynchronous flush does). A write cut
        short (no space) is cut off the file again."""
        assert self._fd is not None
        size = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, size)
            raise

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """The records of the changes made within go to the log in one write when it ends
        (a request's changes: before its reply). Nothing may await within."""
        if self._pending is not None:  # within another batch: that one writes
            yield
            return
        self._pending = []
        try:
            yield
        finally:
            lines, self._pending = self._pending, None
            if lines:
                self._write(lines)

    # -- state -----------------------------------------------------------------------------
    def state(self, group: str, topic: str, queue_id: int, start: Callable[[], int]
              ) -> QueueState:
        """The queue's state; a queue first consumed starts at `start()`."""
        key = (group, topic, queue_id)
        state = self.queues.get(key)
        if state is None:
            offset = start()
            state = self.queues[key] = QueueState(offset, offset)
            self._append({"k": "init", "g": group, "t": topic, "q": queue_id, "o": offset})
            self.on_commit(group, topic, queue_id, offset)
        return state

    def existing(self, group: str, topic: str, queue_id: int) -> QueueState | None:
        return self.queues.get((group, topic, queue_id))

    def items(self) -> Iterator[tuple[QueueKey, QueueState]]:
        return iter(list(self.queues.items()))

    def delivered(self, key: QueueKey, offset: int, flight: InFlight) -> None:
        _mark_delivered(self.queues[key], offset, flight)
        g, t, q = key
        rec = {"k": "d", "g": g, "t": t, "q": q, "o": offset, "a": flight.attempt,
               "d": flight.deadline_ms, "p": flight.commit_log_offset}
        if flight.message_group:
            rec["m"] = flight.message_group
        self._append(rec)

    def acked(self, key: QueueKey, start: int, end: int) -> None:
        """Offsets [start, end) acked, skipped or dead-lettered."""
        if end <= start:
            return
        state = self.queues[key]
        moved = _mark_acked(state, start, end)
        g, t, q = key
        self._append({"k": "ack", "g": g, "t": t, "q": q, "o": start, "e": end})
        if moved:
            self.on_commit(g, t, q, state.commit)

    def changed(self, key: QueueKey, offset: int, deadline_ms: int) -> None:
        flight = self.queues[key].inflight[offset]
        flight.deadline_ms = deadline_ms
        g, t, q = key
        self._append({"k": "inv", "g": g, "t": t, "q": q, "o": offset, "d": deadline_ms})

    def skipped(self, key: QueueKey, offset: int) -> None:
        """Everything below `offset` left the store (expired files): no longer in flight."""
        state = self.queues[key]
        if _skip(state, offset):
            g, t, q = key
            self._append({"k": "skip", "g": g, "t": t, "q": q, "o": offset})
            self.on_commit(g, t, q, state.commit)

    def reset(self, key: QueueKey, offset: int) -> None:
        """The group's offset moved elsewhere (an admin reset): in-flight messages dropped."""
        self.queues[key] = QueueState(offset, offset)
        g, t, q = key
        self._append({"k": "reset", "g": g, "t": t, "q": q, "o": offset})

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
