"""A name server that comes back hears from the broker at once, not at the next 30 s
registration; a failed registration is one warning per name server (issue 16, item 11)."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import grpc
import pytest

from broker.constants import REGISTER_BROKER_TIMEOUT_MS, RETRY_FAILED_REGISTER_S
from mqproto import common_pb2, namesrv_pb2, namesrv_pb2_grpc
from tests.broker.test_registration import NamesrvThread, Start
from tests.support.brokers import BrokerThread, Node, broker_props, create_topic, write_conf
from tests.support.processes import Processes
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)


def test_a_returning_name_server_is_registered_with_at_once(
        start_broker: Start, caplog: pytest.LogCaptureFixture) -> None:
    namesrv: NamesrvThread | None = NamesrvThread()
    assert namesrv is not None
    address = namesrv.address
    b: BrokerThread = start_broker(namesrvAddr=address)
    try:
        assert list(namesrv.brokers()) == [b.address]
        namesrv.stop()
        namesrv = None
        with caplog.at_level(logging.WARNING, logger="broker.registration"):
            for _ in range(3):
                assert b.run(b.controller.register_broker_all()) == 0
        failures = [r for r in caplog.records if "registerBroker to name server" in r.message]
        assert len(failures) == 1 and address in failures[0].message
        time.sleep(3)  # an outage of a few seconds: gRPC's own backoff would grow meanwhile
        t0 = time.monotonic()
        namesrv = back = NamesrvThread(address)
        wait_until(lambda: list(back.brokers()) == [b.address], timeout=5,
                   message="registration with the returned name server")
        elapsed = time.monotonic() - t0
        print(f"\nregistered {elapsed:.2f} s after the name server came back")
        assert elapsed < 4
    finally:
        if namesrv is not None:
            namesrv.stop()


def test_a_failed_registration_is_retried_within_seconds(
        processes: Processes, tmp_path: Path, nodes: list[Node]) -> None:
    """A name server paused past the registration timeout (its link stays up, so its
    return is not seen): topics created meanwhile reach it seconds after it resumes, not at
    the next 30 s registration (a trial saw them unroutable for 19 s after SIGCONT)."""
    namesrv = processes.namesrv()
    broker = processes.broker(write_conf(tmp_path / "broker.conf", broker_props(
        tmp_path / "store", namesrvAddr=namesrv.address, registerNameServerPeriod=30_000)))
    node = Node(broker.address)
    nodes.append(node)
    os.kill(namesrv.pid, signal.SIGSTOP)
    try:
        create_topic(node, "CreatedWhilePaused", 2)  # its registration times out (6 s)
        time.sleep(REGISTER_BROKER_TIMEOUT_MS / 1000 + 1)
    finally:
        os.kill(namesrv.pid, signal.SIGCONT)
    resumed = time.monotonic()

    def routable() -> bool:
        with grpc.insecure_channel(namesrv.address) as channel:
            r = namesrv_pb2_grpc.NamesrvServiceStub(channel).GetRouteInfoByTopic(
                namesrv_pb2.GetRouteInfoByTopicRequest(topic="CreatedWhilePaused"), timeout=5)
        return r.status.code == common_pb2.SUCCESS

    wait_until(routable, timeout=RETRY_FAILED_REGISTER_S + 8,
               message="the topic's route after the name server resumed")
    print(f"\nroutable {time.monotonic() - resumed:.1f} s after SIGCONT")
