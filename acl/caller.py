"""The account of the request being served, for the checks its handler can make only once
it has looked something up (the `stored topic` of acl/requirements.py: the topic of the
message found at a commitlog offset the client named).

The protocol's check sets it (acl/grpc_auth.ServerAuth, in the handler's own task); the
handler checks what it found with `authorize_found`. Unset (access control off, the cluster
key, or the broker's own work: the dead-letter sweep, the schedule) nothing is restricted.
A caller kept past its request (a transaction check stream) is checked against the account
table as it is at each check: a reloaded file takes effect at once.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
from collections.abc import Callable, Mapping

from acl.config import Account
from acl.decision import Denied, decide
from acl.requirements import Fields, found_requirement

log = logging.getLogger(__name__)
MAX_LOGGED_DENIALS = 10_000  # distinct refusals logged (then the memory starts over)
_logged: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Caller:
    """An authenticated account and the account table it came from (reloaded maybe)."""

    authenticated: Account
    accounts: Callable[[], Mapping[str, Account]]

    def account(self) -> Account:
        """The account as the table has it now; Denied when it was removed or its secret
        changed since the request authenticated."""
        ak = self.authenticated.access_key
        current = self.accounts().get(ak)
        if current is None or current.secret_key != self.authenticated.secret_key:
            raise Denied(f"account {ak} was removed or its secret changed after it "
                         "authenticated")
        return current


_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "acl_caller", default=None)


def current() -> Caller | None:
    """Whose request this task serves; None: unrestricted."""
    return _caller.get()


def serve_as(caller: Caller | None) -> None:
    """The current task serves `caller`'s request (a task per request: never reset)."""
    _caller.set(caller)


def check_found(caller: Caller | None, kind: str, found: Fields) -> None:
    """Raises decision.Denied when `caller` may not act on what a request of `kind` found
    (`found`: the FOUND_FIELDS of acl/requirements.py)."""
    if caller is not None:
        decide(caller.account(), found_requirement(kind, found))


def authorize_found(kind: str, found: Fields, action: str) -> None:
    """check_found for the request being served; the Denied names `action` (the request)
    and is logged once."""
    try:
        check_found(_caller.get(), kind, found)
    except Denied as e:
        text = f"{e} for {action}"
        if text not in _logged:
            if len(_logged) >= MAX_LOGGED_DENIALS:
                _logged.clear()
            _logged.add(text)
            log.warning("%s refused: %s", action, text)
        raise Denied(text) from None
