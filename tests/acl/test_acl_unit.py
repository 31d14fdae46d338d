"""The pure parts: the account file, the decision (every permission x operation), the
signature, freshness and the replay cache."""

from __future__ import annotations

import itertools

import pytest

from acl.config import AclConfigError, AddressPattern, Perm, parse_acl, parse_text
from acl.decision import Denied, decide
from acl.resources import requirement, signed_fields
from acl.signing import AuthError, NonceCache, Verifier, credentials
from mqproto import admin_pb2, messaging_pb2

M = messaging_pb2
MS = "/mqcluster.v1.MessagingService/"
AD = "/mqcluster.v1.AdminService/"

YAML = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.{1,2}
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group perm of GID_test is DENY
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_rocketmq_plain_acl_yml_parses() -> None:
    config = parse_text(YAML, "plain_acl.yml")
    a = config.accounts["RocketMQ"]
    assert a.topic_perms == {"topicA": Perm.DENY, "topicB": Perm.PUB | Perm.SUB,
                             "topicC": Perm.SUB}
    assert a.group_perms["groupA"] is Perm.DENY and a.default_group_perm is Perm.SUB
    assert not a.admin and a.white_addresses == ()
    b = config.accounts["rocketmq2"]
    assert b.admin and b.secret_key == "12345678"
    assert b.white_addresses[0].matches("192.168.1.7")
    assert not b.white_addresses[0].matches("192.168.2.7")
    assert config.address_allowed("10.10.103.5") and config.address_allowed("192.168.0.2")
    assert not config.address_allowed("192.168.0.3")


@pytest.mark.parametrize("data, why", [
    ({"accounts": [{"accessKey": "a", "secretKey": "short"}]}, "secretKey"),
    ({"accounts": [{"accessKey": "", "secretKey": "12345678"}]}, "accessKey"),
    ({"accounts": [{"accessKey": "@cluster", "secretKey": "12345678"}]}, "accessKey"),
    ({"accounts": [{"accessKey": "a", "secretKey": "12345678", "topicPerms": ["t=ALL"]}]},
     "expected PUB"),
    ({"accounts": [{"accessKey": "a", "secretKey": "12345678", "topicPerms": ["t=DENY|PUB"]}]},
     "DENY"),
    ({"accounts": [{"accessKey": "a", "secretKey": "12345678", "admn": True}]}, "unknown"),
    ({"accounts": [{"accessKey": "a", "secretKey": "12345678"}] * 2}, "twice"),
    ({"globalWhiteRemoteAddresses": ["10.0.0"]}, "address"),
    ({"accounts": {}}, "list"),
])
def test_bad_files_are_refused_with_the_reason(data: object, why: str) -> None:
    with pytest.raises(AclConfigError, match=why):
        parse_acl(data)


def test_address_patterns() -> None:
    assert AddressPattern("*").matches("1.2.3.4")
    assert AddressPattern("10.0.1.1-20").matches("10.0.1.20")
    assert not AddressPattern("10.0.1.1-20").matches("10.0.1.21")
    assert AddressPattern("10.0.0.0/8").matches("10.9.9.9")
    assert AddressPattern("::1").matches("::1") and not AddressPattern("::1").matches("1.2.3.4")


PERMS = ["PUB", "SUB", "PUB|SUB", "DENY"]
# operation -> (method, request, needs topic perm, needs group SUB, needs admin)
OPERATIONS = {
    "send": (MS + "SendMessage",
             M.SendMessageRequest(producer_group="P", message=M.Message(topic="T")),
             Perm.PUB, False, False),
    "batch": (MS + "SendBatch", M.SendBatchRequest(producer_group="P", topic="T"),
              Perm.PUB, False, False),
    "pull": (MS + "PullMessage", M.PullMessageRequest(consumer_group="G", topic="T"),
             Perm.SUB, True, False),
    "commit": (MS + "UpdateConsumerOffset",
               M.UpdateConsumerOffsetRequest(consumer_group="G", topic="T"), Perm.SUB, True,
               False),
    "query_offset": (MS + "QueryConsumerOffset",
                     M.QueryConsumerOffsetRequest(consumer_group="G", topic="T"), Perm.SUB,
                     True, False),
    "max_offset": (MS + "GetMaxOffset", M.GetMaxOffsetRequest(topic="T"), Perm.SUB, False,
                   False),
    "heartbeat": (MS + "Heartbeat", M.HeartbeatRequest(
        consumer_group="G", subscriptions=[M.ConsumerSubscription(topic="T")]),
        Perm.SUB, True, False),
    "lock": (MS + "LockBatchMQ", M.LockBatchMQRequest(
        consumer_group="G", mq_set=[M.MessageQueue(topic="T")]), Perm.SUB, True, False),
    "send_back": (MS + "ConsumerSendMsgBack", M.ConsumerSendMsgBackRequest(
        consumer_group="G"), None, True, False),
    "delete_topic": (AD + "DeleteTopic", admin_pb2.DeleteTopicRequest(topic="T"), None,
                     False, True),
    "reset_offset": (AD + "ResetOffset", admin_pb2.ResetOffsetRequest(
        consumer_group="G", topic="T"), None, False, True),
}


