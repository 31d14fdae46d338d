"""A real cluster for the client tests: `python -m nameserver` and `python -m broker`
processes on free loopback ports (tests/broker/conftest.py's Processes), stopped by their
own handles when the test ends."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqclient import PushConsumer
from tests.support.brokers import broker_props, write_conf
from tests.support.processes import Process, Processes

__all__ = ["Cluster"]


@dataclasses.dataclass
class Cluster:
    procs: Processes
    tmp_path: Path
    namesrv: Process
    brokers: dict[tuple[str, int], Process] = dataclasses.field(default_factory=dict)

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address

    def start_broker(self, name: str = "broker-a", broker_id: int = 0, **props: object
                     ) -> Process:
        role = "SLAVE" if broker_id else "ASYNC_MASTER"
        store = self.tmp_path / f"{name}-{broker_id}"
        conf = write_conf(self.tmp_path / f"{name}-{broker_id}.conf", broker_props(
            store, brokerName=name, brokerId=broker_id, brokerRole=role,
            namesrvAddr=self.namesrv_addr, flushDiskType="ASYNC_FLUSH",
            autoCreateTopicEnable=True, **props))
        process = self.procs.broker(conf)
        self.brokers[(name, broker_id)] = process
        return process


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A name server; brokers are started by the test with `cluster.start_broker`."""
    procs = Processes(tmp_path)
    try:
        yield Cluster(procs, tmp_path, procs.namesrv())
    finally:
        procs.stop_all()


@pytest.fixture
def consumers() -> Iterator[list[PushConsumer]]:
    """Push consumers a test started: shut down after it."""
    started: list[PushConsumer] = []
    yield started
    for c in started:
        c.shutdown()
