"""RouteInfoManager with a fake clock: registration, expiry, unregister, queries."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from common.constants import MASTER_ID, PERM_READ, PERM_WRITE
from common.route import QueueData, TopicRouteData
from mqproto import common_pb2, namesrv_pb2
from nameserver.processor import NamesrvServicer
from nameserver.routeinfo import (
    DataVersion,
    RegisterBrokerResult,
    RouteInfoManager,
    TopicConfig,
    is_writeable,
)
from tests.support.clock import FakeClock

CLUSTER = "DefaultCluster"
TOPIC = "TopicTest"
PERM_RW = PERM_READ | PERM_WRITE
MASTER_A = "10.0.0.1:10911"
SLAVE_A = "10.0.0.2:10911"
MASTER_B = "10.0.0.3:10911"
VERSION_1 = DataVersion(1, 1)


def ha_addr(broker_addr: str) -> str:
    host, _, port = broker_addr.rpartition(":")
    return f"{host}:{int(port) + 1}"


def topic(name: str = TOPIC, queues: int = 4, perm: int = PERM_RW) -> TopicConfig:
    return TopicConfig(name, read_queue_nums=queues, write_queue_nums=queues, perm=perm)


def register(
    manager: RouteInfoManager,
    broker_addr: str = MASTER_A,
    broker_id: int = MASTER_ID,
    broker_name: str = "broker-a",
    version: DataVersion = VERSION_1,
    topics: list[TopicConfig] | None = None,
    cluster: str = CLUSTER,
) -> RegisterBrokerResult:
    return manager.register_broker(
        cluster_name=cluster,
        broker_addr=broker_addr,
        broker_name=broker_name,
        broker_id=broker_id,
        ha_server_addr=ha_addr(broker_addr),
        data_version=version,
        topic_configs=[topic()] if topics is None else topics,
    )


def writable_groups(route: TopicRouteData) -> list[str]:
    """Broker groups a producer can send to: writeable queues and a live master."""
    masters = {bd.broker_name for bd in route.broker_datas if bd.master_addr() is not None}
    return [
        qd.broker_name
        for qd in route.queue_datas
        if is_writeable(qd.perm) and qd.write_queue_nums > 0 and qd.broker_name in masters
    ]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manager(clock: FakeClock) -> RouteInfoManager:
    return RouteInfoManager(clock)


def test_register_master_and_slave_builds_route(manager: RouteInfoManager) -> None:
    assert register(manager) == RegisterBrokerResult()
    result = register(manager, SLAVE_A, broker_id=1)
    assert result == RegisterBrokerResult(MASTER_A, ha_addr(MASTER_A))

    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None
    assert route.queue_datas == [QueueData("broker-a", 4, 4, PERM_RW, 0)]
    assert [(bd.cluster, bd.broker_name, bd.broker_addrs) for bd in route.broker_datas] == [
        (CLUSTER, "broker-a", {0: MASTER_A, 1: SLAVE_A})
    ]
    assert writable_groups(route) == ["broker-a"]


def test_slave_without_live_master_gets_no_master_address(manager: RouteInfoManager) -> None:
    assert register(manager, SLAVE_A, broker_id=1) == RegisterBrokerResult()
    # With no master, the slave's topic configs build read-only queue data.
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None and route.queue_datas[0].perm == PERM_READ


def test_route_data_is_a_copy(manager: RouteInfoManager) -> None:
    register(manager)
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None
    route.broker_datas[0].broker_addrs.clear()
    assert manager.broker_addr_table["broker-a"].broker_addrs == {0: MASTER_A}


def test_broker_silent_119s_stays_121s_goes(manager: RouteInfoManager, clock: FakeClock) -> None:
    register(manager)
    clock.advance(119)
    assert manager.scan_not_active_broker() == []
    assert manager.pickup_topic_route_data(TOPIC) is not None

    clock.advance(2)
    # Nothing changes between scans: expiry happens when the scan runs.
    assert MASTER_A in manager.broker_live_table
    assert manager.scan_not_active_broker() == [MASTER_A]
    assert manager.pickup_topic_route_data(TOPIC) is None
    assert manager.broker_live_table == {}
    assert manager.broker_addr_table == {}
    assert manager.cluster_addr_table == {}
    assert manager.get_all_topic_list() == []


def test_registration_is_the_heartbeat(manager: RouteInfoManager, clock: FakeClock) -> None:
    register(manager)
    clock.advance(100)
    register(manager)
    clock.advance(119)
    assert manager.scan_not_active_broker() == []
    clock.advance(2)
    assert manager.scan_not_active_broker() == [MASTER_A]


def test_scan_takes_an_explicit_now(manager: RouteInfoManager, clock: FakeClock) -> None:
    register(manager)
    assert manager.scan_not_active_broker(clock.now_ms + 119_000) == []
    assert manager.scan_not_active_broker(clock.now_ms + 121_000) == [MASTER_A]


def test_master_gone_slave_stays_and_producers_see_no_master(
    manager: RouteInfoManager, clock: FakeClock
) -> None:
    register(manager)
    register(manager, SLAVE_A, broker_id=1)
    clock.advance(60)
    register(manager, SLAVE_A, broker_id=1)
    clock.advance(61)
    assert manager.scan_not_active_broker() == [MASTER_A]

    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None, "the slave keeps the topic routable for consumers"
    assert route.queue_datas == [QueueData("broker-a", 4, 4, PERM_RW, 0)]
    assert [bd.broker_addrs for bd in route.broker_datas] == [{1: SLAVE_A}]
    assert route.broker_datas[0].master_addr() is None
    assert writable_groups(route) == []
    assert manager.get_all_cluster_info().cluster_addr_table == {CLUSTER: {"broker-a"}}
    # A slave registering now is told there is no master.
    assert register(manager, SLAVE_A, broker_id=1) == RegisterBrokerResult()

    clock.advance(121)
    assert manager.scan_not_active_broker() == [SLAVE_A]
    assert manager.pickup_topic_route_data(TOPIC) is None
    assert manager.get_all_cluster_info().cluster_addr_table == {}


def test_master_returns_after_expiry_rebuilds_route(
    manager: RouteInfoManager, clock: FakeClock
) -> None:
    register(manager, topics=[topic(queues=4)])
    register(manager, SLAVE_A, broker_id=1)
    clock.advance(121)
    register(manager, SLAVE_A, broker_id=1)
    assert manager.scan_not_active_broker() == [MASTER_A]
    register(manager, topics=[topic(queues=8)])  # same data version as before
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None
    assert route.queue_datas[0].write_queue_nums == 8
    assert writable_groups(route) == ["broker-a"]


def test_slave_back_alone_makes_its_group_readable_until_the_master_returns(
    manager: RouteInfoManager, clock: FakeClock
) -> None:
    """Master and slave both gone, the slave restarted alone: as RocketMQ 5's prime slave,
    its topic table makes the group readable (read-only), so consumers reach what only it
    stores; the master's return makes it writable again."""
    register(manager)
    register(manager, SLAVE_A, broker_id=1)
    clock.advance(121)
    assert sorted(manager.scan_not_active_broker()) == [MASTER_A, SLAVE_A]
    assert manager.pickup_topic_route_data(TOPIC) is None

    register(manager, SLAVE_A, broker_id=1)
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None
    assert route.queue_datas == [QueueData("broker-a", 4, 4, PERM_READ, 0)]
    assert [bd.broker_addrs for bd in route.broker_datas] == [{1: SLAVE_A}]
    assert writable_groups(route) == []

    register(manager)  # same data version as the slave's
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None and route.queue_datas[0].perm == PERM_RW
    assert writable_groups(route) == ["broker-a"]
    register(manager, SLAVE_A, broker_id=1)  # no longer the prime slave
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None and route.queue_datas[0].perm == PERM_RW


