"""A producer and a master that is killed and restarted at its address: the producer learns
from the name server that the master is gone (its route is watched meanwhile, at a bounded
rate), its sends wait for the master instead of failing in a tight loop, and once the
name server lists the master again the producer sends to it at once (no isolation left from
its failures, fresh connections)."""

from __future__ import annotations

import concurrent.futures
import signal
import socket
import time

import pytest

from mqclient import Message, MQClientError, Producer, SendStatus
from mqclient.constants import ROUTE_WATCH_INTERVAL_S
from tests.mqclient.conftest import Cluster
from tests.mqclient.test_routes_batched import count_route_calls
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


def fixed_ports() -> dict[str, object]:
    """broker.conf keys of a broker that comes back at its address after a restart."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"listenPort": port, "haListenPort": 0, "sendListenPort": 0, "grpcProxyPort": 0,
            "remotingPort": 0}


def test_a_restarted_master_is_sent_to_again_as_soon_as_it_is_listed(cluster: Cluster) -> None:
    """Two groups; broker-a is killed (sends go on through broker-b, broker-a avoided) and
    restarted: sends reach it again within a second, not after the 30 s route refresh and
    the 30 s isolation of a failed broker."""
    conf = fixed_ports()
    broker_a = cluster.start_broker("broker-a", **conf)
    cluster.start_broker("broker-b")
    topic = "TopicReturn"
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=4) as producer:
        wait_until(lambda: {producer.send(Message(topic, b"warm")).message_queue.broker_name
                            for _ in range(8)} == {"broker-a", "broker-b"}, timeout=20,
                   message="sends to both groups")
        broker_a.stop(signal.SIGKILL)
        after_kill = [producer.send(Message(topic, b"down%d" % i)) for i in range(20)]
        assert {r.message_queue.broker_name for r in after_kill} == {"broker-b"}
        assert not producer.fault.is_available("broker-a")

        broker_a = cluster.start_broker("broker-a", **conf)  # serving and registered
        started = time.monotonic()
        wait_until(lambda: producer.send(Message(topic, b"back")).message_queue.broker_name
                   == "broker-a", timeout=5, interval=0.02, message="a send to broker-a")
        print(f"\nbroker-a sent to {time.monotonic() - started:.2f} s after its restart")
        assert producer.fault.is_available("broker-a")


def test_sends_to_a_lost_master_wait_for_it_without_asking_the_name_server_each(
        cluster: Cluster) -> None:
    """The only group's master is killed. Sends wait (within their timeout) for it to be
    listed again rather than failing at once, each after a route call (thousands a
    second); the name server is asked every ROUTE_WATCH_INTERVAL_S; a send waiting when
    the master is back is stored."""
    conf = fixed_ports()
    broker = cluster.start_broker("broker-a", **conf)
    topic = "TopicWait"
    # Routes refreshed every 0.5 s: the route loses the master soon after the kill anyway.
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=2,
                  poll_name_server_interval_s=0.5) as producer:
        assert producer.send(Message(topic, b"warm")).status is SendStatus.SEND_OK
        broker.stop(signal.SIGKILL)
        wait_until(lambda: not getattr(producer.instance.routes.get(topic), "publish_queues",
                                       None), timeout=10, message="the route without its master")
        calls = count_route_calls(producer.instance)
        sends, started = 0, time.monotonic()
        while time.monotonic() - started < 2.0:
            with pytest.raises(MQClientError) as e:
                producer.send(Message(topic, b"down"), timeout_s=0.5)
            assert e.value.code == "NO_ROUTE", e.value
            sends += 1
        assert sends <= 6, sends  # each waited its 0.5 s
        asked = calls["one"] + calls["batched"]
        assert asked <= 2.0 / (0.8 * ROUTE_WATCH_INTERVAL_S) + 4, calls

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(producer.send, Message(topic, b"waiting"), 20)
            time.sleep(0.5)
            broker = cluster.start_broker("broker-a", **conf)
            booted = time.monotonic()
            assert waiting.result(timeout=20).status is SendStatus.SEND_OK
            print(f"\nthe waiting send stored {time.monotonic() - booted:.2f} s after the "
                  "broker's boot line")
            assert time.monotonic() - booted < 2.0


def test_a_topic_asked_a_moment_ago_but_not_cached_is_fetched_not_refused(
        cluster: Cluster) -> None:
    """Only a cached route without a master is answered NO_ROUTE from the cache; a topic
    whose lookup is still on its way (a new topic's first batches: its TBW102 lookup) is
    fetched (async sends to a new topic failed NO_ROUTE when this was not so)."""
    cluster.start_broker("broker-a")
    with Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=2) as producer:
        producer.instance.watch.checked(["TopicNew"])  # as the first lookup does
        assert producer.send(Message("TopicNew", b"x")).status is SendStatus.SEND_OK
        producer.instance.watch.checked(["TopicNewAsync"])
        future = producer.send_async(Message("TopicNewAsync", b"x"))
        assert future.result(timeout=10).status is SendStatus.SEND_OK
