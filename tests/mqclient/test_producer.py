"""The producer against real name server and broker processes on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections import Counter

import grpc
import pytest

from mqclient import Message, MQClientError, Producer, SendResult, SendStatus
from mqproto import messaging_pb2_grpc
from tests.mqclient.conftest import Cluster
from tests.support.brokers import Node, pull_everything
from tests.support.waiting import wait_until


def stub(address: str) -> messaging_pb2_grpc.MessagingServiceStub:
    return messaging_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(address))


def test_sync_send_result_and_message_fields(cluster: Cluster) -> None:
    broker = cluster.start_broker("broker-a")
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=8) as producer:
        r = producer.send(Message("TopicP", b"hello", tags="TagA", keys=["k1", "k2"],
                                  properties={"color": "red"}))
        assert r.status is SendStatus.SEND_OK
        assert len(r.msg_id) == 32 and len(r.offset_msg_id) == 32
        assert r.msg_id != r.offset_msg_id
        assert r.message_queue.topic == "TopicP" and r.message_queue.broker_name == "broker-a"
        assert 0 <= r.message_queue.queue_id < 8 and r.queue_offset == 0
        # Round-robin: the next sends go to the next queues.
        queues = [producer.send(Message("TopicP", b"x")).message_queue.queue_id
                  for _ in range(8)]
        assert sorted(queues) == list(range(8))

    m = pull_everything(stub(broker.address), "TopicP", r.message_queue.queue_id)[0]
    assert (m.body, m.tag, list(m.keys)) == (b"hello", "TagA", ["k1", "k2"])
    assert dict(m.user_properties) == {"color": "red"}
    assert m.system_properties.message_id == r.msg_id
    assert m.system_properties.offset_msg_id == r.offset_msg_id


def test_async_oneway_and_batch_sends(cluster: Cluster) -> None:
    broker = cluster.start_broker("broker-a")
    producer = Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=4).start()
    try:
        callbacks: list[tuple[SendResult | None, BaseException | None]] = []
        done = threading.Event()

        def callback(result: SendResult | None, error: BaseException | None) -> None:
            callbacks.append((result, error))
            if len(callbacks) == 200:
                done.set()

        futures = [producer.send_async(Message("TopicAs", b"a%d" % i), callback=callback)
                   for i in range(200)]
        results = [f.result(timeout=10) for f in futures]
        assert done.wait(10)
        assert all(e is None for _, e in callbacks)
        assert len({r.offset_msg_id for r in results}) == 200

        async def awaited() -> SendResult:  # awaitable on any event loop
            return await producer.send_async(Message("TopicAs", b"awaited"))

        assert asyncio.run(awaited()).status is SendStatus.SEND_OK

        for i in range(50):
            producer.send_oneway(Message("TopicAs", b"o%d" % i))
        producer.flush()

        batch = producer.send_batch([Message("TopicAs", b"b%d" % i) for i in range(5)])
        assert len({r.message_queue for r in batch}) == 1
        assert [r.queue_offset for r in batch] == list(range(batch[0].queue_offset,
                                                             batch[0].queue_offset + 5))
    finally:
        producer.shutdown()
    s = stub(broker.address)
    bodies = Counter(m.body for q in range(4) for m in pull_everything(s, "TopicAs", q))
    assert sum(bodies.values()) == 200 + 1 + 50 + 5 and max(bodies.values()) == 1


def test_bad_input_is_refused_with_a_clear_error(cluster: Cluster) -> None:
    cluster.start_broker("broker-a")
    with Producer("PG", cluster.namesrv_addr) as producer:
        with pytest.raises(MQClientError) as e:
            producer.send(Message("TopicBad", b"x", properties={"UNIQ_KEY": "mine"}))
        assert e.value.code == "ILLEGAL_ARGUMENT"
        with pytest.raises(MQClientError) as e:
            producer.send(Message("bad topic!", b"x"))
        assert e.value.code == "MESSAGE_ILLEGAL"  # the broker's verdict, not retried
        with pytest.raises(MQClientError) as e:
            producer.send_batch([Message("TopicBad", b"x"), Message("Other", b"y")])
        assert e.value.code == "ILLEGAL_ARGUMENT"
        with pytest.raises(MQClientError) as e:
            producer.send_async(Message("TopicBad", b""))
        assert e.value.code == "ILLEGAL_ARGUMENT"
        assert producer.send(Message("TopicBad", b"fine")).status is SendStatus.SEND_OK
        # Timeouts that are not a finite number of seconds > 0 (0 was the default, a
        # string left the producer's async sends stuck: the batch was opened before the
        # bad value raised, and its linger never armed again).
        for bad in (0, -1, float("nan"), float("inf"), 1e10, "2", True):
            with pytest.raises(MQClientError) as e:
                producer.send_async(Message("TopicBad", b"x"), timeout_s=bad)  # type: ignore[arg-type]
            assert e.value.code == "ILLEGAL_ARGUMENT", bad
            with pytest.raises(MQClientError) as e:
                producer.send(Message("TopicBad", b"x"), timeout_s=bad)  # type: ignore[arg-type]
            assert e.value.code == "ILLEGAL_ARGUMENT", bad
        futures = [producer.send_async(Message(f"TopicBad{i}", b"ok"), timeout_s=5)
                   for i in range(3)]
        assert {f.result(timeout=10).status for f in futures} == {SendStatus.SEND_OK}
    with pytest.raises(MQClientError) as e:
        Producer("PG", cluster.namesrv_addr, send_timeout_s=0)
    assert e.value.code == "ILLEGAL_ARGUMENT"


def test_a_retry_topic_no_broker_has_yet_is_routed_to_its_one_queue(
        cluster: Cluster) -> None:
    """A send to %RETRY%group before any broker created it goes by TBW102's brokers, but
    to queue 0 only: the broker creates a retry topic with one queue whatever the send
    asks, so the producer's 8 queues got INVALID_PARAMETER for 7 sends in 8."""
    cluster.start_broker("broker-a")
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=8) as producer:
        results = [producer.send(Message("%RETRY%GroupR", b"s%d" % i)) for i in range(4)]
        results += [f.result(10) for f in [producer.send_async(
            Message("%RETRY%GroupR", b"a%d" % i)) for i in range(8)]]
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert {r.message_queue.queue_id for r in results} == {0}


