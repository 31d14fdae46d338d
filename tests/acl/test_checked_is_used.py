"""The resource a request is checked for is the resource its handler acts on, through a
broker with aclEnable: a batch is stored under the topic it was checked for (over gRPC and
the send channel's SEND_BATCH and SEND_BATCHES frames); a send-back, an EndTransaction and a
transaction check name a stored message by its commitlog offset, and the account must have
the right on that message's topic."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from acl.grpc_auth import ClientAuth
from common.constants import RMQ_SYS_TRANS_HALF_TOPIC, SCHEDULE_TOPIC
from mqclient.send_channel import BlockingSendConnections
from mqproto import common_pb2, messaging_pb2, messaging_pb2_grpc
from remoting.framing import KIND_SEND_BATCH, KIND_SEND_BATCHES, encode_batch_message
from tests.acl.conftest import ACCOUNTS, KEYS, write_accounts
from tests.acl.test_broker_acl import Client, code_of, create
from tests.support.brokers import RPC_TIMEOUT_S, BrokerThread
from tests.support.waiting import wait_until

M = messaging_pb2
TOPICS = ("orders", "both", "secret", "other")
RETRY = "%RETRY%billing"


# Transaction checks soon (the check test) or not during a test (the others: a check
# stores a renewed copy of the half).
QUICK_CHECKS = {"transactionTimeOut": 300, "transactionCheckInterval": 200}


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


# -- ConsumerSendMsgBack -------------------------------------------------------------------
def send_back(c: Client, offset: int, group: str = "billing") -> common_pb2.Status:
    return c.messaging.ConsumerSendMsgBack(M.ConsumerSendMsgBackRequest(
        consumer_group=group, commit_log_offset=offset, delay_level=-1,
        max_reconsume_times=0), timeout=RPC_TIMEOUT_S).status


def pull(c: Client, topic: str, group: str, queue_id: int = 0) -> M.PullMessageResponse:
    return c.messaging.PullMessage(M.PullMessageRequest(
        consumer_group=group, topic=topic, queue_id=queue_id, max_msg_nums=8,
        subscription="*"), timeout=RPC_TIMEOUT_S)


def heartbeat(c: Client, *topics: str) -> None:
    r = c.messaging.Heartbeat(M.HeartbeatRequest(
        client_id="c1", consumer_group="billing",
        subscriptions=[M.ConsumerSubscription(topic=t, sub_string="*") for t in topics]),
        timeout=RPC_TIMEOUT_S)
    assert r.status.code == common_pb2.SUCCESS, r.status


def test_send_back_of_a_message_the_account_may_not_read_is_refused(
        broker: BrokerThread, clients: dict[str, Client]) -> None:
    """The issue's probe: SUB on the group only, a commitlog offset of another topic's
    message: refused, nothing copied into the group's retry or dead-letter topic."""
    secret = send(clients["admin"], "secret", b"the secret body")
    before = commitlog_end(broker)
    status = send_back(clients["consumer"], secret.commit_log_offset)
    assert status.code == common_pb2.NO_PERMISSION, status
    assert "account consumer lacks SUB on topic secret" in status.remark
    assert commitlog_end(broker) == before  # nothing stored
    # Delayed (to %RETRY%) as well as straight to the DLQ.
    r = clients["consumer"].messaging.ConsumerSendMsgBack(M.ConsumerSendMsgBackRequest(
        consumer_group="billing", commit_log_offset=secret.commit_log_offset),
        timeout=RPC_TIMEOUT_S)
    assert r.status.code == common_pb2.NO_PERMISSION
    assert commitlog_end(broker) == before
    # A message it may read goes back.
    mine = send(clients["admin"], "orders")
    assert send_back(clients["consumer"], mine.commit_log_offset).code == common_pb2.SUCCESS


def test_send_back_outside_the_groups_subscription_is_refused(
        broker: BrokerThread, clients: dict[str, Client]) -> None:
    consumer = clients["consumer"]
    both = send(clients["admin"], "both")
    orders = send(clients["admin"], "orders")
    # No consumer of the group known here: the account's SUB on the topic decides.
    assert send_back(consumer, both.commit_log_offset).code == common_pb2.SUCCESS
    heartbeat(consumer, "orders", RETRY)
    status = send_back(consumer, both.commit_log_offset)
    assert status.code == common_pb2.NO_PERMISSION, status
    assert "topic both" in status.remark and "billing" in status.remark
    assert "subscri" in status.remark
    assert send_back(consumer, orders.commit_log_offset).code == common_pb2.SUCCESS
    # A message of the group's own retry topic always goes back.
    retry = send(consumer, RETRY)
    assert send_back(consumer, retry.commit_log_offset).code == common_pb2.SUCCESS


# -- transactions --------------------------------------------------------------------------
def prepare(c: Client, topic: str) -> M.SendResultEntry:
    return send(c, topic, b"half of " + topic.encode(),
                transaction_type=M.TRANSACTION_PREPARED_TYPE)