@pytest.mark.parametrize("op, topic_perm, group_perm, admin", list(itertools.product(
    OPERATIONS, PERMS, ["SUB", "DENY"], [False, True])))
def test_every_permission_by_operation(op: str, topic_perm: str, group_perm: str,
                                       admin: bool) -> None:
    config = parse_acl({"accounts": [{
        "accessKey": "ak", "secretKey": "12345678", "admin": admin,
        "topicPerms": [f"T={topic_perm}"], "groupPerms": [f"G={group_perm}"]}]})
    method, request, topic_needs, group_needs, admin_needs = OPERATIONS[op]
    have_topic = Perm(0) if topic_perm == "DENY" else parse_acl({"accounts": [{
        "accessKey": "x", "secretKey": "12345678", "topicPerms": [f"T={topic_perm}"]}]}
    ).accounts["x"].topic_perms["T"]
    allowed = ((topic_needs is None or bool(have_topic & topic_needs))
               and (not group_needs or group_perm == "SUB")
               and (not admin_needs or admin))
    need = requirement(method, request)
    if allowed:
        decide(config.accounts["ak"], need)
    else:
        with pytest.raises(Denied, match="account ak"):
            decide(config.accounts["ak"], need)


def test_defaults_and_retry_topics() -> None:
    config = parse_acl({"accounts": [{
        "accessKey": "ak", "secretKey": "12345678", "defaultTopicPerm": "PUB",
        "defaultGroupPerm": "SUB", "groupPerms": ["blocked=DENY"]}]})
    a = config.accounts["ak"]
    decide(a, requirement(MS + "SendMessage", M.SendMessageRequest(
        message=M.Message(topic="anything"))))
    decide(a, requirement(MS + "SendMessage", M.SendMessageRequest(
        message=M.Message(topic="%RETRY%billing"))))  # a retry topic is its group's
    with pytest.raises(Denied, match="group blocked"):
        decide(a, requirement(MS + "SendMessage", M.SendMessageRequest(
            message=M.Message(topic="%RETRY%blocked"))))
    with pytest.raises(Denied, match="lacks SUB on topic anything"):
        decide(a, requirement(MS + "GetMaxOffset", M.GetMaxOffsetRequest(topic="anything")))


def test_signature_covers_the_identifying_fields() -> None:
    v = Verifier(clock=lambda: 1_000_000)
    method = MS + "SendMessage"
    fields = signed_fields(method, M.SendMessageRequest(message=M.Message(topic="T")))
    md = dict(credentials("ak", "secret-1", method, fields, clock=lambda: 1_000_000))
    args = ("ak", md["x-mq-timestamp"], md["x-mq-nonce"], md["x-mq-signature"])
    other = signed_fields(method, M.SendMessageRequest(message=M.Message(topic="U")))
    with pytest.raises(AuthError, match="mismatch"):
        v.verify("secret-1", method, *args, other)
    with pytest.raises(AuthError, match="mismatch"):
        v.verify("secret-2", method, *args, fields)
    with pytest.raises(AuthError, match="mismatch"):
        v.verify("secret-1", MS + "SendBatch", *args, fields)
    v.verify("secret-1", method, *args, fields)
    with pytest.raises(AuthError, match="replayed"):
        v.verify("secret-1", method, *args, fields)
    with pytest.raises(AuthError, match="bad timestamp"):
        v.verify("secret-1", method, "ak", "-5", "n", "s", fields)


