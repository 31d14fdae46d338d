"""What the name server refuses (issue 16 item 7): bad addresses, names, topic configs and
unregisters of brokers it does not know; a refused request changes nothing."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable

import grpc
import pytest

from common.constants import MASTER_ID
from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from nameserver.controller import NamesrvController
from nameserver.validation import address_problem
from tests.nameserver.registration import CLUSTER, MASTER_A, SLAVE_A, TOPIC, register_request
from tests.nameserver.test_controller import running_namesrv
from tests.support.clock import FakeTime

Request = namesrv_pb2.RegisterBrokerRequest


@pytest.mark.parametrize("address", ["127.0.0.1:10911", "[::1]:10911", "broker-a:10911",
                                     "broker_a.svc.cluster.local:1", "10.0.0.2:65535"])
def test_good_addresses(address: str) -> None:
    assert address_problem(address) is None


@pytest.mark.parametrize("address", ["not an address", "999.999.999.999:99999",
                                     "999.999.999.999:10911", "127.0.0.1:0", "127.0.0.1:",
                                     ":10911", "10911", "[::zz]:1", "bad host:1",
                                     "-a:1", "a" * 300 + ":1", "127.0.0.1:70000"])
def test_bad_addresses(address: str) -> None:
    assert address_problem(address) is not None


def _edit(fn: Callable[[Request], None], base: Request | None = None) -> Request:
    request = copy.deepcopy(base or register_request(SLAVE_A, 1))
    fn(request)
    return request


def _topic(**fields: object) -> Callable[[Request], None]:
    def edit(r: Request) -> None:
        for k, v in fields.items():
            setattr(r.topic_configs[0], k, v)
    return edit


BAD_REGISTRATIONS = {
    "address": _edit(lambda r: setattr(r, "broker_addr", "not an address")),
    "slave 9 at a bad address": _edit(lambda r: (setattr(r, "broker_addr",
                                                         "999.999.999.999:99999"),
                                                 setattr(r, "broker_id", 9))),
    "ha address": _edit(lambda r: setattr(r, "ha_server_addr", "nowhere")),
    "empty cluster": _edit(lambda r: setattr(r, "cluster_name", "")),
    "broker name with a newline": _edit(lambda r: setattr(r, "broker_name", "a\nb")),
    "negative id": _edit(lambda r: setattr(r, "broker_id", -1)),
    "empty topic name": _edit(_topic(topic_name="")),
    "bad topic name": _edit(_topic(topic_name="a topic")),
    "negative queues": _edit(_topic(read_queue_nums=-5)),
    "too many queues": _edit(_topic(write_queue_nums=1025)),
    "perm -1": _edit(_topic(perm=-1)),
    "perm 16": _edit(_topic(perm=16)),
    "topic twice": _edit(lambda r: r.topic_configs.append(r.topic_configs[0])),
}


def test_bad_registrations_are_refused_whole() -> None:
    async def scenario() -> None:
        async with running_namesrv(FakeTime()) as (controller, stub):
            assert (await stub.RegisterBroker(register_request(MASTER_A, MASTER_ID))
                    ).status.code == common_pb2.SUCCESS
            manager = controller.route_info_manager
            before = copy.deepcopy((manager.topic_queue_table, manager.broker_addr_table,
                                    manager.cluster_addr_table, set(manager.broker_live_table)))
            for name, request in BAD_REGISTRATIONS.items():
                for broker_id in (request.broker_id, MASTER_ID):  # as a slave, as the master
                    request.broker_id = broker_id if name != "negative id" else -1
                    r = await stub.RegisterBroker(request)
                    assert r.status.code == common_pb2.INVALID_PARAMETER, name
                    assert "nothing registered" in r.status.remark, name
                    after = (manager.topic_queue_table, manager.broker_addr_table,
                             manager.cluster_addr_table, set(manager.broker_live_table))
                    assert after == before, name
            route = await stub.GetRouteInfoByTopic(
                namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC))
            assert [dict(bd.broker_addrs) for bd in route.topic_route_data.broker_datas] == [
                {0: MASTER_A}]
            # The limit is the name server's setting.
            r = await stub.RegisterBroker(register_request(MASTER_A, MASTER_ID, queues=1024))
            assert r.status.code == common_pb2.SUCCESS

    asyncio.run(scenario())


def test_unregistering_an_unknown_broker_is_not_found() -> None:
    async def scenario() -> None:
        async with running_namesrv(FakeTime()) as (controller, stub):
            await stub.RegisterBroker(register_request(MASTER_A, MASTER_ID))
            manager = controller.route_info_manager
            for name, addr, broker_id in [("broker-x", MASTER_A, 0), ("broker-a", SLAVE_A, 1),
                                          ("broker-a", MASTER_A, 1), ("broker-a", "junk", 0)]:
                r = await stub.UnregisterBroker(namesrv_pb2.UnregisterBrokerRequest(
                    cluster_name=CLUSTER, broker_name=name, broker_addr=addr,
                    broker_id=broker_id))
                assert r.status.code == common_pb2.QUERY_NOT_FOUND, (name, addr, broker_id)
                assert "nothing removed" in r.status.remark
                # The master is still routed and still expires normally (live entry kept).
                assert MASTER_A in manager.broker_live_table
                assert manager.broker_addr_table["broker-a"].broker_addrs == {0: MASTER_A}
            r = await stub.UnregisterBroker(namesrv_pb2.UnregisterBrokerRequest(
                cluster_name=CLUSTER, broker_name="broker-a", broker_addr=MASTER_A,
                broker_id=0))
            assert r.status.code == common_pb2.SUCCESS
            assert manager.broker_addr_table == {} and manager.broker_live_table == {}

    asyncio.run(scenario())


def test_the_queue_limit_is_a_setting() -> None:
    async def scenario() -> None:
        controller = NamesrvController("127.0.0.1:0", max_topic_queue_nums=2048)
        address = await controller.start()
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
                r = await stub.RegisterBroker(register_request(MASTER_A, MASTER_ID, 2049))
                assert r.status.code == common_pb2.INVALID_PARAMETER
                assert "2049 read queues, outside 0..2048" in r.status.remark
                r = await stub.RegisterBroker(register_request(MASTER_A, MASTER_ID, 2048))
                assert r.status.code == common_pb2.SUCCESS
        finally:
            await controller.shutdown(grace=0)

    asyncio.run(scenario())
