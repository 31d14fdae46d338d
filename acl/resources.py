"""What each gRPC method of the broker needs: the resources and permissions (RocketMQ's
PlainAccessResource.parse, for this project's services). Pure; the client computes the same
to sign a request's identifying fields, the broker to check them.

A method not listed here needs an admin account (safe default for a new RPC)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from acl.config import Perm
from acl.decision import GROUP, TOPIC, Need, Requirement

MESSAGING = "/mqcluster.v1.MessagingService/"
ADMIN = "/mqcluster.v1.AdminService/"
NAMESRV = "/mqcluster.v1.NamesrvService/"

AUTH_ONLY = Requirement()
ADMIN_ONLY = Requirement(admin=True)


def _topic(name: str, perm: Perm) -> Need:
    return Need(TOPIC, name, perm)


def _group(name: str) -> Need:
    return Need(GROUP, name, Perm.SUB)


def _send(r: Any) -> Requirement:
    return Requirement((_topic(r.message.topic, Perm.PUB),))


def _send_batch(r: Any) -> Requirement:
    return Requirement((_topic(r.topic, Perm.PUB),))


def _group_topic(r: Any) -> Requirement:
    return Requirement((_group(r.consumer_group), _topic(r.topic, Perm.SUB)))


def _topic_sub(r: Any) -> Requirement:
    return Requirement((_topic(r.topic, Perm.SUB),))


def _group_only(r: Any) -> Requirement:
    return Requirement((_group(r.consumer_group),) if r.consumer_group else ())


def _heartbeat(r: Any) -> Requirement:
    needs = [_topic(s.topic, Perm.SUB) for s in r.subscriptions]
    if r.consumer_group:
        needs.append(_group(r.consumer_group))
    return Requirement(tuple(needs))


def _lock(r: Any) -> Requirement:
    topics = {mq.topic for mq in r.mq_set}
    return Requirement((_group(r.consumer_group),
                        *(_topic(t, Perm.SUB) for t in sorted(topics))))


def _send_back(r: Any) -> Requirement:
    return Requirement((_group(r.consumer_group),))


def _auth_only(_: Any) -> Requirement:
    return AUTH_ONLY


MESSAGING_NEEDS: dict[str, Callable[[Any], Requirement]] = {
    "SendMessage": _send,
    "SendBatch": _send_batch,
    "GetSendChannel": _auth_only,
    "PullMessage": _group_topic,
    "QueryMessageById": lambda _: ADMIN_ONLY,  # the topic is known only once found
    "QueryMessageByKey": _topic_sub,
    "SearchOffsetByTimestamp": _topic_sub,
    "GetMinOffset": _topic_sub,
    "GetMaxOffset": _topic_sub,
    "UpdateConsumerOffset": _group_topic,
    "QueryConsumerOffset": _group_topic,
    "EndTransaction": _auth_only,  # as RocketMQ: signature only (the half names the topic)
    "Heartbeat": _heartbeat,
    "GetConsumerListByGroup": _group_only,
    "ConsumerSendMsgBack": _send_back,
    "LockBatchMQ": _lock,
    "UnlockBatchMQ": _lock,
    "SubscribeTransactionCheck": _auth_only,
    "UnregisterClient": _group_only,
    "WatchConsumerGroup": _group_only,
}

_ID_FIELDS = ("topic", "consumer_group", "producer_group", "cluster_name", "broker_name",
              "broker_addr", "broker_id")


def _admin(r: Any) -> Requirement:
    """Admin calls: the admin flag; their topic/group fields are signed too."""
    extra = "".join(f";{name}={value}" for name in _ID_FIELDS
                    if (value := getattr(r, name, None)) not in (None, "", 0))
    return Requirement(admin=True, extra=extra)


def requirement(method: str, request: Any) -> Requirement:
    """What `method` (a full gRPC method name) with `request` needs."""
    if method.startswith(MESSAGING):
        f = MESSAGING_NEEDS.get(method[len(MESSAGING):])
        if f is not None:
            return f(request)
    return _admin(request)


def signed_fields(method: str, request: Any) -> str:
    return requirement(method, request).signed_text()