def test_nonce_cache_is_bounded_and_stays_sound() -> None:
    cache = NonceCache(window_ms=1000, capacity=3)
    for i in range(3):
        cache.check_and_add("ak", f"n{i}", 10_000 + i, 10_000)
    cache.check_and_add("ak", "n3", 10_003, 10_003)  # evicts n0 (still in the window)
    assert len(cache) == 3
    with pytest.raises(AuthError):  # n0 evicted, but its timestamp is now below the floor
        cache.check_and_add("ak", "n0", 10_000, 10_004)
    with pytest.raises(AuthError, match="stale"):
        cache.check_and_add("ak", "n9", 8_000, 10_004)
    cache.check_and_add("ak", "late", 12_000, 12_000)  # expired entries go first
    assert len(cache) <= 3


def test_every_messaging_rpc_has_its_permissions() -> None:
    """A new MessagingService RPC must be added to acl/resources.py (else it would need
    an admin account)."""
    from acl.resources import MESSAGING_NEEDS

    service = messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert sorted(m.name for m in service.methods) == sorted(MESSAGING_NEEDS)


def test_every_v2_rpc_has_its_permissions() -> None:
    """The v2 endpoint's methods map to the same table (Telemetry: per command)."""
    from acl.resources import V2_NEEDS, V2_PER_COMMAND
    from mqproto.v2 import service_pb2

    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert sorted(m.name for m in service.methods) == sorted([*V2_NEEDS, *V2_PER_COMMAND])


def _requests() -> list[tuple[str, object]]:
    """Every mapped method with its request message, all fields empty."""
    from acl.resources import MESSAGING_NEEDS, V2, V2_NEEDS
    from mqproto.v2 import service_pb2

    out: list[tuple[str, object]] = []
    for prefix, table, descriptor in (
            (MS, MESSAGING_NEEDS, messaging_pb2.DESCRIPTOR),
            (V2, V2_NEEDS, service_pb2.DESCRIPTOR)):
        for m in descriptor.services_by_name["MessagingService"].methods:
            if m.name in table:
                module = messaging_pb2 if descriptor is messaging_pb2.DESCRIPTOR else service_pb2
                out.append((prefix + m.name, getattr(module, m.input_type.name)()))
    return out


@pytest.mark.parametrize("method, request_", _requests(), ids=lambda x: str(x)[:60])
def test_an_empty_name_never_satisfies_a_requirement(method: str, request_: object) -> None:
    """Even an account that may do anything on every topic and group: a request naming no
    topic (or group) where one is needed is refused, never let through unchecked."""
    everything = parse_acl({"accounts": [{
        "accessKey": "ak", "secretKey": "12345678", "defaultTopicPerm": "PUB|SUB",
        "defaultGroupPerm": "SUB"}]}).accounts["ak"]
    need = requirement(method, request_)
    if any(not n.name for n in need.needs):
        with pytest.raises(Denied, match="names no"):
            decide(everything, need)
    else:  # a request whose fields may all be absent: it acts on nothing named
        assert method.rpartition("/")[2] in (
            "GetSendChannel", "EndTransaction", "SubscribeTransactionCheck",
            "UnregisterClient", "Heartbeat", "NotifyClientTermination",
            "LockBatchMQ", "UnlockBatchMQ", "SendMessage", "QueryMessageById"), need
        if "QueryMessageById" not in method:
            decide(everything, need)


