"""NamesrvController in-process: the scan schedule and the gRPC service, on fake time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from common.constants import MASTER_ID
from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from nameserver.controller import NamesrvController, split_host_port
from nameserver.routeinfo import DataVersion
from tests.nameserver.registration import CLUSTER, MASTER_A, SLAVE_A, TOPIC, register_request
from tests.support.clock import FakeTime


@contextlib.asynccontextmanager
async def running_namesrv(
    fake_time: FakeTime,
) -> AsyncIterator[tuple[NamesrvController, namesrv_pb2_grpc.NamesrvServiceStub]]:
    controller = NamesrvController("127.0.0.1:0", clock=fake_time, sleep=fake_time.sleep)
    address = await controller.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            yield controller, namesrv_pb2_grpc.NamesrvServiceStub(channel)
    finally:
        await controller.shutdown(grace=0)


def test_split_host_port() -> None:
    assert split_host_port("0.0.0.0:9876") == ("0.0.0.0", 9876)
    assert split_host_port("[::1]:0") == ("[::1]", 0)
    for bad in ("9876", ":9876", "host:", "host:port", "host:70000"):
        with pytest.raises(ValueError):
            split_host_port(bad)


def test_scan_runs_first_after_5s_then_every_10s() -> None:
    async def scenario() -> None:
        fake_time = FakeTime()
        controller = NamesrvController(clock=fake_time, sleep=fake_time.sleep)
        manager = controller.route_info_manager
        manager.register_broker(CLUSTER, MASTER_A, "broker-a", MASTER_ID, "", DataVersion(), [])
        task = asyncio.create_task(controller.scan_not_active_broker_loop())
        try:
            await fake_time.settle()
            assert fake_time.sleeps == [5.0]
            await fake_time.advance_async(4.999)
            assert fake_time.sleeps == [5.0]
            await fake_time.advance_async(0.001)
            assert fake_time.sleeps == [5.0, 10.0]
            # Scans at 5, 15, ..., 115 s: the broker is silent for at most 115 s.
            await fake_time.advance_async(115)
            assert fake_time.sleeps == [5.0] + [10.0] * 12
            assert MASTER_A in manager.broker_live_table
            # The scan at 125 s finds it silent for 125 s > 120 s.
            await fake_time.advance_async(10)
            assert manager.broker_live_table == {}
            assert manager.broker_addr_table == {}
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


def test_scan_survives_a_failing_scan(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        fake_time = FakeTime()
        controller = NamesrvController(clock=fake_time, sleep=fake_time.sleep)
        calls: list[int] = []

        def failing_scan(now: int | None = None) -> list[str]:
            calls.append(fake_time.now_ms)
            raise RuntimeError("boom")

        controller.route_info_manager.scan_not_active_broker = failing_scan  # type: ignore[method-assign]
        task = asyncio.create_task(controller.scan_not_active_broker_loop())
        try:
            await fake_time.advance_async(25)
            assert len(calls) == 3
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(scenario())
    assert "scanNotActiveBroker failed" in caplog.text


def test_grpc_register_route_and_expiry() -> None:
    async def scenario() -> None:
        fake_time = FakeTime()
        async with running_namesrv(fake_time) as (controller, stub):
            master = await stub.RegisterBroker(register_request(MASTER_A, MASTER_ID))
            assert master.status.code == common_pb2.SUCCESS
            assert (master.master_addr, master.ha_server_addr) == ("", "")
            slave = await stub.RegisterBroker(register_request(SLAVE_A, 1))
            assert (slave.master_addr, slave.ha_server_addr) == (MASTER_A, "127.0.0.1:11911")

            route = await stub.GetRouteInfoByTopic(
                namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC)
            )
            assert route.status.code == common_pb2.SUCCESS
            assert [bd.broker_addrs for bd in route.topic_route_data.broker_datas] == [
                {0: MASTER_A, 1: SLAVE_A}
            ]

            # The slave keeps registering; the master falls silent.
            for _ in range(4):
                await fake_time.advance_async(30)
                await stub.RegisterBroker(register_request(SLAVE_A, 1))
            await fake_time.advance_async(10)
            route = await stub.GetRouteInfoByTopic(
                namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC)
            )
            assert route.status.code == common_pb2.SUCCESS
            assert [bd.broker_addrs for bd in route.topic_route_data.broker_datas] == [
                {1: SLAVE_A}
            ]

            await fake_time.advance_async(130)
            route = await stub.GetRouteInfoByTopic(
                namesrv_pb2.GetRouteInfoByTopicRequest(topic=TOPIC)
            )
            assert route.status.code == common_pb2.TOPIC_NOT_EXIST
            topics = await stub.GetAllTopicList(namesrv_pb2.GetAllTopicListRequest())
            assert list(topics.topic_list) == []

    asyncio.run(scenario())


def test_grpc_register_rejects_missing_fields() -> None:
    async def scenario() -> None:
        async with running_namesrv(FakeTime()) as (controller, stub):
            response = await stub.RegisterBroker(
                namesrv_pb2.RegisterBrokerRequest(cluster_name=CLUSTER, broker_name="broker-a")
            )
            assert response.status.code == common_pb2.INVALID_PARAMETER
            assert controller.route_info_manager.broker_addr_table == {}

    asyncio.run(scenario())


def test_grpc_unregister_and_cluster_info() -> None:
    async def scenario() -> None:
        async with running_namesrv(FakeTime()) as (_, stub):
            await stub.RegisterBroker(register_request(MASTER_A, MASTER_ID))
            await stub.RegisterBroker(register_request(SLAVE_A, 1))
            info = await stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest())
            assert list(info.cluster_info.cluster_addr_table[CLUSTER].broker_names) == [
                "broker-a"
            ]
            assert dict(info.cluster_info.broker_addr_table["broker-a"].broker_addrs) == {
                0: MASTER_A, 1: SLAVE_A,
            }

            response = await stub.UnregisterBroker(
                namesrv_pb2.UnregisterBrokerRequest(
                    cluster_name=CLUSTER, broker_name="broker-a",
                    broker_addr=MASTER_A, broker_id=MASTER_ID,
                )
            )
            assert response.status.code == common_pb2.SUCCESS
            info = await stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest())
            assert dict(info.cluster_info.broker_addr_table["broker-a"].broker_addrs) == {
                1: SLAVE_A
            }

    asyncio.run(scenario())


def test_controller_refuses_a_port_in_use() -> None:
    async def scenario() -> None:
        async with running_namesrv(FakeTime()) as (first, _):
            second = NamesrvController(first.listen_address)
            with pytest.raises(OSError):
                await second.start()
            await second.shutdown(grace=0)

    asyncio.run(scenario())


def test_undecodable_requests_answer_invalid_argument(caplog: pytest.LogCaptureFixture
                                                      ) -> None:
    """Issue 16 item 6: bytes that are not the request message (not protobuf, bad UTF-8 in
    a string field) answer INVALID_ARGUMENT with the parser's reason and log one line,
    never UNKNOWN with a traceback."""
    from tests.proto.undecodable import bad_requests, call_raw

    async def scenario() -> str:
        controller = NamesrvController("127.0.0.1:0")
        address = await controller.start()
        try:
            def run_all() -> None:
                with grpc.insecure_channel(address) as channel:
                    service = namesrv_pb2.DESCRIPTOR.services_by_name["NamesrvService"]
                    requests = bad_requests(service)
                    assert len(requests) >= 8
                    for path, streaming, payload in requests:
                        e = call_raw(channel, path, streaming, payload)
                        assert e.code() is grpc.StatusCode.INVALID_ARGUMENT, (path, e)
                        assert "undecodable" in e.details() and "\n" not in e.details()
                        if payload.endswith(b"\xff\xfe"):
                            assert "UTF-8" in e.details(), e.details()
                    # still serving
                    stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
                    r = stub.GetAllTopicList(namesrv_pb2.GetAllTopicListRequest(), timeout=10)
                    assert r.status.code == common_pb2.SUCCESS
            await asyncio.to_thread(run_all)
        finally:
            await controller.shutdown(grace=0)
        return address

    with caplog.at_level("INFO"):
        asyncio.run(scenario())
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    refused = [r for r in caplog.records if "undecodable request" in r.getMessage()]
    assert 1 <= len(refused) <= 2  # rate-limited: a line per 5 s, not one per request
