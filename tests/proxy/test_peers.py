"""A SimpleConsumer's receive at a broker with nothing for it is served by the topic's
other broker (proxy/peers.py), with this repository's own v2 stubs: the first receive of
a fresh topic gets the message that went to the other broker at once (it waited its whole
long polling time), and the ack, change of invisible duration and DLQ move of it, sent
where it was received, reach the broker that has it in flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import duration_pb2

from mqclient.admin import MQAdmin
from mqproto import namesrv_pb2, namesrv_pb2_grpc
from mqproto.v2 import definition_pb2 as D
from mqproto.v2 import service_pb2 as S
from mqproto.v2 import service_pb2_grpc
from tests.proxy.conftest import V2Broker, V2Cluster
from tests.support.waiting import wait_until

TOPIC = "V2Peers"
GROUP = "GroupPeers"
TIMEOUT_S = 30.0
META = (("x-mq-client-id", "peers-test-client"),)
Stub = service_pb2_grpc.MessagingServiceStub


@pytest.fixture
def two(v2_cluster: V2Cluster) -> tuple[V2Broker, V2Broker]:
    a = v2_cluster.start_broker("broker-a")
    b = v2_cluster.start_broker("broker-b")
    a.node.create_topic(TOPIC, 2)
    b.node.create_topic(TOPIC, 2)
    with grpc.insecure_channel(v2_cluster.namesrv.address) as channel:
        namesrv = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        wait_until(lambda: len(namesrv.GetRouteInfoByTopic(
            namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC),
            timeout=5).topic_route_data.queue_datas) == 2, message="the route lists both")
    return a, b


@pytest.fixture
def stubs(two: tuple[V2Broker, V2Broker]) -> Iterator[tuple[Stub, Stub]]:
    with grpc.insecure_channel(two[0].endpoint) as ca, \
            grpc.insecure_channel(two[1].endpoint) as cb:
        yield Stub(ca), Stub(cb)


def send(stub: Stub, body: bytes) -> None:
    """A message stored by the broker of `stub` (its v2 send picks one of its queues)."""
    r = stub.SendMessage(S.SendMessageRequest(messages=[D.Message(
        topic=D.Resource(name=TOPIC), body=body,
        system_properties=D.SystemProperties(message_id=f"01{body.hex().upper()}"))]),
        timeout=TIMEOUT_S, metadata=META)
    assert r.status.code == D.OK, r.status


def receive(stub: Stub, queue_id: int, broker_name: str, wait_s: int, invisible_s: int = 30
            ) -> tuple[list[D.Message], float]:
    """A SimpleConsumer's receive naming one queue: its messages and how long it took."""
    request = S.ReceiveMessageRequest(
        group=D.Resource(name=GROUP),
        message_queue=D.MessageQueue(topic=D.Resource(name=TOPIC), id=queue_id,
                                     broker=D.Broker(name=broker_name)),
        filter_expression=D.FilterExpression(type=D.TAG, expression="*"), batch_size=16,
        invisible_duration=duration_pb2.Duration(seconds=invisible_s),
        long_polling_timeout=duration_pb2.Duration(seconds=wait_s))
    begin = time.monotonic()
    messages = [r.message for r in stub.ReceiveMessage(request, timeout=wait_s + 10,
                                                        metadata=META)
                if r.HasField("message")]
    return messages, time.monotonic() - begin


def ack(stub: Stub, m: D.Message, handle: str | None = None) -> S.AckMessageResponse:
    return stub.AckMessage(S.AckMessageRequest(
        group=D.Resource(name=GROUP), topic=D.Resource(name=TOPIC),
        entries=[S.AckMessageEntry(message_id=m.system_properties.message_id,
                                   receipt_handle=handle or m.system_properties.receipt_handle)]),
        timeout=TIMEOUT_S, metadata=META)


def group_diff(cluster: V2Cluster, broker_name: str) -> int:
    with MQAdmin(cluster.namesrv.address) as admin:
        return sum(q.diff for q in admin.consumer_progress(GROUP).queues
                   if q.broker_name == broker_name and q.topic == TOPIC)


def test_first_receive_at_the_broker_without_the_message_gets_it_at_once(
        v2_cluster: V2Cluster, stubs: tuple[Stub, Stub]) -> None:
    at_a, at_b = stubs
    send(at_b, b"on-b")
    got, took = receive(at_a, 0, "broker-a", wait_s=10)
    assert [m.body for m in got] == [b"on-b"]
    assert took < 5, took  # not the 10 s long polling time
    handle = got[0].system_properties.receipt_handle
    assert handle.split(" ")[1] == "broker-b"  # broker-b has it in flight
    assert group_diff(v2_cluster, "broker-b") == 1
    # Acked where it was received: acked at broker-b, the group's lag there 0.
    r = ack(at_a, got[0])
    assert r.status.code == D.OK and [e.status.code for e in r.entries] == [D.OK], r
    wait_until(lambda: group_diff(v2_cluster, "broker-b") == 0, timeout=10,
               message="broker-b's lag of the group 0")
    assert receive(at_a, 1, "broker-a", wait_s=1)[0] == []


def test_a_message_arriving_elsewhere_during_the_wait_is_served_within_a_second_or_so(
        stubs: tuple[Stub, Stub]) -> None:
    at_a, at_b = stubs
    assert receive(at_a, 0, "broker-a", wait_s=1)[0] == []  # the group's state exists
    sender = threading.Timer(1.5, lambda: send(at_b, b"later-on-b"))
    sender.start()
    try:
        got, took = receive(at_a, 0, "broker-a", wait_s=15)
    finally:
        sender.join()
    assert [m.body for m in got] == [b"later-on-b"]
    assert took < 5, took


def test_change_invisible_and_dlq_of_a_message_served_elsewhere(
        stubs: tuple[Stub, Stub]) -> None:
    at_a, at_b = stubs
    send(at_b, b"changed")
    [m], _ = receive(at_a, 0, "broker-a", wait_s=10)
    changed = at_a.ChangeInvisibleDuration(S.ChangeInvisibleDurationRequest(
        group=D.Resource(name=GROUP), topic=D.Resource(name=TOPIC),
        receipt_handle=m.system_properties.receipt_handle,
        message_id=m.system_properties.message_id,
        invisible_duration=duration_pb2.Duration(seconds=1)), timeout=TIMEOUT_S, metadata=META)
    assert changed.status.code == D.OK, changed.status
    # Visible again after a second: delivered again, from broker-b, attempt 2.
    [again], _ = receive(at_b, -1, "broker-b", wait_s=10)
    assert again.body == b"changed" and again.system_properties.delivery_attempt == 2
    dlq = at_a.ForwardMessageToDeadLetterQueue(S.ForwardMessageToDeadLetterQueueRequest(
        group=D.Resource(name=GROUP), topic=D.Resource(name=TOPIC),
        receipt_handle=again.system_properties.receipt_handle,
        message_id=again.system_properties.message_id), timeout=TIMEOUT_S, metadata=META)
    assert dlq.status.code == D.OK, dlq.status
    assert receive(at_b, -1, "broker-b", wait_s=2)[0] == []


def test_assignment_receives_are_not_served_elsewhere(stubs: tuple[Stub, Stub]) -> None:
    """A PushConsumer polls every broker itself (queue -1): broker-a keeps its hands off
    broker-b's messages."""
    at_a, at_b = stubs
    send(at_b, b"for-b-only")
    got, took = receive(at_a, -1, "broker-a", wait_s=2)
    assert got == [] and took >= 1.5
    assert [m.body for m in receive(at_b, -1, "broker-b", wait_s=5)[0]] == [b"for-b-only"]
