"""How long a slave waits between attempts to link to its master.

A master that is down (its port refuses the connection, or the connect times out) is tried
again soon: a short first wait, doubling up to a cap of a few hundred milliseconds, so that
a restarted master has its slave back within that much of listening again. A master that
accepts the connection and drops it before any data (it refuses this slave: a cluster key or
a commitlog that does not match) is up, and retrying fast would only fill both logs: those
waits grow to the longer cap. Each wait is drawn from [wait/2, wait] so that the slaves of a
master that went away together do not come back in step. A link that worked starts over.
"""

from __future__ import annotations

import random
from collections.abc import Callable


class ReconnectBackoff:
    """Waits in seconds; `rng` returns floats in [0, 1) (injectable for tests)."""

    def __init__(self, first: float, down_cap: float, refused_cap: float,
                 rng: Callable[[], float] = random.random) -> None:
        if not 0 < first <= down_cap <= refused_cap:
            raise ValueError(f"reconnect waits must be 0 < first ({first}) <= cap while the "
                             f"master is down ({down_cap}) <= cap while it refuses the "
                             f"slave ({refused_cap})")
        self.first = first
        self.down_cap = down_cap
        self.refused_cap = refused_cap
        self.rng = rng
        self._next = first  # the wait after the next failed attempt, before jitter

    def reset(self) -> None:
        """A link worked: the next failure is retried after the first wait again."""
        self._next = self.first

    def after_failure(self, connected: bool) -> float:
        """The wait before the next attempt after one that failed; `connected`: the master
        accepted the connection (and dropped it before any data)."""
        cap = self.refused_cap if connected else self.down_cap
        wait = min(self._next, cap)
        self._next = min(wait * 2, cap)
        return wait * (0.5 + 0.5 * self.rng())
