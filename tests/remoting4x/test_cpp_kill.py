"""A broker killed with kill -9 while the C++ client sends: once it is back on its store,
every message the client saw acknowledged is there for a consumer. (The client's sends fail
from the kill until its next route refresh, up to 30 s: the name server drops the broker
from the routes when its connection closes, as Apache's does, and the client keeps the
empty route until its timer asks again.)"""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest

from tests.remoting4x.conftest import Cpp
from tests.support.brokers import Node, broker_props, write_conf
from tests.support.processes import Processes
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(300)
MESSAGES = 120


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def test_acknowledged_messages_survive_a_kill_9_mid_send(cpp: Cpp, processes: Processes,
                                                          tmp_path: Path) -> None:
    namesrv = processes.namesrv()
    port, remoting = free_ports(2)
    conf = write_conf(tmp_path / "broker.conf", broker_props(
        tmp_path / "store", namesrvAddr=namesrv.address, listenPort=port, haListenPort=0,
        sendListenPort=0, grpcProxyPort=0, remotingPort=remoting))
    broker = processes.broker(conf)
    node = Node(broker.address)
    node.create_topic("CppKill", 4)

    def stored() -> int:
        return sum(node.max_offset("CppKill", q) for q in range(4))

    producer = cpp.start("stream", namesrv.address, "CppKill", str(MESSAGES), "0.03")
    wait_until(lambda: stored() >= 30, timeout=60, message="30 messages stored")
    node.close()
    assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
    time.sleep(1.0)  # sends meanwhile fail
    broker = processes.broker(conf)
    node = Node(broker.address)
    try:
        lines = cpp.wait(producer, timeout=240)
        acked = {line["body"] for line in lines if line.get("status") == "OK"}
        failed = [line for line in lines if "error" in line]
        assert len(acked) + len(failed) == MESSAGES
        assert len(acked) >= 30, (len(acked), failed[:3])
        got = cpp.received(cpp.push(namesrv.address, "CppKill", "CG_kill",
                                    expect=len(acked), timeout_s=90, settle_s=2))
        lost = acked - {m["body"] for m in got}
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages lost: {lost}"
        assert "recovered from a crash" in broker.log_text()
    finally:
        node.close()
