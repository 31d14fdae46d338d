"""Who is using the console: a session cookie, its CSRF token and, on a cluster with ACL, the
account it acts as (its own ClusterBackend signing with that account's key).

The secret key stays in this process's memory: never in a page, a cookie or a log line.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import time

from console.backend import ClusterBackend

COOKIE = "mqconsole_session"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
IDLE_TIMEOUT_S = 8 * 3600
MAX_SESSIONS = 1000


@dataclasses.dataclass
class Session:
    token: str
    csrf: str
    backend: ClusterBackend | None = None  # None: the console's own account (no ACL)
    access_key: str = ""
    last_seen: float = dataclasses.field(default_factory=time.monotonic)


class Sessions:
    def __init__(self) -> None:
        self._by_token: dict[str, Session] = {}

    def get(self, token: str | None) -> Session | None:
        session = self._by_token.get(token or "")
        now = time.monotonic()
        if session is None or now - session.last_seen > IDLE_TIMEOUT_S:
            if session is not None:
                self.drop(session)
            return None
        session.last_seen = now
        return session

    def new(self) -> Session:
        if len(self._by_token) >= MAX_SESSIONS:  # the least recently seen goes
            self.drop(min(self._by_token.values(), key=lambda s: s.last_seen))
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32))
        self._by_token[session.token] = session
        return session

    def drop(self, session: Session) -> None:
        self._by_token.pop(session.token, None)
        if session.backend is not None:
            session.backend.close()

    def close(self) -> None:
        for session in list(self._by_token.values()):
            self.drop(session)


def csrf_ok(session: Session | None, given: str | None) -> bool:
    return session is not None and bool(given) and hmac.compare_digest(session.csrf,
                                                                       str(given))
