"""The store's disk-full state (SPEC §2.7): no space for a file the store (or the broker
around it) writes stops writes, never the process.

A write through a mapping into a page the file system cannot back is a SIGBUS, not an error,
so every mapped file is allocated (posix_fallocate) before it is mapped and written: a full
disk then shows as ENOSPC from the allocation, or from a pwrite. Reported here, it makes the
store refuse puts with SERVICE_NOT_AVAILABLE, the answer of its disk-usage guard (RocketMQ's
too), while reads, pulls and consumers go on: one log line when it begins, one when it ends.
Meanwhile the clean service checks the free space every second; once the space that was
missing (and some headroom) is free and every file that could not be made is made, writes
resume.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# Free bytes wanted on top of the allocation that failed before writes resume: room for the
# consume-queue pages, index entries and config files that come with the next puts.
RESUME_HEADROOM = 1 << 20
CHECK_INTERVAL_S = 1.0  # how often the clean service looks for space while the disk is full


def is_disk_full(err: BaseException) -> bool:
    """ENOSPC, or EDQUOT (a quota is a full disk to this process)."""
    return isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS


def free_bytes(path: str) -> int:
    """Bytes this process may still allocate on the file system holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class DiskFull:
    """The disk-full state of one store; `on_change(reason or None)` when it begins / ends.

    `report` is called from any thread (appender, dispatch, flush, the broker's config
    writers); `check` from the clean service."""

    def __init__(self, path: str, on_change: Callable[[str | None], None],
                 free: Callable[[str], int] = free_bytes) -> None:
        self.path = path
        self._on_change = on_change
        self._free = free
        self._lock = threading.Lock()
        self.reason = ""  # why writes stop; "" while there is space
        self.needed = 0  # bytes of the largest allocation that failed meanwhile
        self.failures = 0  # reports since the one that began the state
        # Run (in order) before writes resume: each makes what could not be made for lack of
        # space (the abort file, held index keys, ...) and raises OSError while it cannot.
        self.resume_steps: list[Callable[[], None]] = []
        self._step_error = ""  # the last other error of a resume step (logged once)

    @property
    def active(self) -> bool:
        return bool(self.reason)

    def report(self, err: BaseException, what: str, needed: int = 0) -> bool:
        """Takes `err` when it says the disk is full (True); False for any other error,
        which the caller handles as before. `what` names what could not be written,
        `needed` how many bytes it asked for (0: a small write)."""
        if not is_disk_full(err):
            return False
        assert isinstance(err, OSError)
        with self._lock:  # held while telling the store: a begin and an end stay in order
            self.needed = max(self.needed, needed)
            if self.reason:
                self.failures += 1
                return True
            self.reason = f"disk full: {what}: {err.strerror}"
            self.failures = 0
            log.error("%s. The store refuses writes (SERVICE_NOT_AVAILABLE) and goes on "
                      "serving reads; writes resume once %d MiB are free on %s", self.reason,
                      -(-(self.needed + RESUME_HEADROOM) // (1 << 20)), self.path)
            self._on_change(self.reason)
        return True

    def check(self) -> bool:
        """While the disk is full: lets writes in again when space came back (True then)."""
        if not self.reason:
            return False
        seen = self.failures
        free = self._free(self.path)
        if free < self.needed + RESUME_HEADROOM:
            return False
        for step in self.resume_steps:
            try:
                step()
            except OSError as e:
                if not is_disk_full(e) and str(e) != self._step_error:
                    log.error("writes cannot resume yet: %s", e)
                    self._step_error = str(e)
                return False
        with self._lock:
            if self.failures != seen:  # another write failed meanwhile: look again later
                return False
            log.info("disk space is back (%d MiB free on %s): the store accepts writes again%s",
                     free >> 20, self.path,
                     f" ({self.failures} more file writes had failed for lack of space "
                     "meanwhile)" if self.failures else "")
            self._step_error = ""
            self.reason = ""
            self.needed = 0
            self.failures = 0
            self._on_change(None)
        return True
