"""A broker whose registration link closes leaves the route at once; a silent one still
expires after 120 s (issue 16, item 11). A slave's link hears when its master registers
anew."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from common.constants import MASTER_ID
from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from nameserver.routeinfo import DataVersion, RouteInfoManager
from tests.nameserver.registration import MASTER_A, SLAVE_A, ha_addr, register_request
from tests.support.brokers import broker_props, write_conf
from tests.support.processes import Processes

pytestmark = pytest.mark.timeout(60)


def register(manager: RouteInfoManager, peer: str) -> None:
    manager.register_broker("C", MASTER_A, "broker-a", MASTER_ID, "", DataVersion(1, 1), [],
                            peer=peer)


def test_a_closed_link_drops_the_broker_only_if_it_registered_over_it() -> None:
    manager = RouteInfoManager(clock=lambda: 0)
    register(manager, "ipv4:127.0.0.1:5001")
    # The broker restarted: the new process registered over another connection before the
    # old one's close was noticed.
    register(manager, "ipv4:127.0.0.1:5002")
    assert not manager.broker_link_closed(MASTER_A, "ipv4:127.0.0.1:5001")
    assert MASTER_A in manager.broker_live_table
    assert manager.broker_link_closed(MASTER_A, "ipv4:127.0.0.1:5002")
    assert manager.broker_live_table == {} and manager.broker_addr_table == {}
    assert not manager.broker_link_closed(MASTER_A, "ipv4:127.0.0.1:5002")


def test_a_link_closing_on_its_registration_channel_drops_the_broker_at_once() -> None:
    from nameserver.controller import NamesrvController

    async def scenario() -> None:
        async with NamesrvController("127.0.0.1:0") as controller:
            live = controller.route_info_manager.broker_live_table
            async with grpc.aio.insecure_channel(controller.listen_address) as channel:
                stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
                await stub.RegisterBroker(register_request(MASTER_A, MASTER_ID))
                link = stub.WatchBrokerLink(
                    namesrv_pb2.WatchBrokerLinkRequest(broker_addr=MASTER_A))
                await link.read()  # the link is up
                assert MASTER_A in live
            # The channel (the broker's connection) closed.
            for _ in range(100):
                if MASTER_A not in live:
                    break
                await asyncio.sleep(0.02)
            assert MASTER_A not in live

    asyncio.run(scenario())


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    p = Processes(tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


def cluster_addrs(stub: namesrv_pb2_grpc.NamesrvServiceStub) -> set[str]:
    info = stub.GetClusterInfo(namesrv_pb2.GetClusterInfoRequest(), timeout=5).cluster_info
    return {a for bd in info.broker_addr_table.values() for a in bd.broker_addrs.values()}


def test_a_killed_broker_leaves_at_once_a_stopped_one_stays(procs: Processes,
                                                           tmp_path: Path) -> None:
    namesrv = procs.namesrv()
    brokers = []
    for name in ("broker-a", "broker-b"):
        conf = write_conf(tmp_path / f"{name}.conf", broker_props(
            tmp_path / name, brokerName=name, namesrvAddr=namesrv.address))
        brokers.append(procs.broker(conf))
    killed, stopped = brokers
    with grpc.insecure_channel(namesrv.address) as channel:
        stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
        assert cluster_addrs(stub) == {killed.address, stopped.address}
        os.kill(stopped.pid, signal.SIGSTOP)  # silent, its connection open: expires later
        try:
            killed.stop(signal.SIGKILL)
            t0 = time.monotonic()
            while killed.address in cluster_addrs(stub):
                assert time.monotonic() - t0 < 3, "a killed broker stayed in the route"
                time.sleep(0.05)
            print(f"\nkilled broker left the route {time.monotonic() - t0:.2f} s after SIGKILL")
            time.sleep(1.0)
            assert cluster_addrs(stub) == {stopped.address}
        finally:
            os.kill(stopped.pid, signal.SIGCONT)


def test_a_stopping_name_server_ends_the_links_at_once_and_drops_nobody() -> None:
    from nameserver.controller import NamesrvController

    async def scenario() -> None:
        controller = NamesrvController("127.0.0.1:0")
        await controller.start()
        async with grpc.aio.insecure_channel(controller.listen_address) as channel:
            stub = namesrv_pb2_grpc.NamesrvServiceStub(channel)
            await stub.RegisterBroker(register_request(MASTER_A, MASTER_ID))
            link = stub.WatchBrokerLink(
                namesrv_pb2.WatchBrokerLinkRequest(broker_addr=MASTER_A))
            await link.read()
            t0 = time.monotonic()
            await controller.shutdown(grace=5)
            assert time.monotonic() - t0 < 1.0
            assert await link.read() == grpc.aio.EOF  # ended, not cut
            assert MASTER_A in controller.route_info_manager.broker_live_table

    asyncio.run(scenario())


def test_a_slave_link_hears_when_its_master_registers_anew() -> None:
    """Only a master that was not live (it started, or its link closed: it restarted)
    is told to the group's slaves; its keep-alives and another group's master are not."""
    from nameserver.controller import NamesrvController

    async def scenario() -> None:
        async with NamesrvController("127.0.0.1:0") as controller:
            live = controller.route_info_manager.broker_live_table
            async with grpc.aio.insecure_channel(controller.listen_address) as slave_ch, \
                    grpc.aio.insecure_channel(controller.listen_address) as other_ch:
                slave = namesrv_pb2_grpc.NamesrvServiceStub(slave_ch)
                await slave.RegisterBroker(register_request(SLAVE_A, 1))
                link = slave.WatchBrokerLink(
                    namesrv_pb2.WatchBrokerLinkRequest(broker_addr=SLAVE_A))
                first = await link.read()
                assert first.status.code == common_pb2.SUCCESS and not first.master_addr
                for _ in range(2):  # the master starts; it is killed and restarts
                    async with grpc.aio.insecure_channel(controller.listen_address) as ch:
                        master = namesrv_pb2_grpc.NamesrvServiceStub(ch)
                        await master.RegisterBroker(register_request(MASTER_A, MASTER_ID))
                        master_link = master.WatchBrokerLink(
                            namesrv_pb2.WatchBrokerLinkRequest(broker_addr=MASTER_A))
                        await master_link.read()
                        async with asyncio.timeout(5):
                            event = await link.read()
                        assert (event.master_addr, event.ha_server_addr) == (
                            MASTER_A, ha_addr(MASTER_A))
                        # A keep-alive of a live master is not news.
                        await master.RegisterBroker(register_request(MASTER_A, MASTER_ID))
                    for _ in range(100):  # its connection closed: it left the route
                        if MASTER_A not in live:
                            break
                        await asyncio.sleep(0.02)
                    assert MASTER_A not in live
                other = namesrv_pb2_grpc.NamesrvServiceStub(other_ch)
                request = register_request("127.0.0.1:10931", MASTER_ID)
                request.broker_name = "broker-b"
                await other.RegisterBroker(request)
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await link.read()

    asyncio.run(scenario())
