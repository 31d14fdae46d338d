"""Issue 18, the name server's side of many topics: registrations over gRPC's default 4 MiB,
keep-alives without the table, incremental queue data and the batched route lookup."""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import AsyncIterator

import grpc

from common.constants import MASTER_ID, PERM_READ, PERM_WRITE
from common.route import QueueData
from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from nameserver.controller import NamesrvController
from nameserver.routeinfo import DataVersion, RouteInfoManager, TopicConfig
from tests.nameserver.registration import CLUSTER, MASTER_A, ha_addr
from tests.support.clock import FakeTime

LONG = "x" * 90  # topic names of about 100 characters


@contextlib.asynccontextmanager
async def running_namesrv() -> AsyncIterator[
        tuple[NamesrvController, namesrv_pb2_grpc.NamesrvServiceStub]]:
    fake_time = FakeTime()
    controller = NamesrvController("127.0.0.1:0", clock=fake_time, sleep=fake_time.sleep)
    address = await controller.start()
    try:
        async with grpc.aio.insecure_channel(
                address, options=[("grpc.max_send_message_length", -1),
                                  ("grpc.max_receive_message_length", -1)]) as channel:
            yield controller, namesrv_pb2_grpc.NamesrvServiceStub(channel)
    finally:
        await controller.shutdown(grace=0)


def topic_configs(n: int, prefix: str = "T", queues: int = 8) -> list[common_pb2.TopicConfig]:
    return [common_pb2.TopicConfig(topic_name=f"{prefix}{LONG}{i:06d}", read_queue_nums=queues,
                                   write_queue_nums=queues, perm=PERM_READ | PERM_WRITE)
            for i in range(n)]


def request(configs: list[common_pb2.TopicConfig] | None = None, counter: int = 1, *,
            compressed: bool = False, broker_name: str = "broker-a", addr: str = MASTER_A
            ) -> namesrv_pb2.RegisterBrokerRequest:
    r = namesrv_pb2.RegisterBrokerRequest(
        cluster_name=CLUSTER, broker_name=broker_name, broker_addr=addr,
        broker_id=MASTER_ID, ha_server_addr=ha_addr(addr),
        data_version=common_pb2.DataVersion(timestamp=1, counter=counter))
    if configs is None:
        r.body_omitted = True
    elif compressed:
        table = namesrv_pb2.TopicConfigTable(topic_configs=configs).SerializeToString()
        r.compressed_topic_configs = zlib.compress(table, 1)
    else:
        r.topic_configs.extend(configs)
    return r


def test_registers_a_table_over_4_mib_plain_and_compressed() -> None:
    async def scenario() -> None:
        async with running_namesrv() as (controller, stub):
            configs = topic_configs(45_000)
            plain = request(configs)
            assert plain.ByteSize() > 4 * 1024 * 1024  # gRPC's default receive limit
            r = await stub.RegisterBroker(plain, timeout=60)
            assert r.status.code == common_pb2.SUCCESS, r.status
            rim = controller.route_info_manager
            assert len(rim.topic_queue_table) == 45_000
            # The same table grown by one topic, compressed: only the new topic changes.
            grown = request(topic_configs(45_001), counter=2, compressed=True)
            assert grown.ByteSize() < 1024 * 1024
            r = await stub.RegisterBroker(grown, timeout=60)
            assert r.status.code == common_pb2.SUCCESS, r.status
            assert len(rim.topic_queue_table) == 45_001

    asyncio.run(scenario())


def test_a_compressed_table_that_does_not_inflate_is_refused_whole() -> None:
    async def scenario() -> None:
        async with running_namesrv() as (controller, stub):
            bad = request([])
            bad.compressed_topic_configs = b"not zlib"
            r = await stub.RegisterBroker(bad, timeout=10)
            assert r.status.code == common_pb2.INVALID_PARAMETER
            assert "zlib" in r.status.remark
            assert controller.route_info_manager.broker_live_table == {}

    asyncio.run(scenario())


def test_keep_alive_without_the_table_until_the_version_changes() -> None:
    async def scenario() -> None:
        async with running_namesrv() as (controller, stub):
            rim = controller.route_info_manager
            # Nothing known yet: the keep-alive is answered body_required, nothing taken.
            r = await stub.RegisterBroker(request(None), timeout=10)
            assert r.status.code == common_pb2.SUCCESS and r.body_required
            assert rim.broker_live_table == {}
            r = await stub.RegisterBroker(request(topic_configs(3)), timeout=10)
            assert r.status.code == common_pb2.SUCCESS and not r.body_required
            before = rim.broker_live_table[MASTER_A].last_update_timestamp
            controller.route_info_manager._clock.advance(20)  # type: ignore[attr-defined]
            r = await stub.RegisterBroker(request(None), timeout=10)
            assert r.status.code == common_pb2.SUCCESS and not r.body_required
            assert rim.broker_live_table[MASTER_A].last_update_timestamp == before + 20_000
            assert len(rim.topic_queue_table) == 3
            # Another data version: the table is needed again.
            r = await stub.RegisterBroker(request(None, counter=2), timeout=10)
            assert r.body_required
            assert rim.broker_live_table[MASTER_A].data_version == DataVersion(1, 1)

    asyncio.run(scenario())