def test_same_data_version_does_not_rebuild_queue_data(manager: RouteInfoManager) -> None:
    register(manager, version=DataVersion(1, 1), topics=[topic(queues=4)])
    register(manager, version=DataVersion(1, 1), topics=[topic(queues=8), topic("Other")])
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None and route.queue_datas[0].write_queue_nums == 4
    assert manager.pickup_topic_route_data("Other") is None

    register(manager, version=DataVersion(1, 2), topics=[topic(queues=8), topic("Other")])
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None and route.queue_datas[0].write_queue_nums == 8
    assert manager.get_all_topic_list() == ["Other", TOPIC]
    assert manager.query_broker_topic_config(MASTER_A) == DataVersion(1, 2)


def test_new_data_version_drops_topics_the_master_no_longer_has(
    manager: RouteInfoManager,
) -> None:
    register(manager, MASTER_B, broker_name="broker-b", topics=[topic()])
    register(manager, version=DataVersion(1, 1), topics=[topic(), topic("Other")])
    register(manager, version=DataVersion(1, 2), topics=[topic("Other")])
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None
    assert [qd.broker_name for qd in route.queue_datas] == ["broker-b"]
    assert manager.pickup_topic_route_data("Other") is not None


def test_slave_topic_configs_never_rebuild_queue_data(manager: RouteInfoManager) -> None:
    register(manager, version=DataVersion(1, 1), topics=[topic(queues=4)])
    register(
        manager, SLAVE_A, broker_id=1, version=DataVersion(9, 9),
        topics=[topic(queues=16), topic("SlaveOnly")],
    )
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None and route.queue_datas[0].write_queue_nums == 4
    assert manager.pickup_topic_route_data("SlaveOnly") is None
    # Nor does a slave registering with no topics remove the master's.
    register(manager, SLAVE_A, broker_id=1, version=DataVersion(9, 10), topics=[])
    assert manager.pickup_topic_route_data(TOPIC) is not None


