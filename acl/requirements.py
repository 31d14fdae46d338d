"""What each kind of request needs, for every protocol: one table (RocketMQ's
PlainAccessResource.parse, protocol-neutral). Pure.

A protocol maps each of its requests to a kind and reads the fields the table names from it
(acl/resources.py: our gRPC MessagingService, the send channel's frames and the v2
MessagingService). The handler must act on exactly those fields: the topic checked is the
topic stored. A new protocol's server (4.x remoting: request code -> kind, fields from the
header's extFields) does what acl/grpc_auth.ServerAuth does: after the signature,
`decide(account, requirement(kind, fields))` before the handler, and the handler's task
serves as the account (`acl.caller.serve_as`) for what it finds.

Fields:
- `topic`: the topics the request acts on (each message's, each subscription's, ...;
  none for a heartbeat without subscriptions);
- `group`: the consumer group;
- `stored topic`: the topic of a stored message the request names by its commitlog offset
  (a send-back, an EndTransaction's half, a transaction check). Only the handler knows it,
  once it has looked the message up: it checks it through acl/caller.py.

An empty name never satisfies a requirement (decision.decide): a request that names no
topic where one is needed is refused. `optional` marks the one exception, a field whose
emptiness the handler reads as "not a consumer" (a producer's heartbeat has no group).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from acl.config import Perm
from acl.decision import GROUP, TOPIC, Need, Requirement

# Field names (see the docstring).
TOPIC_FIELD = "topic"
GROUP_FIELD = "group"
STORED_TOPIC = "stored topic"
FOUND_FIELDS = frozenset({STORED_TOPIC})

Fields = Mapping[str, Collection[str]]


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    field: str
    kind: str  # TOPIC or GROUP
    perm: Perm
    optional: bool = False  # an empty value needs nothing


def _topic(perm: Perm, field: str = TOPIC_FIELD) -> Rule:
    return Rule(field, TOPIC, perm)


_GROUP = Rule(GROUP_FIELD, GROUP, Perm.SUB)
_GROUP_IF_ANY = Rule(GROUP_FIELD, GROUP, Perm.SUB, optional=True)
_PUB = Perm.PUB
_SUB = Perm.SUB

# Request kinds.
SEND = "send"  # each message's topic
SEND_BATCH = "send batch"  # the batch's one topic (its messages name it or none)
PULL = "pull"  # also a v2 receive, a v2 queue assignment
QUEUE_INFO = "queue info"  # queue offsets, search by time, query by key
CONSUMER_OFFSET = "consumer offset"  # commit / query; a v2 ack, invisible time, DLQ forward
HEARTBEAT = "heartbeat"  # a consumer's subscriptions (a producer's has no group)
GROUP_MEMBERS = "group members"  # consumer list, membership watch
CLIENT_LEAVES = "client leaves"  # unregister (a producer names no group)
QUEUE_LOCK = "queue lock"
SEND_BACK = "send back"  # a consumed message again to the group's retry / DLQ topic
END_TRANSACTION = "end transaction"
TRANSACTION_CHECKS = "transaction checks"  # the half messages of a producer group
ROUTE = "route"  # a v2 client's route look-up: either right on the topic
AUTHENTICATED = "authenticated"  # any account (the send channel's address)
ADMIN = "admin"  # an admin account (every AdminService call, query by message id)

NEEDS: dict[str, tuple[Rule, ...]] = {
    SEND: (_topic(_PUB),),
    SEND_BATCH: (_topic(_PUB),),
    PULL: (_GROUP, _topic(_SUB)),
    QUEUE_INFO: (_topic(_SUB),),
    CONSUMER_OFFSET: (_GROUP, _topic(_SUB)),
    HEARTBEAT: (_GROUP_IF_ANY, _topic(_SUB)),
    GROUP_MEMBERS: (_GROUP,),
    CLIENT_LEAVES: (_GROUP_IF_ANY,),
    QUEUE_LOCK: (_GROUP, _topic(_SUB)),
    # The message is found at a client-named commitlog offset: a right on the group alone
    # would copy any topic's message into a topic the group may read.
    SEND_BACK: (_GROUP, _topic(_SUB, STORED_TOPIC)),
    # The half is found at a client-named commitlog offset: commit it into its topic (or
    # roll it back) only with PUB there.
    END_TRANSACTION: (_topic(_PUB, STORED_TOPIC),),
    # Each check carries a half message (body included): only to a producer that may PUB
    # its topic.
    TRANSACTION_CHECKS: (_topic(_PUB, STORED_TOPIC),),
    ROUTE: (_topic(_PUB | _SUB),),
    AUTHENTICATED: (),
    ADMIN: (),
}


# The rules checked before the handler runs, and those of what it finds, by kind.
_BEFORE = {k: tuple(r for r in rules if r.field not in FOUND_FIELDS) for k, rules in NEEDS.items()}
_FOUND = {k: tuple(r for r in rules if r.field in FOUND_FIELDS) for k, rules in NEEDS.items()}


def _needs(rules: tuple[Rule, ...], fields: Fields) -> tuple[Need, ...]:
    needs: list[Need] = []
    for rule in rules:
        names = fields[rule.field]  # KeyError: the protocol's reader lacks a field
        if isinstance(names, str):
            raise TypeError(f"field {rule.field!r}: a collection of names, not a string")
        if len(names) > 1:
            names = list(dict.fromkeys(names))  # each once
        for name in names:  # an empty name is refused (decide), never skipped
            if name or not rule.optional:
                needs.append(Need(rule.kind, name, rule.perm))
    return tuple(needs)


def requirement(kind: str, fields: Fields, extra: str = "") -> Requirement:
    """What a request of `kind` needs before its handler runs, from its `fields`."""
    return Requirement(_needs(_BEFORE[kind], fields), admin=kind == ADMIN, extra=extra)


def found_requirement(kind: str, found: Fields) -> Requirement:
    """What a request of `kind` needs of what its handler found (FOUND_FIELDS)."""
    return Requirement(_needs(_FOUND[kind], found))

