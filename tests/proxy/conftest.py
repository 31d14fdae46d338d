"""Fixtures of the v2 endpoint tests: the official RocketMQ 5 Python SDK in its own
virtualenv (sdk_venv.py: made once, reused between runs), and a real name server + broker
(processes) serving v2. Without a network the SDK cannot be installed: the tests that need
it skip, saying why.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.sdk_venv import SDK_PACKAGE, SDK_VERSION, run_sdk_client, sdk_python
from tests.support.brokers import Node, broker_props, write_conf
from tests.support.processes import Process, Processes

SDK_RUN_TIMEOUT_S = 120
MAX_ATTEMPTS = 3  # grpcProxyMaxDeliveryAttempts of the test brokers


@dataclasses.dataclass
class Sdk:
    python: Path
    home: Path  # the SDK logs under ~/logs: a directory of the test session
    env: dict[str, str] = dataclasses.field(default_factory=dict)  # e.g. TLS settings

    def run(self, *args: str, timeout: float = SDK_RUN_TIMEOUT_S) -> list[dict[str, Any]]:
        """Runs sdk_client.py; its JSON lines. AssertionError with its output when it fails."""
        result, lines = run_sdk_client(self.python, self.home, list(args), timeout, self.env)
        if result.returncode != 0 or not lines or "done" not in lines[-1]:
            raise AssertionError(f"sdk_client {args[0]} exited {result.returncode}:\n"
                                 f"{result.stdout}\n{result.stderr[-3000:]}")
        return lines[:-1]

    def send(self, endpoint: str, topic: str, specs: list[dict[str, Any]]
             ) -> list[dict[str, Any]]:
        return self.run("send", endpoint, topic, json.dumps(specs))

    def receive(self, endpoint: str, topic: str, group: str, **opts: Any
                ) -> list[dict[str, Any]]:
        return self.run("receive", endpoint, topic, group, json.dumps(opts))

    def txn(self, endpoint: str, topic: str, **opts: Any) -> list[dict[str, Any]]:
        return self.run("txn", endpoint, topic, json.dumps(opts))

    def push(self, endpoint: str, topic: str, group: str, **opts: Any) -> list[dict[str, Any]]:
        return self.run("push", endpoint, topic, group, json.dumps(opts))


@pytest.fixture(scope="session")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Sdk:
    try:
        python = sdk_python()
    except (OSError, RuntimeError) as e:
        reason = f"the official SDK ({SDK_PACKAGE}=={SDK_VERSION}) cannot be installed: {e}"
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    return Sdk(python, tmp_path_factory.mktemp("sdk-home"))


@dataclasses.dataclass
class V2Broker:
    """A broker process serving v2, with stubs of its own protocol."""

    procs: Processes
    conf: Path
    process: Process
    node: Node

    @property
    def endpoint(self) -> str:
        return self.node.runtime().table["grpcProxyAddr"]

    def restart(self, *, kill: bool) -> None:
        """SIGKILL (or SIGTERM) and start again on the same store."""
        import signal  # noqa: PLC0415

        self.process.stop(signal.SIGKILL if kill else signal.SIGTERM)
        self.node.close()
        self.process = self.procs.broker(self.conf)
        self.node = Node(self.process.address)


@dataclasses.dataclass
class V2Cluster:
    procs: Processes
    tmp_path: Path
    namesrv: Process
    brokers: list[V2Broker] = dataclasses.field(default_factory=list)

    def start_broker(self, name: str = "broker-a", **props: object) -> V2Broker:
        conf = write_conf(self.tmp_path / f"{name}.conf", broker_props(
            self.tmp_path / f"store-{name}", brokerName=name,
            namesrvAddr=self.namesrv.address, flushDiskType="ASYNC_FLUSH",
            autoCreateTopicEnable=True, grpcProxyMaxDeliveryAttempts=MAX_ATTEMPTS, **props))
        process = self.procs.broker(conf)
        broker = V2Broker(self.procs, conf, process, Node(process.address))
        self.brokers.append(broker)
        return broker


@pytest.fixture
def v2_cluster(tmp_path: Path) -> Iterator[V2Cluster]:
    procs = Processes(tmp_path)
    cluster: V2Cluster | None = None
    try:
        cluster = V2Cluster(procs, tmp_path, procs.namesrv())
        yield cluster
    finally:
        if cluster is not None:
            for b in cluster.brokers:
                b.node.close()
        procs.stop_all()
