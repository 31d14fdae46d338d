"""Access control end to end through a broker with aclEnable: signed requests allowed or
refused by the account's permissions, bad credentials refused, nothing applied when
refused, and the account file reloaded while the broker runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from acl.grpc_auth import ClientAuth
from acl.signing import ACCESS_KEY_MD, NONCE_MD, SIGNATURE_MD, TIMESTAMP_MD, credentials
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc
from tests.acl.conftest import ACCOUNTS, CLUSTER_KEY, write_accounts
from tests.support.brokers import RPC_TIMEOUT_S, BrokerThread

M = messaging_pb2
KEYS = {a["accessKey"]: a["secretKey"] for a in ACCOUNTS["accounts"]}


class Client:
    def __init__(self, address: str, access_key: str | None) -> None:
        self.raw = grpc.insecure_channel(address)
        channel = (ClientAuth(access_key, KEYS.get(access_key, "x" * 8)).intercept(self.raw)
                   if access_key else self.raw)
        self.messaging = messaging_pb2_grpc.MessagingServiceStub(channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)

    def close(self) -> None:
        self.raw.close()


def send(c: Client, topic: str) -> object:
    return c.messaging.SendMessage(M.SendMessageRequest(
        producer_group="PG", message=M.Message(topic=topic, body=b"x"), queue_id=0),
        timeout=RPC_TIMEOUT_S)


def pull(c: Client, topic: str, group: str) -> object:
    return c.messaging.PullMessage(M.PullMessageRequest(
        consumer_group=group, topic=topic, queue_id=0, queue_offset=0, max_msg_nums=8,
        subscription="*"), timeout=RPC_TIMEOUT_S)


def commit(c: Client, topic: str, group: str) -> object:
    return c.messaging.UpdateConsumerOffset(M.UpdateConsumerOffsetRequest(
        consumer_group=group, topic=topic, queue_id=0, commit_offset=1),
        timeout=RPC_TIMEOUT_S)


def create(c: Client, topic: str) -> object:
    return c.admin.CreateOrUpdateTopic(admin_pb2.CreateOrUpdateTopicRequest(
        topic_config=common_pb2.TopicConfig(topic_name=topic, read_queue_nums=1,
                                            write_queue_nums=1, perm=6)),
        timeout=RPC_TIMEOUT_S)


def code_of(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as e:
        return e.code(), e.details() or ""  # type: ignore[attr-defined]
    return grpc.StatusCode.OK, ""


# (account, operation, topic, group, allowed)
TABLE = [
    ("producer", "send", "orders", "", True),
    ("producer", "send", "both", "", True),
    ("producer", "send", "secret", "", False),
    ("producer", "send", "other", "", False),
    ("producer", "pull", "orders", "billing", False),
    ("producer", "admin", "newtopic", "", False),
    ("consumer", "send", "orders", "", False),
    ("consumer", "send", "both", "", True),
    ("consumer", "pull", "orders", "billing", True),
    ("consumer", "pull", "orders", "other", False),
    ("consumer", "pull", "secret", "billing", False),
    ("consumer", "commit", "orders", "billing", True),
    ("consumer", "commit", "orders", "other", False),
    ("consumer", "admin", "newtopic", "", False),
    ("admin", "admin", "newtopic", "", True),
    ("admin", "send", "orders", "", True),
]


def test_permission_table_through_a_broker(acl_broker: Callable[..., BrokerThread]) -> None:
    broker = acl_broker()
    admin = Client(broker.address, "admin")
    clients = {k: Client(broker.address, k) for k in ("producer", "consumer")}
    clients["admin"] = admin
    try:
        for t in ("orders", "both", "secret", "other"):
            code, why = code_of(lambda t=t: create(admin, t))
            assert code is grpc.StatusCode.OK, why
        ops = {"send": lambda c, t, g: send(c, t), "pull": pull, "commit": commit,
               "admin": lambda c, t, g: create(c, t)}
        for account, op, topic, group, allowed in TABLE:
            code, why = code_of(lambda f=ops[op], c=clients[account], t=topic, g=group:
                                f(c, t, g))
            expected = grpc.StatusCode.OK if allowed else grpc.StatusCode.PERMISSION_DENIED
            assert code is expected, (account, op, topic, group, why)
            if not allowed:
                assert f"account {account}" in why, why
        # the refused commit changed nothing
        r = admin.messaging.QueryConsumerOffset(M.QueryConsumerOffsetRequest(
            consumer_group="other", topic="orders", queue_id=0), timeout=RPC_TIMEOUT_S)
        assert r.offset in (-1, 0) or r.status.code != common_pb2.SUCCESS
    finally:
        for c in clients.values():
            c.close()


def test_bad_credentials_refused(acl_broker: Callable[..., BrokerThread]) -> None:
    broker = acl_broker()
    admin = Client(broker.address, "admin")
    anon = Client(broker.address, None)
    try:
        assert code_of(lambda: create(admin, "orders"))[0] is grpc.StatusCode.OK
        code, why = code_of(lambda: send(anon, "orders"))
        assert code is grpc.StatusCode.UNAUTHENTICATED and "no access key" in why
        stranger = Client(broker.address, "nobody")
        code, why = code_of(lambda: send(stranger, "orders"))
        stranger.close()
        assert code is grpc.StatusCode.UNAUTHENTICATED and "unknown access key" in why
        request = M.SendMessageRequest(producer_group="PG",
                                       message=M.Message(topic="orders", body=b"x"))
        method = "/mqcluster.v1.MessagingService/SendMessage"
        from acl.resources import signed_fields
        fields = signed_fields(method, request)
        # wrong secret
        md = credentials("producer", "wrong-secret", method, fields)
        code, why = code_of(lambda: anon.messaging.SendMessage(request, metadata=md,
                                                               timeout=RPC_TIMEOUT_S))
        assert code is grpc.StatusCode.UNAUTHENTICATED and "signature" in why
        # signed for another topic
        md = credentials("producer", KEYS["producer"], method, fields.replace("orders", "x"))
        assert code_of(lambda: anon.messaging.SendMessage(
            request, metadata=md, timeout=RPC_TIMEOUT_S))[0] is grpc.StatusCode.UNAUTHENTICATED
        # stale
        md = credentials("producer", KEYS["producer"], method, fields,
                         clock=lambda: int(time.time() * 1000) - 600_000)
        code, why = code_of(lambda: anon.messaging.SendMessage(request, metadata=md,
                                                               timeout=RPC_TIMEOUT_S))
        assert code is grpc.StatusCode.UNAUTHENTICATED and "stale" in why
        # replayed: the same metadata twice
        md = credentials("producer", KEYS["producer"], method, fields)
        assert code_of(lambda: anon.messaging.SendMessage(
            request, metadata=md, timeout=RPC_TIMEOUT_S))[0] is grpc.StatusCode.OK
        code, why = code_of(lambda: anon.messaging.SendMessage(request, metadata=md,
                                                               timeout=RPC_TIMEOUT_S))
        assert code is grpc.StatusCode.UNAUTHENTICATED and "replay" in why
        assert {k for k, _ in md} == {ACCESS_KEY_MD, TIMESTAMP_MD, NONCE_MD, SIGNATURE_MD}
        assert all(KEYS["producer"] not in v for _, v in md)  # the secret never travels
        # still serving
        assert code_of(lambda: send(admin, "orders"))[0] is grpc.StatusCode.OK
    finally:
        admin.close()
        anon.close()


def test_send_channel_authenticates_connections(acl_broker: Callable[..., BrokerThread]
                                                ) -> None:
    from mqclient.message import MQClientError
    from mqclient.send_channel import BlockingSendConnections
    from remoting.framing import KIND_SEND_BATCH

    broker = acl_broker()
    admin = Client(broker.address, "admin")
    try:
        assert code_of(lambda: create(admin, "orders"))[0] is grpc.StatusCode.OK
        assert code_of(lambda: create(admin, "secret"))[0] is grpc.StatusCode.OK
        r = admin.messaging.GetSendChannel(M.GetSendChannelRequest(), timeout=RPC_TIMEOUT_S)
    finally:
        admin.close()
    channel = r.address
    assert channel

    def batch(topic: str) -> bytes:
        from remoting.framing import encode_batch_message
        return M.SendBatchRequest(producer_group="PG", topic=topic, queue_id=0,
                                  encoded_messages=encode_batch_message(0, b"x", b""),
                                  born_timestamp=int(time.time() * 1000)
                                  ).SerializeToString()

    def status(conns: BlockingSendConnections, topic: str) -> M.SendBatchResponse:
        return M.SendBatchResponse.FromString(conns.request(channel, KIND_SEND_BATCH,
                                                            batch(topic), RPC_TIMEOUT_S))

    anonymous = BlockingSendConnections()
    r = status(anonymous, "orders")
    assert r.status.code == common_pb2.NO_PERMISSION and "authenticate" in r.status.remark
    anonymous.close()
    wrong = BlockingSendConnections(ClientAuth("producer", "wrong-secret"))
    with pytest.raises(MQClientError, match="NO_PERMISSION.*signature"):
        status(wrong, "orders")
    wrong.close()
    producer = BlockingSendConnections(ClientAuth("producer", KEYS["producer"]))
    try:
        assert status(producer, "orders").status.code == common_pb2.SUCCESS
        r = status(producer, "secret")
        assert r.status.code == common_pb2.NO_PERMISSION
        assert "account producer lacks PUB on topic secret" in r.status.remark
        assert status(producer, "orders").status.code == common_pb2.SUCCESS  # same link
    finally:
        producer.close()


def test_send_channel_rights_follow_the_reloaded_file(
        acl_broker: Callable[..., BrokerThread], acl_file: Path) -> None:
    """An authenticated send-channel connection is checked against the account table as
    it is now: PUB taken away, or the account removed, refuses its next batch; PUB given
    back allows it again (the connection's kept decisions follow the table)."""
    from mqclient.send_channel import BlockingSendConnections
    from remoting.framing import KIND_SEND_BATCH, KIND_SEND_BATCHES, encode_batch_message

    broker = acl_broker()
    store = broker.controller.acl
    assert store is not None
    admin = Client(broker.address, "admin")
    try:
        assert code_of(lambda: create(admin, "orders"))[0] is grpc.StatusCode.OK
        channel = admin.messaging.GetSendChannel(M.GetSendChannelRequest(),
                                                 timeout=RPC_TIMEOUT_S).address
    finally:
        admin.close()
    one = M.SendBatchRequest(producer_group="PG", topic="orders", queue_id=0,
                             encoded_messages=encode_batch_message(0, b"x", b""),
                             born_timestamp=int(time.time() * 1000))

    def codes(conns: BlockingSendConnections) -> list[tuple[int, str]]:
        r = M.SendBatchResponse.FromString(conns.request(
            channel, KIND_SEND_BATCH, one.SerializeToString(), RPC_TIMEOUT_S))
        rs = M.SendBatchesResponse.FromString(conns.request(
            channel, KIND_SEND_BATCHES,
            M.SendBatchesRequest(batches=[one, one]).SerializeToString(), RPC_TIMEOUT_S))
        return [(x.status.code, x.status.remark) for x in (r, *rs.responses)]

    def rewrite(accounts: list[dict[str, object]]) -> None:
        time.sleep(0.01)  # a different mtime
        write_accounts(acl_file, {**ACCOUNTS, "accounts": accounts})
        assert broker.call(store.check_now)

    producer = BlockingSendConnections(ClientAuth("producer", KEYS["producer"]))
    try:
        assert all(c == common_pb2.SUCCESS for c, _ in codes(producer))
        rewrite([{**a, "topicPerms": ["orders=SUB"]} if a["accessKey"] == "producer" else a
                 for a in ACCOUNTS["accounts"]])
        for c, remark in codes(producer):  # same connection, PUB gone
            assert c == common_pb2.NO_PERMISSION
            assert "account producer lacks PUB on topic orders" in remark
        rewrite(ACCOUNTS["accounts"])  # PUB given back: no refusal kept from before
        assert all(c == common_pb2.SUCCESS for c, _ in codes(producer))
        rewrite([a for a in ACCOUNTS["accounts"] if a["accessKey"] != "producer"])
        for c, remark in codes(producer):
            assert c == common_pb2.NO_PERMISSION
            assert "account producer no longer exists" in remark
    finally:
        producer.close()


def test_cluster_key_may_call_admin(acl_broker: Callable[..., BrokerThread]) -> None:
    broker = acl_broker()
    channel = grpc.insecure_channel(broker.address)
    auth = ClientAuth.cluster(CLUSTER_KEY)
    assert auth is not None
    admin = admin_pb2_grpc.AdminServiceStub(auth.intercept(channel))
    try:
        r = admin.GetTopicList(admin_pb2.GetTopicListRequest(), timeout=RPC_TIMEOUT_S)
        assert r.status.code == common_pb2.SUCCESS
    finally:
        channel.close()


def test_account_file_reloaded_while_running(acl_broker: Callable[..., BrokerThread],
                                             acl_file: Path) -> None:
    broker = acl_broker()
    store = broker.controller.acl
    assert store is not None
    admin = Client(broker.address, "admin")
    producer = Client(broker.address, "producer")
    try:
        assert code_of(lambda: create(admin, "other"))[0] is grpc.StatusCode.OK
        assert code_of(lambda: send(producer, "other"))[0] is grpc.StatusCode.PERMISSION_DENIED
        data = {**ACCOUNTS, "accounts": [
            {**a, "topicPerms": [*a.get("topicPerms", []), "other=PUB"]}
            if a["accessKey"] == "producer" else a for a in ACCOUNTS["accounts"]]}
        time.sleep(0.01)  # a different mtime
        write_accounts(acl_file, data)
        broker.call(store.check_now)  # what the poll does every 2 s
        assert code_of(lambda: send(producer, "other"))[0] is grpc.StatusCode.OK
        # a broken file keeps the accounts there were
        acl_file.write_text("{not json")
        broker.call(store.check_now)
        assert store.last_error
        assert code_of(lambda: send(producer, "other"))[0] is grpc.StatusCode.OK
    finally:
        admin.close()
        producer.close()


@pytest.mark.parametrize("poll_s", [0.2])
def test_poll_picks_up_a_change(tmp_path: Path, acl_file: Path, poll_s: float) -> None:
    import asyncio

    from acl.store import AclStore

    async def run() -> int:
        store = AclStore(acl_file, poll_interval_s=poll_s)
        store.start()
        time.sleep(0.01)
        write_accounts(acl_file, {"accounts": []})
        try:
            async with asyncio.timeout(5):
                while store.reloads == 0:
                    await asyncio.sleep(0.05)
        finally:
            await store.stop()
        return len(store.config.accounts)

    assert asyncio.run(run()) == 0