def test_an_async_send_that_fills_its_batch_alone_leaves_later_sends_their_timer(
        cluster: Cluster) -> None:
    """A first async send of a linger window that filled its batch by itself (256 KiB) took
    the producer's one linger timer without arming it: every later small async send waited,
    unsent and never timed out, until shutdown. And a topic name ending in a newline is
    refused ("$" matched before it)."""
    cluster.start_broker("broker-a")
    with Producer("PG", cluster.namesrv_addr, send_timeout_s=5) as producer:
        assert producer.send_async(Message("TopicBig", b"b" * 262_144)).result(10)
        small = [producer.send_async(Message(t, b"s")) for t in ("TopicBig", "TopicSmall")]
        assert all(f.result(10).status is SendStatus.SEND_OK for f in small)
        with pytest.raises(MQClientError) as e:
            producer.send(Message("TopicNl\n", b"x"))
        assert e.value.code == "MESSAGE_ILLEGAL"


def test_no_route_is_an_error_not_a_hang(cluster: Cluster) -> None:
    with Producer("PG", cluster.namesrv_addr) as producer:  # no broker at all
        started = time.monotonic()
        with pytest.raises(MQClientError) as e:
            producer.send(Message("TopicNone", b"x"))
        assert e.value.code == "NO_ROUTE" and time.monotonic() - started < 5


def test_a_route_lookup_to_a_stalled_name_server_times_out_as_the_send(
        cluster: Cluster) -> None:
    """A send to a topic without a cached route while the name server does not answer:
    TIMEOUT within the send's own timeout (sync: was a bare TimeoutError after the
    producer's timeout; async: the name server call's own 3 s)."""
    cluster.start_broker("broker-a")
    with Producer("PG", cluster.namesrv_addr) as producer:
        os.kill(cluster.namesrv.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(MQClientError) as e:
                producer.send(Message("TopicUnseen", b"x"), timeout_s=1)
            assert e.value.code == "TIMEOUT", e.value
            assert time.monotonic() - started < 2
            started = time.monotonic()
            error = producer.send_async(Message("TopicUnseen2", b"x"),
                                        timeout_s=1).exception(timeout=10)
            assert isinstance(error, MQClientError) and error.code == "TIMEOUT", error
            assert time.monotonic() - started < 2
        finally:
            os.kill(cluster.namesrv.pid, signal.SIGCONT)


def test_name_server_failover(cluster: Cluster) -> None:
    cluster.start_broker("broker-a")
    dead = "127.0.0.1:1"  # nothing listens there
    with Producer("PG", f"{dead};{cluster.namesrv_addr}") as producer:
        assert producer.send(Message("TopicNs", b"x")).status is SendStatus.SEND_OK


def test_ordered_send_keeps_a_key_on_one_queue(cluster: Cluster) -> None:
    broker = cluster.start_broker("broker-a")
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=8) as producer:
        producer.send(Message("TopicOrd", b"create"))
        queue_of: dict[str, set[int]] = {}
        for i in range(20):
            for key in ("order-1", "order-2", "order-3"):
                r = producer.send_orderly(Message("TopicOrd", f"{key}:{i}".encode()), key)
                queue_of.setdefault(key, set()).add(r.message_queue.queue_id)
    assert all(len(q) == 1 for q in queue_of.values())
    s = stub(broker.address)
    for key, (queue_id,) in queue_of.items():
        seq = [int(m.body.split(b":")[1]) for m in pull_everything(s, "TopicOrd", queue_id)
               if m.body.startswith(key.encode())]
        assert seq == list(range(20))


