"""The gRPC methods' requirements: each method of our MessagingService (the send channel's
frames are SendBatch requests) and of the v2 MessagingService mapped to its request kind in
acl/requirements.py, with the fields the table names read from its request. Pure; the
client computes the same to sign a request's identifying fields, the broker to check them.

A method not listed here needs an admin account (safe default for a new RPC)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from acl import requirements as r
from acl.decision import Requirement
from acl.requirements import GROUP_FIELD, TOPIC_FIELD, Fields

MESSAGING = "/mqcluster.v1.MessagingService/"
ADMIN = "/mqcluster.v1.AdminService/"
NAMESRV = "/mqcluster.v1.NamesrvService/"
V2 = "/apache.rocketmq.v2.MessagingService/"

Reader = Callable[[Any], Fields]


def _none(_: Any) -> Fields:
    return {}


def _topic(q: Any) -> Fields:
    return {TOPIC_FIELD: (q.topic,)}


def _group(q: Any) -> Fields:
    return {GROUP_FIELD: (q.consumer_group,)}


def _group_topic(q: Any) -> Fields:
    return {GROUP_FIELD: (q.consumer_group,), TOPIC_FIELD: (q.topic,)}


def _queues(q: Any) -> Fields:
    return {GROUP_FIELD: (q.consumer_group,), TOPIC_FIELD: [mq.topic for mq in q.mq_set]}


# Method -> (kind, what the handler acts on). SendBatch: the batch's topic only; the handler
# stores the batch there and refuses a message naming another (broker/send.py).
MESSAGING_NEEDS: dict[str, tuple[str, Reader]] = {
    "SendMessage": (r.SEND, lambda q: {TOPIC_FIELD: (q.message.topic,)}),
    "SendBatch": (r.SEND_BATCH, _topic),
    "GetSendChannel": (r.AUTHENTICATED, _none),
    "PullMessage": (r.PULL, _group_topic),
    "QueryMessageById": (r.ADMIN, _none),  # the topic is known only once found
    "QueryMessageByKey": (r.QUEUE_INFO, _topic),
    "SearchOffsetByTimestamp": (r.QUEUE_INFO, _topic),
    "GetMinOffset": (r.QUEUE_INFO, _topic),
    "GetMaxOffset": (r.QUEUE_INFO, _topic),
    "UpdateConsumerOffset": (r.CONSUMER_OFFSET, _group_topic),
    "QueryConsumerOffset": (r.CONSUMER_OFFSET, _group_topic),
    "EndTransaction": (r.END_TRANSACTION, _none),  # PUB on the half's topic, once found
    "Heartbeat": (r.HEARTBEAT, lambda q: {GROUP_FIELD: (q.consumer_group,),
                                          TOPIC_FIELD: [s.topic for s in q.subscriptions]}),
    "GetConsumerListByGroup": (r.GROUP_MEMBERS, _group),
    "ConsumerSendMsgBack": (r.SEND_BACK, _group),  # SUB on the message's topic, once found
    "LockBatchMQ": (r.QUEUE_LOCK, _queues),
    "UnlockBatchMQ": (r.QUEUE_LOCK, _queues),
    "SubscribeTransactionCheck": (r.TRANSACTION_CHECKS, _none),  # per check, its topic
    "UnregisterClient": (r.CLIENT_LEAVES, _group),
    "WatchConsumerGroup": (r.GROUP_MEMBERS, _group),
}


def _v2_group(q: Any) -> Fields:
    return {GROUP_FIELD: (q.group.name,)}


def _v2_group_topic(q: Any) -> Fields:
    return {GROUP_FIELD: (q.group.name,), TOPIC_FIELD: (q.topic.name,)}


def _v2_group_queue(q: Any) -> Fields:
    return {GROUP_FIELD: (q.group.name,), TOPIC_FIELD: (q.message_queue.topic.name,)}


# apache.rocketmq.v2 (proxy/service.py). The endpoint does not serve with aclEnable yet;
# its checks are these. A receipt handle names a message the proxy delivered to the
# (group, topic) of the request (proxy/pop.py): that pair is what ack, invisible time and
# DLQ forwarding act on. Telemetry streams commands and is checked per command (a
# producer's settings: PUB on its topics; a consumer's: as a heartbeat), not here.
V2_NEEDS: dict[str, tuple[str, Reader]] = {
    "QueryRoute": (r.ROUTE, lambda q: {TOPIC_FIELD: (q.topic.name,)}),
    "Heartbeat": (r.HEARTBEAT, lambda q: {GROUP_FIELD: (q.group.name,), TOPIC_FIELD: ()}),
    "SendMessage": (r.SEND, lambda q: {TOPIC_FIELD: [m.topic.name for m in q.messages]}),
    "QueryAssignment": (r.PULL, _v2_group_topic),
    "ReceiveMessage": (r.PULL, _v2_group_queue),
    "AckMessage": (r.CONSUMER_OFFSET, _v2_group_topic),
    "ForwardMessageToDeadLetterQueue": (r.CONSUMER_OFFSET, _v2_group_topic),
    "ChangeInvisibleDuration": (r.CONSUMER_OFFSET, _v2_group_topic),
    "PullMessage": (r.PULL, _v2_group_queue),
    "UpdateOffset": (r.CONSUMER_OFFSET, _v2_group_queue),
    "GetOffset": (r.CONSUMER_OFFSET, _v2_group_queue),
    "QueryOffset": (r.QUEUE_INFO, lambda q: {TOPIC_FIELD: (q.message_queue.topic.name,)}),
    # The topic names the producer group; the half is found by its transaction id.
    "EndTransaction": (r.END_TRANSACTION, _none),
    "NotifyClientTermination": (r.CLIENT_LEAVES, _v2_group),
    "RecallMessage": (r.SEND, lambda q: {TOPIC_FIELD: (q.topic.name,)}),
    "SyncLiteSubscription": (r.PULL, _v2_group_topic),
}
V2_PER_COMMAND = frozenset({"Telemetry"})

_ID_FIELDS = ("topic", "consumer_group", "producer_group", "cluster_name", "broker_name",
              "broker_addr", "broker_id")


def _admin_extra(q: Any) -> str:
    """Admin calls: the admin flag; their topic/group fields are signed too."""
    return "".join(f";{name}={value}" for name in _ID_FIELDS
                   if (value := getattr(q, name, None)) not in (None, "", 0))


def request_kind(method: str, request: Any) -> tuple[str, Fields]:
    """`method`'s (a full gRPC method name) request kind and the fields it acts on."""
    for prefix, table in ((MESSAGING, MESSAGING_NEEDS), (V2, V2_NEEDS)):
        if method.startswith(prefix):
            entry = table.get(method[len(prefix):])
            if entry is not None:
                return entry[0], entry[1](request)
    return r.ADMIN, {}


def requirement(method: str, request: Any) -> Requirement:
    """What `method` with `request` needs before its handler runs."""
    kind, fields = request_kind(method, request)
    return r.requirement(kind, fields, _admin_extra(request) if kind == r.ADMIN else "")


def signed_fields(method: str, request: Any) -> str:
    return requirement(method, request).signed_text()
