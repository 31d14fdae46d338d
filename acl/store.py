"""The account file, reloaded when it changes (mtime and size polled every few seconds):
no restart. A file that turns bad keeps the accounts there were (one error line per
change); a good one replaces them at once."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from acl.config import AclConfig, AclConfigError, load_acl_file

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 2.0


class AclStore:
    def __init__(self, path: str | os.PathLike[str],
                 poll_interval_s: float = DEFAULT_POLL_INTERVAL_S) -> None:
        self.path = Path(path)
        self.poll_interval_s = poll_interval_s
        self._stamp = self._file_stamp()
        self.config: AclConfig = load_acl_file(self.path)  # AclConfigError: start fails
        self.reloads = 0
        self.last_error = ""
        self._task: asyncio.Task[None] | None = None

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def check_now(self) -> bool:
        """Reloads when the file changed; True when new accounts took effect."""
        stamp = self._file_stamp()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            config = load_acl_file(self.path)
        except AclConfigError as e:
            self.last_error = str(e)
            log.error("ACL file changed but cannot be used, keeping the previous accounts: "
                      "%s", e)
            return False
        self.config = config
        self.last_error = ""
        self.reloads += 1
        log.info("ACL file %s reloaded: %d accounts", self.path, len(config.accounts))
        return True

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._poll(),
                                                                name="aclFileWatch")

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                # a stat and (rarely) a small read: off the loop all the same
                await asyncio.wait_for(asyncio.to_thread(self.check_now),
                                       timeout=max(5.0, self.poll_interval_s))
            except TimeoutError:
                log.warning("reading the ACL file %s took over 5 s; retrying later",
                            self.path)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=5.0)