def test_sends_go_on_when_a_broker_group_dies(cluster: Cluster) -> None:
    """Broker-b is SIGKILLed: its route stays stale (the name server keeps it up to 120 s),
    yet no send fails: a failed attempt is retried on broker-a and broker-b is avoided.
    Once the route drops broker-b (a clean stop unregisters), nothing goes there."""
    cluster.start_broker("broker-a")
    broker_b = cluster.start_broker("broker-b")
    producer = Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=4,
                        poll_name_server_interval_s=0.5).start()
    try:
        for i in range(16):
            producer.send(Message("TopicFail", b"warm%d" % i))
        wait_until(lambda: {q.broker_name for q in producer.fetch_publish_queues("TopicFail")}
                   == {"broker-a", "broker-b"}, timeout=15, message="both groups routed")
        broker_b.stop(signal.SIGKILL)
        results = [producer.send(Message("TopicFail", b"after%d" % i)) for i in range(100)]
        assert {r.message_queue.broker_name for r in results} == {"broker-a"}
        futures = [producer.send_async(Message("TopicFail", b"async%d" % i))
                   for i in range(100)]
        assert all(f.result(timeout=15).status is SendStatus.SEND_OK for f in futures)
        assert not producer.fault.is_available("broker-b")
    finally:
        producer.shutdown()


def test_after_a_master_kill_the_other_group_takes_its_share_on_every_queue(
        cluster: Cluster) -> None:
    """Broker-a's master is SIGKILLed under a sync producer (its route stays): the sends
    it would have taken spread over broker-b's queues, which differ by at most 10 % in
    what they received (the turns of broker-a's queues all went to broker-b's queue 0)."""
    broker_a = cluster.start_broker("broker-a")
    broker_b = cluster.start_broker("broker-b")
    producer = Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=4).start()
    try:
        for i in range(16):
            producer.send(Message("TopicSpread", b"warm%d" % i))
        wait_until(lambda: {q.broker_name for q in producer.fetch_publish_queues(
            "TopicSpread")} == {"broker-a", "broker-b"}, timeout=15, message="both routed")
        b = Node(broker_b.address)
        before = [b.max_offset("TopicSpread", q) for q in range(4)]
        broker_a.stop(signal.SIGKILL)
        results = [producer.send(Message("TopicSpread", b"after%d" % i)) for i in range(800)]
        assert {r.message_queue.broker_name for r in results} == {"broker-b"}


        def received() -> list[int]:
            return [b.max_offset("TopicSpread", q) - before[q] for q in range(4)]

        wait_until(lambda: sum(received()) == 800, timeout=10, message="800 dispatched")
        counts = received()
        b.close()
    finally:
        producer.shutdown()
    assert max(counts) - min(counts) <= 0.1 * max(counts), counts


def test_route_refresh_drops_a_stopped_group(cluster: Cluster) -> None:
    cluster.start_broker("broker-a")
    broker_b = cluster.start_broker("broker-b")
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=4,
                  poll_name_server_interval_s=0.5) as producer:
        for i in range(8):
            producer.send(Message("TopicDrop", b"warm%d" % i))
        wait_until(lambda: {q.broker_name for q in producer.fetch_publish_queues("TopicDrop")}
                   == {"broker-a", "broker-b"}, timeout=15, message="both groups routed")
        broker_b.stop(signal.SIGTERM)  # unregisters from the name server
        wait_until(lambda: {q.broker_name for q in producer.fetch_publish_queues("TopicDrop")}
                   == {"broker-a"}, timeout=15, message="route without broker-b")
        results = [producer.send(Message("TopicDrop", b"m%d" % i)) for i in range(20)]
        assert {r.message_queue.broker_name for r in results} == {"broker-a"}