def test_v2_requests_need_what_v1_ones_do() -> None:
    from acl.resources import V2
    from mqproto.v2 import definition_pb2 as D
    from mqproto.v2 import service_pb2 as S

    def texts(method: str, request_: object) -> list[str]:
        return sorted(n.text() for n in requirement(method, request_).needs)

    send = S.SendMessageRequest(messages=[D.Message(topic=D.Resource(name="T")),
                                          D.Message(topic=D.Resource(name="U")),
                                          D.Message(topic=D.Resource(name="T"))])
    assert texts(V2 + "SendMessage", send) == ["topic T PUB", "topic U PUB"]
    receive = S.ReceiveMessageRequest(group=D.Resource(name="G"), message_queue=D.MessageQueue(
        topic=D.Resource(name="T")))
    assert texts(V2 + "ReceiveMessage", receive) == texts(MS + "PullMessage", M.PullMessageRequest(
        consumer_group="G", topic="T")) == ["group G SUB", "topic T SUB"]
    for name in ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue"):
        request_ = getattr(S, name + "Request")(group=D.Resource(name="G"),
                                               topic=D.Resource(name="T"))
        assert texts(V2 + name, request_) == ["group G SUB", "topic T SUB"], name
    route = requirement(V2 + "QueryRoute", S.QueryRouteRequest(topic=D.Resource(name="T")))
    pub_only = parse_acl({"accounts": [{"accessKey": "p", "secretKey": "12345678",
                                        "topicPerms": ["T=PUB"]}]}).accounts["p"]
    decide(pub_only, route)  # a route needs either right
    assert texts(V2 + "Heartbeat", S.HeartbeatRequest()) == []  # a producer's
    assert texts(V2 + "Heartbeat", S.HeartbeatRequest(group=D.Resource(name="G"))) == [
        "group G SUB"]


def test_what_a_handler_finds_is_checked_for_the_request_account() -> None:
    """The stored topic of a send-back (SUB), an EndTransaction's half (PUB) and a
    transaction check (PUB): checked against the account the request is served as, as the
    account table has it now."""
    import asyncio

    from acl import caller
    from acl.requirements import END_TRANSACTION, SEND_BACK, STORED_TOPIC, TRANSACTION_CHECKS

    table = parse_acl({"accounts": [{"accessKey": "ak", "secretKey": "12345678",
                                     "topicPerms": ["R=SUB", "W=PUB"]}]}).accounts
    who = caller.Caller(table["ak"], lambda: table)

    def found(topic: str) -> dict[str, tuple[str]]:
        return {STORED_TOPIC: (topic,)}

    caller.check_found(who, SEND_BACK, found("R"))
    caller.check_found(who, END_TRANSACTION, found("W"))
    caller.check_found(who, TRANSACTION_CHECKS, found("W"))
    for kind, topic in ((SEND_BACK, "W"), (END_TRANSACTION, "R"), (TRANSACTION_CHECKS, ""),
                        (SEND_BACK, "")):
        with pytest.raises(Denied, match="account ak"):
            caller.check_found(who, kind, found(topic))
    caller.check_found(None, SEND_BACK, found("anything"))  # unrestricted

    async def served_as(restricted: bool) -> None:
        caller.serve_as(who if restricted else None)
        await asyncio.sleep(0)  # the other task sets its own meanwhile
        caller.authorize_found(SEND_BACK, found("R"), "X")
        if restricted:
            with pytest.raises(Denied, match="for X"):
                caller.authorize_found(SEND_BACK, found("W"), "X")
        else:
            caller.authorize_found(SEND_BACK, found("W"), "X")

    async def both() -> None:  # each task serves its own request
        await asyncio.gather(served_as(True), served_as(False))

    asyncio.run(both())
    assert caller.current() is None
    changed = parse_acl({"accounts": [{"accessKey": "ak", "secretKey": "another-secret",
                                       "topicPerms": ["R=SUB"]}]}).accounts
    with pytest.raises(Denied, match="secret changed"):
        caller.Caller(table["ak"], lambda: changed).account()
    with pytest.raises(Denied, match="removed"):
        caller.Caller(table["ak"], dict).account()


def test_system_topics_need_an_admin_account() -> None:
    """A system topic holds other topics' delayed and half messages."""
    config = parse_acl({"accounts": [
        {"accessKey": "user", "secretKey": "12345678", "defaultTopicPerm": "PUB|SUB",
         "defaultGroupPerm": "SUB"},
        {"accessKey": "admin", "secretKey": "12345678", "admin": True,
         "defaultTopicPerm": "PUB|SUB", "defaultGroupPerm": "SUB"}]})
    for topic in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
                  "RMQ_SYS_TRANS_OP_HALF_TOPIC", "rmq_sys_wheel_timer"):
        need = requirement(MS + "PullMessage", M.PullMessageRequest(consumer_group="G",
                                                                    topic=topic))
        with pytest.raises(Denied, match="system topic"):
            decide(config.accounts["user"], need)
        decide(config.accounts["admin"], need)