def end(c: Client, half: M.SendResultEntry, state: int = M.TRANSACTION_COMMIT_TYPE
        ) -> common_pb2.Status:
    return c.messaging.EndTransaction(M.EndTransactionRequest(
        producer_group="PG", message_id=half.message_id, transaction_id=half.transaction_id,
        commit_log_offset=half.commit_log_offset, tran_state_table_offset=half.queue_offset,
        commit_or_rollback=state), timeout=RPC_TIMEOUT_S).status


def test_end_transaction_needs_pub_on_the_half_messages_topic(
        broker: BrokerThread, clients: dict[str, Client]) -> None:
    secret = prepare(clients["admin"], "secret")
    before = commitlog_end(broker)
    for state in (M.TRANSACTION_COMMIT_TYPE, M.TRANSACTION_ROLLBACK_TYPE):
        status = end(clients["producer"], secret, state)
        assert status.code == common_pb2.NO_PERMISSION, status
        assert "account producer lacks PUB on topic secret" in status.remark
    assert commitlog_end(broker) == before  # no final message, no op record
    own = prepare(clients["producer"], "orders")
    assert end(clients["producer"], own).code == common_pb2.SUCCESS
    wait_stored(broker, "orders", 1)
    # The refused ends changed nothing: the rightful producer still commits.
    assert end(clients["admin"], secret).code == common_pb2.SUCCESS
    wait_stored(broker, "secret", 1)


@pytest.mark.parametrize("broker", [QUICK_CHECKS], indirect=True)
def test_transaction_checks_reach_only_accounts_that_may_publish_the_topic(
        broker: BrokerThread, clients: dict[str, Client]) -> None:
    """A half stays unresolved: its check goes to a listener of its producer group whose
    account may publish its topic, never to one that may not (the check carries the body)."""
    stream = clients["consumer"].messaging.SubscribeTransactionCheck(
        M.SubscribeTransactionCheckRequest(producer_group="PG", client_id="c1"),
        timeout=RPC_TIMEOUT_S)
    try:
        prepare(clients["admin"], "secret")
        allowed = prepare(clients["admin"], "both")
        for check in stream:
            assert check.message.topic != "secret", "a check of a topic it may not publish"
            if check.message.system_properties.message_id == allowed.message_id:
                break
    finally:
        stream.cancel()


# -- system topics -------------------------------------------------------------------------
def test_system_topics_are_not_read_for_the_topics_of_their_messages(
        acl_broker: Callable[..., BrokerThread], acl_file: Path) -> None:
    """SCHEDULE_TOPIC_XXXX and RMQ_SYS_TRANS_HALF_TOPIC hold delayed and half messages of
    every topic: SUB on them by default would read a topic the account is denied. Only an
    admin account may use a system topic."""
    write_accounts(acl_file, {**ACCOUNTS, "accounts": [*ACCOUNTS["accounts"], {
        "accessKey": "reader", "secretKey": "reader-secret", "defaultTopicPerm": "SUB",
        "topicPerms": ["secret=DENY"], "groupPerms": ["g=SUB"]}]})
    b = acl_broker()
    admin = Client(b.address, "admin")
    reader = Client(b.address, None)
    reader.messaging = messaging_pb2_grpc.MessagingServiceStub(
        ClientAuth("reader", "reader-secret").intercept(reader.raw))
    try:
        assert code_of(lambda: create(admin, "secret"))[0] is grpc.StatusCode.OK
        send(admin, "secret", b"delayed secret", delay_time_level=18)
        send(admin, "secret", b"half secret", transaction_type=M.TRANSACTION_PREPARED_TYPE)
        for topic, queue_id in ((SCHEDULE_TOPIC, 17), (RMQ_SYS_TRANS_HALF_TOPIC, 0)):
            wait_until(lambda t=topic, q=queue_id: b.call(
                lambda: b.controller.store.get_max_offset_in_queue(t, q)) == 1,
                message=f"the message in {topic}")
            for call in (lambda t=topic, q=queue_id: pull(reader, t, "g", q),
                         lambda t=topic, q=queue_id: reader.messaging.GetMaxOffset(
                             M.GetMaxOffsetRequest(topic=t, queue_id=q),
                             timeout=RPC_TIMEOUT_S)):
                code, why = code_of(call)
                assert code is grpc.StatusCode.PERMISSION_DENIED, (topic, code)
                assert f"topic {topic}" in why and "system topic" in why, why
            got = pull(admin, topic, "g", queue_id)  # an admin account may
            assert got.status.code == common_pb2.SUCCESS, got.status
        code, why = code_of(lambda: pull(reader, "secret", "g", 0))
        assert code is grpc.StatusCode.PERMISSION_DENIED and "lacks SUB on topic secret" in why
    finally:
        admin.close()
        reader.close()
