"""The resource a request is checked for is the resource its handler acts on, through a
broker with aclEnable: a batch is stored under the topic it was checked for (over gRPC and
the send channel's SEND_BATCH and SEND_BATCHES frames); a send-back, an EndTransaction and a
transaction check name a stored message by its commitlog offset, and the account must have
the right on that message's topic."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from acl.grpc_auth import ClientAuth
from mqclient.send_channel import BlockingSendConnections
from mqproto import common_pb2, messaging_pb2
from remoting.framing import KIND_SEND_BATCH, KIND_SEND_BATCHES, encode_batch_message
from tests.acl.conftest import KEYS
from tests.acl.test_broker_acl import Client, code_of, create
from tests.broker.conftest import RPC_TIMEOUT_S, BrokerThread, wait_until

M = messaging_pb2
TOPICS = ("orders", "both", "secret", "other")
RETRY = "%RETRY%billing"


@pytest.fixture
def broker(acl_broker: Callable[..., BrokerThread], request: pytest.FixtureRequest
           ) -> Iterator[BrokerThread]:
    b = acl_broker(**getattr(request, "param", {}))
    admin = Client(b.address, "admin")
    try:
        for topic in TOPICS:
            assert code_of(lambda t=topic: create(admin, t))[0] is grpc.StatusCode.OK
    finally:
        admin.close()
    yield b


@pytest.fixture
def clients(broker: BrokerThread) -> Iterator[dict[str, Client]]:
    opened = {k: Client(broker.address, k) for k in ("admin", "producer", "consumer")}
    yield opened
    for c in opened.values():
        c.close()


def stored(b: BrokerThread, topic: str) -> int:
    """Messages in queue 0 of `topic` (0 when the topic does not exist)."""
    if b.call(lambda: b.controller.topics.get(topic)) is None:
        return 0
    return b.call(lambda: b.controller.store.get_max_offset_in_queue(topic, 0))


def send(c: Client, topic: str, body: bytes = b"x", **sp: object) -> M.SendResultEntry:
    r = c.messaging.SendMessage(M.SendMessageRequest(
        producer_group="PG", message=M.Message(
            topic=topic, body=body, system_properties=M.SystemProperties(**sp)),
        queue_id=0), timeout=RPC_TIMEOUT_S)
    assert r.status.code == common_pb2.SUCCESS, r.status
    return r.result


# -- batches ---------------------------------------------------------------------------------
def batch_of(topic: str, message_topic: str) -> M.SendBatchRequest:
    return M.SendBatchRequest(producer_group="PG", topic=topic, queue_id=0, messages=[
        M.Message(topic=message_topic, body=b"1"), M.Message(topic=message_topic, body=b"2")])


# (account, batch topic, messages' topic): none may be stored anywhere
REFUSED_BATCHES = [
    ("consumer", "", "secret"),  # the probe: no PUB at all, an empty batch topic
    ("producer", "", "secret"),
    ("producer", "", "orders"),  # even a topic it may publish: the batch names none
    ("producer", "orders", "secret"),  # a message naming another topic than its batch
    ("producer", "orders", "other"),
]


def commitlog_end(b: BrokerThread) -> int:
    return b.call(lambda: b.controller.store.max_phy_offset)


def wait_stored(b: BrokerThread, topic: str, count: int) -> None:
    wait_until(lambda: stored(b, topic) == count, message=f"{count} messages in {topic}")


def test_grpc_batch_is_checked_for_the_topic_it_is_stored_in(
        broker: BrokerThread, clients: dict[str, Client]) -> None:
    before = commitlog_end(broker)
    for account, topic, message_topic in REFUSED_BATCHES:
        try:
            r = clients[account].messaging.SendBatch(batch_of(topic, message_topic),
                                                     timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as e:
            assert e.code() is grpc.StatusCode.PERMISSION_DENIED, e  # type: ignore[attr-defined]
            assert "names no topic" in (e.details() or "")  # type: ignore[attr-defined]
        else:
            assert r.status.code in (common_pb2.MESSAGE_ILLEGAL,
                                     common_pb2.INVALID_PARAMETER), (account, topic, r.status)
            assert "one topic" in r.status.remark and not r.results
    assert commitlog_end(broker) == before  # nothing stored anywhere
    ok = clients["producer"].messaging.SendBatch(batch_of("orders", "orders"),
                                                 timeout=RPC_TIMEOUT_S)
    assert ok.status.code == common_pb2.SUCCESS
    wait_stored(broker, "orders", 2)


def test_send_channel_batches_are_checked_for_the_topic_they_are_stored_in(
        broker: BrokerThread, clients: dict[str, Client]) -> None:
    channel = clients["admin"].messaging.GetSendChannel(M.GetSendChannelRequest(),
                                                        timeout=RPC_TIMEOUT_S).address
    encoded_without_topic = M.SendBatchRequest(
        producer_group="PG", queue_id=0, encoded_messages=encode_batch_message(0, b"e", b""),
        born_timestamp=int(time.time() * 1000))
    before = commitlog_end(broker)
    for account in ("producer", "consumer"):
        conns = BlockingSendConnections(ClientAuth(account, KEYS[account]))
        try:
            refused = [batch_of(t, m) for a, t, m in REFUSED_BATCHES if a == account]
            refused.append(encoded_without_topic)
            for request in refused:
                r = M.SendBatchResponse.FromString(conns.request(
                    channel, KIND_SEND_BATCH, request.SerializeToString(), RPC_TIMEOUT_S))
                assert r.status.code != common_pb2.SUCCESS, (account, request.topic)
                assert "topic" in r.status.remark, r.status
            rs = M.SendBatchesResponse.FromString(conns.request(
                channel, KIND_SEND_BATCHES,
                M.SendBatchesRequest(batches=refused).SerializeToString(), RPC_TIMEOUT_S))
            assert len(rs.responses) == len(refused)
            assert all(x.status.code != common_pb2.SUCCESS for x in rs.responses), rs
        finally:
            conns.close()
    assert commitlog_end(broker) == before
    producer = BlockingSendConnections(ClientAuth("producer", KEYS["producer"]))
    try:  # the refusals are per batch: a good one in the same frame is stored
        rs = M.SendBatchesResponse.FromString(producer.request(
            channel, KIND_SEND_BATCHES, M.SendBatchesRequest(batches=[
                batch_of("", "secret"), batch_of("orders", "orders"),
                batch_of("orders", "")]).SerializeToString(), RPC_TIMEOUT_S))
        assert [x.status.code for x in rs.responses] == [
            common_pb2.NO_PERMISSION, common_pb2.SUCCESS, common_pb2.SUCCESS]
        assert "names no topic" in rs.responses[0].status.remark
    finally:
        producer.close()
    wait_stored(broker, "orders", 4)
    assert [stored(broker, t) for t in TOPICS[1:]] == [0, 0, 0]