def test_new_address_for_existing_id_replaces_old(
    manager: RouteInfoManager, clock: FakeClock
) -> None:
    new_master = "10.0.0.9:10911"
    register(manager, topics=[topic(queues=4)])
    register(manager, SLAVE_A, broker_id=1)
    # Same data version, but a new address is a first registration: queue data rebuilt.
    register(manager, new_master, topics=[topic(queues=8)])

    assert manager.broker_addr_table["broker-a"].broker_addrs == {0: new_master, 1: SLAVE_A}
    assert MASTER_A not in manager.broker_live_table
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None and route.queue_datas[0].write_queue_nums == 8
    assert register(manager, SLAVE_A, broker_id=1).master_addr == new_master
    # A late unregister from the old address leaves the new one alone.
    assert not manager.unregister_broker(CLUSTER, MASTER_A, "broker-a", MASTER_ID)
    assert manager.broker_addr_table["broker-a"].broker_addrs[0] == new_master
    # And the old address never expires anything.
    clock.advance(60)
    register(manager, new_master)
    register(manager, SLAVE_A, broker_id=1)
    clock.advance(61)
    assert manager.scan_not_active_broker() == []


def test_one_address_has_one_id(manager: RouteInfoManager) -> None:
    register(manager, SLAVE_A, broker_id=1)
    register(manager, SLAVE_A, broker_id=MASTER_ID)  # slave promoted to master
    assert manager.broker_addr_table["broker-a"].broker_addrs == {0: SLAVE_A}


def test_unregister(manager: RouteInfoManager) -> None:
    register(manager)
    register(manager, SLAVE_A, broker_id=1)
    register(manager, MASTER_B, broker_name="broker-b")

    assert manager.unregister_broker(CLUSTER, MASTER_A, "broker-a", MASTER_ID)
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None
    assert sorted(qd.broker_name for qd in route.queue_datas) == ["broker-a", "broker-b"]
    assert {bd.broker_name: bd.broker_addrs for bd in route.broker_datas} == {
        "broker-a": {1: SLAVE_A},
        "broker-b": {0: MASTER_B},
    }
    assert writable_groups(route) == ["broker-b"]

    assert manager.unregister_broker(CLUSTER, SLAVE_A, "broker-a", 1)
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None
    assert [qd.broker_name for qd in route.queue_datas] == ["broker-b"]
    assert manager.get_all_cluster_info().cluster_addr_table == {CLUSTER: {"broker-b"}}

    assert manager.unregister_broker(CLUSTER, MASTER_B, "broker-b", MASTER_ID)
    assert manager.pickup_topic_route_data(TOPIC) is None
    assert manager.cluster_addr_table == {}
    assert not manager.unregister_broker(CLUSTER, MASTER_B, "broker-b", MASTER_ID)


