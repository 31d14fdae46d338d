"""A queue assigned to this consumer: messages pulled and not yet consumed (ProcessQueue).
Client loop only."""

from __future__ import annotations

import itertools

from mqclient.message import MessageExt, MessageQueue


class ProcessQueue:
    """Messages of one queue in flight, by queue offset in pull order (so the first key is
    the smallest). The offset safe to commit is the smallest in flight, or one past the
    last pulled when none is."""

    def __init__(self, mq: MessageQueue, next_offset: int) -> None:
        self.mq = mq
        self.next_offset = next_offset  # of the next pull
        self.messages: dict[int, MessageExt] = {}
        self.msg_size = 0  # bytes of the bodies in `messages` (size-based flow control)
        self.max_offset = next_offset - 1
        self.dropped = False
        # Concurrent listeners, a queue given up under its lock: calls in progress still
        # count (and fill gaps) until it is committed and unlocked.
        self.draining = False
        self.inflight = 0  # concurrent listeners: consume jobs submitted and not ended
        # The highest offset given to a concurrent listener call so far (pool threads).
        self.started_max_offset = -1
        # Orderly consumption: the broker lock of this queue and the consuming task.
        self.locked = False
        self.last_lock_time = 0.0
        self.consuming = False
        # Clustering, concurrent: read the committed offset again before consuming the
        # first messages pulled (the previous owner may commit late), and skip below it.
        self.catch_up = False
        self.skip_below = 0

    @property
    def busy(self) -> bool:
        """A listener call (or a job that may start one) on this queue has not ended."""
        return self.consuming or self.inflight > 0

    def __len__(self) -> int:
        return len(self.messages)

    def put(self, msgs: list[MessageExt]) -> None:
        for m in msgs:
            if m.queue_offset not in self.messages:
                self.msg_size += len(m.body)
            self.messages[m.queue_offset] = m
        if msgs:
            self.max_offset = max(self.max_offset, msgs[-1].queue_offset)

    def remove(self, msgs: list[MessageExt]) -> int:
        """Removes consumed messages; returns the offset now safe to commit."""
        for m in msgs:
            if self.messages.pop(m.queue_offset, None) is not None:
                self.msg_size -= len(m.body)
        return self.commit_offset()

    def clear(self) -> None:
        """Forgets every buffered message (an admin reset moved the queue's offset)."""
        self.messages.clear()
        self.msg_size = 0

    def commit_offset(self) -> int:
        if self.messages:
            return next(iter(self.messages))
        return self.max_offset + 1

    def first(self, n: int) -> list[MessageExt]:
        """Orderly: the next `n` messages in queue order."""
        return list(itertools.islice(self.messages.values(), n))