def test_one_topic_change_is_applied_by_its_difference() -> None:
    rim = RouteInfoManager(clock=lambda: 0)
    configs = [TopicConfig(f"T{i}", 8, 8, 6) for i in range(20_000)]
    rim.register_broker(CLUSTER, MASTER_A, "broker-a", MASTER_ID, "", DataVersion(1, 1),
                        configs)
    for topic in ("T1", "T2"):
        rim.route_entries[topic] = b"cached"
    changed = [*configs[:1], TopicConfig("T1", 4, 4, 6), *configs[2:], TopicConfig("New", 1, 1, 6)]
    del changed[5]  # T5 removed
    diff = rim.diff_queue_data("broker-a", {c.topic_name: rim_qd("broker-a", c) for c in changed})
    assert [t for t, _ in diff.upserts] == ["T1", "New"] and diff.removals == ["T5"]
    assert rim.apply_queue_data_diff("broker-a", diff)
    assert rim.topic_queue_table["T1"]["broker-a"].read_queue_nums == 4
    assert "T5" not in rim.topic_queue_table and "New" in rim.topic_queue_table
    assert "T1" not in rim.route_entries and rim.route_entries["T2"] == b"cached"
    # A diff computed against a table that changed since is not applied.
    stale = rim.diff_queue_data("broker-a", {})
    assert rim.apply_queue_data_diff("broker-a", rim.diff_queue_data("broker-a", {"X": rim_qd(
        "broker-a", TopicConfig("X", 1, 1, 6))}))
    assert not rim.apply_queue_data_diff("broker-a", stale)


def rim_qd(broker_name: str, c: TopicConfig) -> QueueData:
    return QueueData(broker_name, c.read_queue_nums, c.write_queue_nums, c.perm,
                     c.topic_sys_flag)


def test_batched_route_lookup_answers_existing_topics_and_groups_once() -> None:
    async def scenario() -> None:
        async with running_namesrv() as (controller, stub):
            await stub.RegisterBroker(request(topic_configs(3, "A")), timeout=10)
            await stub.RegisterBroker(request(topic_configs(2, "A"), broker_name="broker-b",
                                              addr="127.0.0.1:10931"), timeout=10)
            names = [c.topic_name for c in topic_configs(3, "A")]
            r = await stub.GetRouteInfoByTopics(namesrv_pb2.GetRouteInfoByTopicsRequest(
                topics=[*names, "Missing"]), timeout=10)
            assert r.status.code == common_pb2.SUCCESS
            routes = {e.topic: sorted(q.broker_name for q in e.queue_datas) for e in r.routes}
            assert routes == {names[0]: ["broker-a", "broker-b"],
                              names[1]: ["broker-a", "broker-b"], names[2]: ["broker-a"]}
            assert sorted(b.broker_name for b in r.broker_datas) == ["broker-a", "broker-b"]
            # A change of a topic's queue data shows in the next answer (cache dropped).
            changed = topic_configs(3, "A")
            changed[2].read_queue_nums = 2
            await stub.RegisterBroker(request(changed, counter=2), timeout=10)
            r = await stub.GetRouteInfoByTopics(namesrv_pb2.GetRouteInfoByTopicsRequest(
                topics=[names[2]]), timeout=10)
            assert [q.read_queue_nums for e in r.routes for q in e.queue_datas] == [2]
            # Matches the one-topic lookup.
            one = await stub.GetRouteInfoByTopic(namesrv_pb2.GetRouteInfoByTopicRequest(
                topic=names[0]), timeout=10)
            r = await stub.GetRouteInfoByTopics(namesrv_pb2.GetRouteInfoByTopicsRequest(
                topics=[names[0]]), timeout=10)
            assert list(r.routes[0].queue_datas) == list(one.topic_route_data.queue_datas)

    asyncio.run(scenario())


def test_a_bad_topic_among_unchanged_ones_is_refused_whole() -> None:
    """Only new or changed topics are checked again; a bad one still refuses the table."""
    async def scenario() -> None:
        async with running_namesrv() as (controller, stub):
            good = topic_configs(1000)
            r = await stub.RegisterBroker(request(good, compressed=True), timeout=30)
            assert r.status.code == common_pb2.SUCCESS
            bad = common_pb2.TopicConfig(topic_name="bad topic", read_queue_nums=1,
                                         write_queue_nums=1, perm=6)
            for table in ([*good, bad], [*good, good[5]]):
                r = await stub.RegisterBroker(request(table, counter=2, compressed=True),
                                              timeout=30)
                assert r.status.code == common_pb2.INVALID_PARAMETER, r.status
            rim = controller.route_info_manager
            assert len(rim.topic_queue_table) == 1000
            assert rim.broker_live_table[MASTER_A].data_version == DataVersion(1, 1)

    asyncio.run(scenario())


def test_a_large_table_with_one_change_keeps_the_other_topics_queue_data() -> None:
    """Compared by slices on the loop: the unchanged topics keep their QueueData objects
    (no 45,000 new objects for the garbage collector), the changed one is replaced."""
    async def scenario() -> None:
        async with running_namesrv() as (controller, stub):
            configs = topic_configs(3000)
            r = await stub.RegisterBroker(request(configs, compressed=True), timeout=30)
            assert r.status.code == common_pb2.SUCCESS
            rim = controller.route_info_manager
            before = rim.broker_topics["broker-a"]
            configs[2500].read_queue_nums = 2
            r = await stub.RegisterBroker(request(configs, counter=2, compressed=True),
                                          timeout=30)
            assert r.status.code == common_pb2.SUCCESS
            after = rim.broker_topics["broker-a"]
            name = configs[2500].topic_name
            assert after[name].read_queue_nums == 2 and before[name].read_queue_nums == 8
            assert rim.topic_queue_table[name]["broker-a"] is after[name]
            assert all(after[c.topic_name] is before[c.topic_name]
                       for i, c in enumerate(configs) if i != 2500)

    asyncio.run(scenario())
