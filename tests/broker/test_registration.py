"""Registration with name servers: at start, after topic changes, periodically, and
unregistration on shutdown (name servers in this process)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mqproto import namesrv_pb2
from nameserver.controller import NamesrvController
from tests.support.brokers import BrokerThread, send
from tests.support.clock import FakeTime
from tests.support.waiting import wait_until

Start = Callable[..., BrokerThread]


class NamesrvThread:
    def __init__(self, listen: str = "127.0.0.1:0", **controller_kwargs: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.controller = NamesrvController(listen, **controller_kwargs)
        self.address = self.run(self.controller.start())

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def route(self, topic: str) -> Any:
        async def get() -> Any:
            return self.controller.route_info_manager.pickup_topic_route_data(topic)

        return self.run(get())

    def brokers(self) -> dict[str, Any]:
        async def get() -> Any:
            return dict(self.controller.route_info_manager.broker_live_table)

        return self.run(get())

    def stop(self) -> None:
        self.run(self.controller.shutdown(grace=0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def namesrvs() -> Iterator[list[NamesrvThread]]:
    started = [NamesrvThread(), NamesrvThread()]
    yield started
    for n in started:
        n.stop()


def test_registers_with_every_name_server_and_unregisters(
        namesrvs: list[NamesrvThread], start_broker: Start) -> None:
    addrs = ";".join(n.address for n in namesrvs)
    b = start_broker(namesrvAddr=addrs, haListenPort=0)  # 0: any free port, as registered
    for n in namesrvs:  # registered before start() returned
        live = n.brokers()
        assert list(live) == [b.address]
        ha_host, _, ha_port = live[b.address].ha_server_addr.rpartition(":")
        assert ha_host == "127.0.0.1" and int(ha_port) > 0
        socket.create_connection((ha_host, int(ha_port)), timeout=2).close()  # it listens
        route = n.route("broker-a")
        assert route is not None
        assert route.broker_datas[0].broker_addrs == {0: b.address}
        assert route.broker_datas[0].cluster == "TestCluster"
        assert n.route("NewTopic") is None

    send(b, "NewTopic", b"x")  # auto-create registers again at once, not in 30 s
    for n in namesrvs:
        route = wait_until(lambda n=n: n.route("NewTopic"), timeout=5,
                           message="route of the auto-created topic")
        [queue_data] = route.queue_datas
        assert (queue_data.broker_name, queue_data.write_queue_nums, queue_data.perm) == (
            "broker-a", 8, 6)

    b.stop()
    for n in namesrvs:
        assert n.brokers() == {}
        assert n.route("NewTopic") is None


def test_registers_every_period(namesrvs: list[NamesrvThread], start_broker: Start) -> None:
    fake = FakeTime()
    b = start_broker(controller_kwargs={"sleep": fake.sleep, "clock_ms": fake},
                     namesrvAddr=namesrvs[0].address)
    calls: list[int] = []
    api = b.controller.outer_api
    real = api.register_broker_all

    async def counting(request: namesrv_pb2.RegisterBrokerRequest) -> Any:
        calls.append(1)
        return await real(request)

    api.register_broker_all = counting  # type: ignore[method-assign]

    def register_sleeps() -> int:  # the other periodic tasks sleep 1 s and 5 s
        return fake.sleeps.count(30.0)

    wait_until(lambda: register_sleeps() == 1, message="the registration task to sleep")
    b.run(fake.advance_async(29))
    assert calls == []
    for n in (1, 2, 3):
        b.run(fake.advance_async(30 if n > 1 else 1))
        wait_until(lambda n=n: len(calls) == n and register_sleeps() == n + 1,
                   message=f"registration {n}")


def test_boots_without_a_reachable_name_server(start_broker: Start,
                                               caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with caplog.at_level(logging.WARNING):
        b = start_broker(namesrvAddr=dead, registerBrokerTimeoutMills=500)
    assert f"registerBroker to name server {dead} failed" in caplog.text
    assert send(b, "T", b"x").status.code == 1