def test_expiry_of_one_group_keeps_the_others(
    manager: RouteInfoManager, clock: FakeClock
) -> None:
    register(manager)
    clock.advance(100)
    register(manager, MASTER_B, broker_name="broker-b")
    clock.advance(21)
    assert manager.scan_not_active_broker() == [MASTER_A]
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None
    assert [qd.broker_name for qd in route.queue_datas] == ["broker-b"]
    assert [bd.broker_name for bd in route.broker_datas] == ["broker-b"]


def test_cluster_info_and_topic_list(manager: RouteInfoManager) -> None:
    register(manager, topics=[topic("T2"), topic("T1")])
    register(manager, SLAVE_A, broker_id=1)
    register(manager, MASTER_B, broker_name="broker-b", cluster="OtherCluster",
             topics=[topic("T3")])
    info = manager.get_all_cluster_info()
    assert info.cluster_addr_table == {CLUSTER: {"broker-a"}, "OtherCluster": {"broker-b"}}
    assert {name: bd.broker_addrs for name, bd in info.broker_addr_table.items()} == {
        "broker-a": {0: MASTER_A, 1: SLAVE_A},
        "broker-b": {0: MASTER_B},
    }
    assert info.broker_addr_table["broker-b"].cluster == "OtherCluster"
    assert manager.get_all_topic_list() == ["T1", "T2", "T3"]


def test_log_lines(manager: RouteInfoManager, clock: FakeClock,
                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="nameserver")
    register(manager)
    register(manager)  # heartbeat: no line
    register(manager, SLAVE_A, broker_id=1)
    manager.unregister_broker(CLUSTER, SLAVE_A, "broker-a", 1)
    clock.advance(121)
    manager.scan_not_active_broker()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4, messages
    assert messages[0].startswith(f"new broker registered, {MASTER_A}")
    assert messages[1].startswith(f"new broker registered, {SLAVE_A}")
    assert messages[2].startswith(f"unregisterBroker {SLAVE_A}")
    assert messages[3].startswith(f"The broker channel expired, {MASTER_A}")


def test_route_for_unknown_topic_is_topic_not_exist(manager: RouteInfoManager) -> None:
    register(manager)
    assert manager.pickup_topic_route_data("NoSuchTopic") is None

    servicer = NamesrvServicer(manager)
    request = namesrv_pb2.GetRouteInfoByTopicRequest(topic="NoSuchTopic")
    response = asyncio.run(servicer.GetRouteInfoByTopic(request, None))  # type: ignore[arg-type]
    assert response.status.code == common_pb2.TOPIC_NOT_EXIST
    assert "NoSuchTopic" in response.status.remark
    assert not response.HasField("topic_route_data")

    request = namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC)
    response = asyncio.run(servicer.GetRouteInfoByTopic(request, None))  # type: ignore[arg-type]
    assert response.status.code == common_pb2.SUCCESS
    assert [qd.broker_name for qd in response.topic_route_data.queue_datas] == ["broker-a"]


def test_prime_slave_through_the_register_call(manager: RouteInfoManager,
                                               clock: FakeClock) -> None:
    """The same through RegisterBroker as brokers call it (the table taken by the
    processor, in parts)."""
    servicer = NamesrvServicer(manager)
    context = SimpleNamespace(peer=lambda: "")

    def call(addr: str, broker_id: int) -> None:
        request = namesrv_pb2.RegisterBrokerRequest(
            cluster_name=CLUSTER, broker_addr=addr, broker_name="broker-a",
            broker_id=broker_id, ha_server_addr=ha_addr(addr),
            data_version=common_pb2.DataVersion(timestamp=1, counter=1),
            topic_configs=[common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=4,
                                                  write_queue_nums=4, perm=PERM_RW)])
        response = asyncio.run(servicer.RegisterBroker(request, context))  # type: ignore[arg-type]
        assert response.status.code == common_pb2.SUCCESS

    call(MASTER_A, MASTER_ID)
    call(SLAVE_A, 1)
    clock.advance(121)
    assert sorted(manager.scan_not_active_broker()) == [MASTER_A, SLAVE_A]
    call(SLAVE_A, 1)
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None and route.queue_datas[0].perm == PERM_READ
    call(MASTER_A, MASTER_ID)
    route = manager.pickup_topic_route_data(TOPIC)
    assert route is not None and route.queue_datas[0].perm == PERM_RW
