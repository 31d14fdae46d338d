"""Issue 18: a client refreshes the routes it uses in one batched call per round, and stops
refreshing routes it no longer uses (name server in this process, a registered table)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from mqclient.accumulator import Batch
from mqclient.constants import ROUTE_IDLE_ROUNDS
from mqclient.message import MQClientError
from mqclient.producer import Producer
from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.broker.test_registration import NamesrvThread

TOPICS = [f"Routed{i:05d}" for i in range(3000)]
MASTER = "127.0.0.1:10911"


def register(namesrv: NamesrvThread, queues: dict[str, int], counter: int) -> None:
    with grpc.insecure_channel(namesrv.address) as channel:
        r = namesrv_pb2_grpc.NamesrvServiceStub(channel).RegisterBroker(
            namesrv_pb2.RegisterBrokerRequest(
                cluster_name="C", broker_name="broker-a", broker_addr=MASTER, broker_id=0,
                data_version=common_pb2.DataVersion(timestamp=1, counter=counter),
                topic_configs=[common_pb2.TopicConfig(topic_name=t, read_queue_nums=n,
                                                      write_queue_nums=n, perm=6)
                               for t, n in queues.items()]), timeout=30)
        assert r.status.code == common_pb2.SUCCESS


@pytest.fixture
def namesrv() -> Iterator[NamesrvThread]:
    n = NamesrvThread()
    register(n, dict.fromkeys(TOPICS, 4), 1)
    yield n
    n.stop()


def count_route_calls(instance: Any) -> dict[str, int]:
    """Counts the client's name-server route calls: one topic ("one") and batched."""
    calls = {"one": 0, "batched": 0}
    one, batched = instance.namesrv.get_route, instance.namesrv.get_routes

    async def count_one(topic: str) -> Any:
        calls["one"] += 1
        return await one(topic)

    async def count_batched(topics: list[str]) -> Any:
        calls["batched"] += 1
        return await batched(topics)

    instance.namesrv.get_route = count_one
    instance.namesrv.get_routes = count_batched
    return calls


def test_refresh_is_one_batched_call_of_the_routes_in_use(namesrv: NamesrvThread) -> None:
    producer = Producer("PG", namesrv.address, poll_name_server_interval_s=3600).start()
    try:
        instance = producer.instance
        calls = count_route_calls(instance)
        producer.loop.run(instance.update_routes(TOPICS))
        assert len(instance.routes) == len(TOPICS) and calls == {"one": 0, "batched": 1}
        assert len(producer.fetch_publish_queues("Routed02999")) == 4

        producer.loop.run(instance.update_all_routes())
        assert calls == {"one": 0, "batched": 2}
        # A change on the name server shows after the next round.
        register(namesrv, {**dict.fromkeys(TOPICS, 4), "Routed00007": 2}, 2)
        producer.loop.run(instance.update_all_routes())
        assert len(instance.routes["Routed00007"].publish_queues) == 2
        assert calls == {"one": 0, "batched": 3}

        # Only routes in use stay: one topic keeps being used, the rest go idle.
        for _ in range(ROUTE_IDLE_ROUNDS + 1):
            producer.fetch_publish_queues("Routed00001")
            producer.loop.run(instance.update_all_routes())
        assert list(instance.routes) == ["Routed00001"]
        assert calls["one"] == 0
    finally:
        producer.shutdown()


def test_async_sends_of_many_topics_keep_their_routes_in_use(namesrv: NamesrvThread) -> None:
    """Batches sent together (SEND_BATCHES) count their topics' routes as in use, as a
    batch sent alone does: they stay cached and refreshed."""
    producer = Producer("PG", namesrv.address, poll_name_server_interval_s=3600).start()
    try:
        instance = producer.instance
        used, idle = TOPICS[:2]
        producer.loop.run(instance.update_routes([used, idle]))

        async def not_sent(addr: str, planned: list[Any], outcomes: list[Any]) -> None:
            pass  # only the planning (routes, targets) is of interest here

        producer._send_planned = not_sent  # type: ignore[method-assign]
        for _ in range(ROUTE_IDLE_ROUNDS + 1):
            producer.loop.run(producer._send_batches_async([Batch((used, 0))]))
            producer.loop.run(instance.update_all_routes())
        assert list(instance.routes) == [used]
    finally:
        producer.shutdown()


def test_routes_missing_at_many_async_sends_are_fetched_together(
        namesrv: NamesrvThread) -> None:
    """Sends to thousands of topics the producer has not used yet: their routes come in a
    few batched calls, not one call per topic (which timed sends out at 5,000 topics)."""
    producer = Producer("PG", namesrv.address, poll_name_server_interval_s=3600).start()
    try:
        instance = producer.instance
        calls = count_route_calls(instance)

        async def look_up_all() -> list[int]:
            routes = await asyncio.gather(*(producer.publish_route_async(t) for t in TOPICS))
            return [len(r.publish_queues) for r in routes]

        assert producer.loop.run(look_up_all()) == [4] * len(TOPICS)
        assert calls["one"] == 0 and 1 <= calls["batched"] <= 3, calls
    finally:
        producer.shutdown()


def test_new_client_reaches_a_name_server_back_at_once() -> None:
    """A name server restarted at its address: a client created then gets routes at its
    first call, although another client of the process is still backing off from that
    address (gRPC shares connections among a process's channels unless told not to, and
    the new client's first call failed at once with UNAVAILABLE)."""
    first = NamesrvThread()
    register(first, {TOPICS[0]: 4}, 1)
    old = Producer("PG", first.address, poll_name_server_interval_s=3600).start()
    try:
        assert old.loop.run(old.instance.namesrv.get_route(TOPICS[0])) is not None
        first.stop()
        with pytest.raises(MQClientError, match="UNAVAILABLE"):
            old.loop.run(old.instance.namesrv.get_route(TOPICS[0]))
        again = NamesrvThread(first.address)
        try:
            register(again, {TOPICS[0]: 4}, 1)
            new = Producer("PG2", again.address, poll_name_server_interval_s=3600).start()
            try:
                route = new.loop.run(new.instance.namesrv.get_route(TOPICS[0]))
                assert route is not None and len(route.queue_datas) == 1
            finally:
                new.shutdown()
        finally:
            again.stop()
    finally:
        old.shutdown()
