"""Access control on the remoting port (aclEnable): RocketMQ 4.x's signature and the same
accounts and permissions as the gRPC protocol (acl/).

A 4.x client signs each request: `Signature` = base64(HMAC-SHA1(secret, the values of
every other extFields entry in key order, then the body)), with `AccessKey` among the
fields (AclClientRPCHook; the C++ client likewise, adding `OnsChannel`). The broker checks
the signature and the account's address, then `decide(account, requirement(kind,
fields))` for the request's kind, read from its header or body, and lets the handler's
task serve as the account (acl.caller.serve_as) for what it finds later (the topic of a
message sent back, of a half message). The 4.x signature has no timestamp or nonce: a
captured request can be replayed, as with Apache's broker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

from acl import caller
from acl import requirements as r
from acl.decision import Denied, decide
from acl.grpc_auth import Refusal, ServerAuth
from acl.requirements import GROUP_FIELD, TOPIC_FIELD, Fields
from broker.remoting4x.sending import v1_header
from broker.status import RequestError
from mqproto import common_pb2
from remoting import codes
from remoting.command import RemotingCommand

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"


def signature(secret: str, cmd: RemotingCommand) -> str:
    """The 4.x signature of a request (its extFields but Signature, then its body)."""
    content = "".join(cmd.ext_str(k) for k in sorted(cmd.ext_fields) if k != SIGNATURE)
    digest = hmac.new(secret.encode(), content.encode() + cmd.body, hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def _body(cmd: RemotingCommand) -> dict[str, Any]:
    try:
        obj = json.loads(cmd.body or b"{}")
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _heartbeat(cmd: RemotingCommand) -> Fields:
    consumers = [c for c in _body(cmd).get("consumerDataSet") or [] if isinstance(c, dict)]
    return {GROUP_FIELD: [str(c.get("groupName") or "") for c in consumers] or [""],
            TOPIC_FIELD: [str(s.get("topic") or "") for c in consumers
                          for s in c.get("subscriptionDataSet") or [] if isinstance(s, dict)]}


def _locks(cmd: RemotingCommand) -> Fields:
    body = _body(cmd)
    return {GROUP_FIELD: (str(body.get("consumerGroup") or ""),),
            TOPIC_FIELD: [str(mq.get("topic") or "") for mq in body.get("mqSet") or []
                          if isinstance(mq, dict)]}


def _fields(group: str = "", topic: str = "") -> Callable[[RemotingCommand], Fields]:
    def read(cmd: RemotingCommand) -> Fields:
        fields: dict[str, tuple[str, ...]] = {}
        if group:
            fields[GROUP_FIELD] = (cmd.ext_str(group),)
        if topic:
            fields[TOPIC_FIELD] = (cmd.ext_str(topic),)
        return fields
    return read


def _send(cmd: RemotingCommand) -> Fields:
    return {TOPIC_FIELD: (v1_header(cmd).ext_str("topic"),)}


# Request code -> (kind, the fields the handler acts on), as acl/resources.py does for gRPC.
NEEDS: dict[int, tuple[str, Callable[[RemotingCommand], Fields]]] = {
    codes.SEND_MESSAGE: (r.SEND, _send),
    codes.SEND_MESSAGE_V2: (r.SEND, _send),
    codes.SEND_BATCH_MESSAGE: (r.SEND_BATCH, _send),
    codes.PULL_MESSAGE: (r.PULL, _fields("consumerGroup", "topic")),
    codes.QUERY_CONSUMER_OFFSET: (r.CONSUMER_OFFSET, _fields("consumerGroup", "topic")),
    codes.UPDATE_CONSUMER_OFFSET: (r.CONSUMER_OFFSET, _fields("consumerGroup", "topic")),
    codes.GET_MAX_OFFSET: (r.QUEUE_INFO, _fields(topic="topic")),
    codes.GET_MIN_OFFSET: (r.QUEUE_INFO, _fields(topic="topic")),
    codes.SEARCH_OFFSET_BY_TIMESTAMP: (r.QUEUE_INFO, _fields(topic="topic")),
    codes.GET_EARLIEST_MSG_STORETIME: (r.QUEUE_INFO, _fields(topic="topic")),
    codes.HEART_BEAT: (r.HEARTBEAT, _heartbeat),
    codes.UNREGISTER_CLIENT: (r.CLIENT_LEAVES, _fields("consumerGroup")),
    codes.GET_CONSUMER_LIST_BY_GROUP: (r.GROUP_MEMBERS, _fields("consumerGroup")),
    codes.CONSUMER_SEND_MSG_BACK: (r.SEND_BACK, _fields("group")),  # + the message's topic
    codes.END_TRANSACTION: (r.END_TRANSACTION, lambda _: {}),  # the half's topic, once found
    codes.QUERY_MESSAGE: (r.QUEUE_INFO, _fields(topic="topic")),
    codes.VIEW_MESSAGE_BY_ID: (r.ADMIN, lambda _: {}),  # the topic is known only once found
    codes.GET_BROKER_RUNTIME_INFO: (r.ADMIN, lambda _: {}),
    codes.GET_TOPIC_STATS_INFO: (r.ADMIN, lambda _: {}),
    codes.GET_CONSUME_STATS: (r.ADMIN, lambda _: {}),
    codes.GET_CONSUMER_CONNECTION_LIST: (r.ADMIN, lambda _: {}),
    codes.GET_CONSUMER_RUNNING_INFO: (r.ADMIN, lambda _: {}),
    codes.LOCK_BATCH_MQ: (r.QUEUE_LOCK, _locks),
    codes.UNLOCK_BATCH_MQ: (r.QUEUE_LOCK, _locks),
}


class RemotingAcl:
    def __init__(self, auth: ServerAuth) -> None:
        self.auth = auth

    def check(self, cmd: RemotingCommand, host: str) -> None:
        """Lets the current task serve the request's account, or raises RequestError
        (NO_PERMISSION) saying why it may not run."""
        need = NEEDS.get(cmd.code)
        if need is None:
            return  # answered REQUEST_CODE_NOT_SUPPORTED, touching nothing
        access_key = cmd.ext_str(ACCESS_KEY)
        if not access_key:
            raise RequestError(common_pb2.NO_PERMISSION,
                               "access control is on: the request carries no AccessKey (give "
                               "the client session credentials)")
        try:
            secret, account = self.auth.account_for(access_key, host)
        except Refusal as e:
            raise RequestError(common_pb2.NO_PERMISSION, str(e)) from None
        if not hmac.compare_digest(signature(secret, cmd), cmd.ext_str(SIGNATURE)):
            raise RequestError(common_pb2.NO_PERMISSION,
                               f"signature of {access_key} does not match the request")
        kind, read = need
        if account is not None:
            try:
                decide(account, r.requirement(kind, read(cmd)))
            except Denied as e:
                raise RequestError(common_pb2.NO_PERMISSION,
                                   f"{e} for request code {cmd.code}") from None
        caller.serve_as(self.auth.caller_of(account))
