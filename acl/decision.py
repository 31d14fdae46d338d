"""What an account may do (pure): RocketMQ's PlainPermissionManager rules.

A request needs a list of (kind, name, permission); kind "topic" or "group". A retry topic
(`%RETRY%G`) is group G's resource, as in RocketMQ. For each: the account's entry for the
name, else its default for that kind; DENY refuses, otherwise the entry must hold the
permission needed (either one, for a need of PUB|SUB). An empty name is refused: a request
that names no topic (or group) where one is needed may not do anything. A system topic
(SCHEDULE_TOPIC_XXXX, RMQ_SYS_TRANS_HALF_TOPIC, ..., rmq_sys_*) holds delayed and half
messages of every topic: a right on it would read topics the account is denied, so it needs
an admin account besides. Admin requests need the admin flag; the admin flag grants nothing
else.
"""

from __future__ import annotations

import dataclasses

from acl.config import Account, Perm
from common.constants import SYSTEM_TOPIC_PREFIX, SYSTEM_TOPICS

RETRY_PREFIX = "%RETRY%"
TOPIC = "topic"
GROUP = "group"


@dataclasses.dataclass(frozen=True, slots=True)
class Need:
    kind: str  # TOPIC or GROUP
    name: str
    perm: Perm  # PUB or SUB

    def normalized(self) -> Need:
        if self.kind == TOPIC and self.name.startswith(RETRY_PREFIX):
            return Need(GROUP, self.name[len(RETRY_PREFIX):], Perm.SUB)
        return self

    def text(self) -> str:
        return f"{self.kind} {self.name} {self.perm.label}"


@dataclasses.dataclass(frozen=True, slots=True)
class Requirement:
    needs: tuple[Need, ...] = ()
    admin: bool = False
    # Other identifying fields the signature covers (admin calls: topic, group, ...).
    extra: str = ""

    def signed_text(self) -> str:
        """The request's identifying fields as the signature covers them."""
        parts = sorted(f"{n.kind}:{n.name}:{int(n.perm)}" for n in self.needs)
        return ("admin;" if self.admin else "") + ";".join(parts) + self.extra


class Denied(Exception):
    """An account may not do what a request asks; the message names account, resource and
    permission."""


def owned(account: Account, need: Need) -> Perm:
    if need.kind == TOPIC:
        return account.topic_perms.get(need.name, account.default_topic_perm)
    return account.group_perms.get(need.name, account.default_group_perm)


def decide(account: Account, requirement: Requirement) -> None:
    """Returns when `account` may make the request; raises Denied (the first refusal)."""
    if requirement.admin and not account.admin:
        raise Denied(f"account {account.access_key} is not an admin (admin permission "
                     "needed)")
    for raw in requirement.needs:
        need = raw.normalized()
        if not need.name:
            raise Denied(f"account {account.access_key}: the request names no {need.kind} "
                         f"({need.perm.label} on a {need.kind} needed)")
        if need.kind == TOPIC and not account.admin and (
                need.name in SYSTEM_TOPICS or need.name.startswith(SYSTEM_TOPIC_PREFIX)):
            raise Denied(f"account {account.access_key} may not use topic {need.name}: a "
                         "system topic holds other topics' messages (admin accounts only)")
        have = owned(account, need)
        if have & Perm.DENY or not have & need.perm:
            raise Denied(f"account {account.access_key} lacks {need.perm.label} on "
                         f"{need.kind} {need.name} (has {have.label})")
