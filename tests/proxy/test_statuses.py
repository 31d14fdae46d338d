"""The v2 endpoint's answers to bad requests, with this repository's own v2 stubs (no SDK):
v2 status codes with a message that says what is wrong."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import duration_pb2

from mqproto import messaging_pb2
from mqproto.v2 import definition_pb2 as D
from mqproto.v2 import service_pb2 as S
from mqproto.v2 import service_pb2_grpc
from tests.proxy.conftest import V2Broker, V2Cluster

TOPIC = "V2Status"
TIMEOUT_S = 10.0
META = (("x-mq-client-id", "status-test-client"),)


@pytest.fixture
def broker(v2_cluster: V2Cluster) -> V2Broker:
    b = v2_cluster.start_broker(maxMessageSize=4096)
    b.node.create_topic(TOPIC, 2)
    return b


@pytest.fixture
def stub(broker: V2Broker) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(broker.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def message(topic: str = TOPIC, body: bytes = b"x", **sp: object) -> D.Message:
    return D.Message(topic=D.Resource(name=topic), body=body,
                     system_properties=D.SystemProperties(message_id="01AB", **sp))


def send(stub: service_pb2_grpc.MessagingServiceStub, m: D.Message) -> S.SendMessageResponse:
    return stub.SendMessage(S.SendMessageRequest(messages=[m]), timeout=TIMEOUT_S,
                            metadata=META)


def test_route_lists_every_queue_with_the_v2_endpoint(
        stub: service_pb2_grpc.MessagingServiceStub, broker: V2Broker) -> None:
    r = stub.QueryRoute(S.QueryRouteRequest(topic=D.Resource(name=TOPIC)), timeout=TIMEOUT_S)
    assert r.status.code == D.OK, r.status
    assert [q.id for q in r.message_queues] == [0, 1]
    host, _, port = broker.endpoint.rpartition(":")
    for q in r.message_queues:
        assert q.permission == D.READ_WRITE
        assert q.broker.name == "broker-a" and q.broker.id == 0
        assert q.broker.endpoints.addresses[0].host == host
        assert q.broker.endpoints.addresses[0].port == int(port)
        assert set(q.accept_message_types) == {D.NORMAL, D.FIFO, D.DELAY, D.TRANSACTION}
    a = stub.QueryAssignment(S.QueryAssignmentRequest(topic=D.Resource(name=TOPIC)),
                             timeout=TIMEOUT_S)
    assert a.status.code == D.OK and len(a.assignments) == 1
    assert a.assignments[0].message_queue.id == -1


def test_unknown_topic(stub: service_pb2_grpc.MessagingServiceStub) -> None:
    r = stub.QueryRoute(S.QueryRouteRequest(topic=D.Resource(name="NoSuchTopic")),
                        timeout=TIMEOUT_S)
    assert r.status.code == D.TOPIC_NOT_FOUND
    assert "NoSuchTopic" in r.status.message
    bad = stub.QueryRoute(S.QueryRouteRequest(topic=D.Resource(name="bad topic!")),
                          timeout=TIMEOUT_S)
    assert bad.status.code == D.ILLEGAL_TOPIC


@pytest.mark.parametrize(("m", "code", "words"), [
    (message(body=b"x" * 5000), D.MESSAGE_BODY_TOO_LARGE, "maxMessageSize 4096"),
    (message(body=b""), D.MESSAGE_BODY_EMPTY, "empty"),
    (D.Message(topic=D.Resource(name=TOPIC), body=b"x", user_properties={"KEYS": "k"}),
     D.ILLEGAL_MESSAGE_PROPERTY_KEY, "reserved"),
    (message(keys=["a b"]), D.ILLEGAL_MESSAGE_KEY, "blanks"),
    (message(tag="a|b"), D.ILLEGAL_MESSAGE_TAG, "'|'"),
    (message(message_type=D.TRANSACTION, message_group="g"),
     D.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "transactional"),
])
def test_bad_sends(stub: service_pb2_grpc.MessagingServiceStub, m: D.Message, code: int,
                   words: str) -> None:
    r = send(stub, m)
    assert r.status.code == code, r.status
    assert words in r.status.message
    assert r.entries[0].status.code == code


def test_ack_with_bad_or_stale_handles(stub: service_pb2_grpc.MessagingServiceStub) -> None:
    assert send(stub, message()).status.code == D.OK
    group = D.Resource(name="StatusGroup")

    def receive() -> list[S.ReceiveMessageResponse]:
        return list(stub.ReceiveMessage(S.ReceiveMessageRequest(
            group=group, message_queue=D.MessageQueue(topic=D.Resource(name=TOPIC), id=-1),
            batch_size=1, invisible_duration=duration_pb2.Duration(seconds=1),
            long_polling_timeout=duration_pb2.Duration(seconds=1)), timeout=TIMEOUT_S))

    first = [r.message for r in receive() if r.HasField("message")]
    assert len(first) == 1
    stale = first[0].system_properties.receipt_handle

    def ack(handle: str) -> S.AckMessageResponse:
        return stub.AckMessage(S.AckMessageRequest(
            group=group, topic=D.Resource(name=TOPIC),
            entries=[S.AckMessageEntry(message_id="x", receipt_handle=handle)]),
            timeout=TIMEOUT_S)

    assert ack("garbage").status.code == D.INVALID_RECEIPT_HANDLE
    time.sleep(1.2)  # invisible duration over: delivered again
    second = [r.message for r in receive() if r.HasField("message")]
    assert second[0].system_properties.delivery_attempt == 2
    refused = ack(stale)
    assert refused.status.code == D.INVALID_RECEIPT_HANDLE
    assert "delivered again" in refused.status.message
    assert ack(second[0].system_properties.receipt_handle).status.code == D.OK
    assert ack(second[0].system_properties.receipt_handle).status.code == D.OK  # idempotent
    empty = receive()
    assert [r.status.code for r in empty] == [D.MESSAGE_NOT_FOUND]


def test_sql_filter_and_bad_transaction_ends(
        stub: service_pb2_grpc.MessagingServiceStub) -> None:
    responses = list(stub.ReceiveMessage(S.ReceiveMessageRequest(
        group=D.Resource(name="G"), message_queue=D.MessageQueue(
            topic=D.Resource(name=TOPIC), id=-1),
        filter_expression=D.FilterExpression(type=D.SQL, expression="a > 1")),
        timeout=TIMEOUT_S))
    assert responses[0].status.code == D.NOT_IMPLEMENTED  # no enablePropertyFilter here
    assert "enablePropertyFilter" in responses[0].status.message
    r = stub.EndTransaction(S.EndTransactionRequest(topic=D.Resource(name=TOPIC),
                                                    transaction_id="nonsense"),
                            timeout=TIMEOUT_S)
    assert r.status.code == D.INVALID_TRANSACTION_ID
    no_half = stub.EndTransaction(S.EndTransactionRequest(
        topic=D.Resource(name=TOPIC), transaction_id="0" * 32, resolution=D.COMMIT),
        timeout=TIMEOUT_S)
    assert no_half.status.code == D.INVALID_TRANSACTION_ID
    assert "no half message" in no_half.status.message


def test_telemetry_answers_publishing_settings(
        stub: service_pb2_grpc.MessagingServiceStub) -> None:
    settings = D.Settings(client_type=D.PRODUCER, publishing=D.Publishing(
        topics=[D.Resource(name=TOPIC)], max_body_size=128 << 20))
    call = stub.Telemetry(iter([S.TelemetryCommand(settings=settings)]), timeout=TIMEOUT_S,
                          metadata=META)
    answer = next(call)
    call.cancel()
    assert answer.status.code == D.OK
    assert answer.settings.publishing.max_body_size == 4096  # the broker's maxMessageSize
    assert answer.settings.backoff_policy.max_attempts == 3


def test_consumer_settings_and_membership(stub: service_pb2_grpc.MessagingServiceStub,
                                          broker: V2Broker) -> None:
    """A consumer's settings answer its retry policy (the delay levels, the max attempts) and
    its heartbeat makes it an online consumer of its group, until it terminates."""
    group = D.Resource(name="MemberGroup")
    settings = D.Settings(client_type=D.SIMPLE_CONSUMER, subscription=D.Subscription(
        group=group, subscriptions=[D.SubscriptionEntry(
            topic=D.Resource(name=TOPIC),
            expression=D.FilterExpression(type=D.TAG, expression="TagA"))]))
    call = stub.Telemetry(iter([S.TelemetryCommand(settings=settings)]), timeout=TIMEOUT_S,
                          metadata=META)
    answer = next(call)
    call.cancel()
    policy = answer.settings.backoff_policy
    assert policy.max_attempts == 3
    assert [d.seconds for d in policy.customized_backoff.next][:4] == [1, 5, 10, 30]
    assert answer.settings.subscription.receive_batch_size == 32
    assert stub.Heartbeat(S.HeartbeatRequest(group=group, client_type=D.SIMPLE_CONSUMER),
                          timeout=TIMEOUT_S, metadata=META).status.code == D.OK

    def members() -> list[str]:
        r = broker.node.messaging.GetConsumerListByGroup(
            messaging_pb2.GetConsumerListByGroupRequest(consumer_group="MemberGroup"),
            timeout=TIMEOUT_S)
        return list(r.consumer_id_list)

    assert members() == ["status-test-client"]
    assert stub.NotifyClientTermination(S.NotifyClientTerminationRequest(group=group),
                                        timeout=TIMEOUT_S, metadata=META).status.code == D.OK
    assert members() == []
    anonymous = stub.Heartbeat(S.HeartbeatRequest(group=group), timeout=TIMEOUT_S)
    assert anonymous.status.code == D.CLIENT_ID_REQUIRED
