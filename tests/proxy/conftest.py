"""Fixtures of the v2 endpoint tests: the official RocketMQ 5 Python SDK in its own
virtualenv, and a real name server + broker (processes) serving v2.

The SDK's virtualenv is made once and reused between runs: `$MQ_SDK_VENV`, else
`.venv-sdk/` in the repository (git-ignored). Without a network it cannot be made: the
tests skip, saying why.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.conftest import (
    REPO_ROOT,
    Node,
    Process,
    Processes,
    broker_props,
    write_conf,
)

SDK_PACKAGE = "rocketmq-python-client"
SDK_VERSION = "5.1.2"  # pinned: the tests run this exact, unmodified release
SDK_SCRIPT = Path(__file__).with_name("sdk_client.py")
SDK_INSTALL_TIMEOUT_S = 600
SDK_RUN_TIMEOUT_S = 120
MAX_ATTEMPTS = 3  # grpcProxyMaxDeliveryAttempts of the test brokers


def sdk_venv_dir() -> Path:
    return Path(os.environ.get("MQ_SDK_VENV") or REPO_ROOT / ".venv-sdk")


def _make_sdk_venv(venv: Path) -> Path:
    """The SDK's python, installing it when the venv lacks it; RuntimeError saying why not."""
    python = venv / "bin" / "python"
    stamp = venv / f".installed-{SDK_PACKAGE}-{SDK_VERSION}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two sessions at once: one installs
        if stamp.exists() and python.exists():
            return python
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
            [str(python), "-m", "pip", "install", "-q", f"{SDK_PACKAGE}=={SDK_VERSION}"],
        ]
        for step in steps:
            try:
                result = subprocess.run(step, capture_output=True, text=True,
                                        timeout=SDK_INSTALL_TIMEOUT_S, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{' '.join(step)} timed out") from None
            if result.returncode != 0:
                tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
                raise RuntimeError(f"{' '.join(step[-2:])} failed: {' / '.join(tail)}")
        stamp.touch()
        return python


@dataclasses.dataclass
class Sdk:
    python: Path
    home: Path  # the SDK logs under ~/logs: a directory of the test session

    def run(self, *args: str, timeout: float = SDK_RUN_TIMEOUT_S) -> list[dict[str, Any]]:
        """Runs sdk_client.py; its JSON lines. AssertionError with its output when it fails."""
        result = subprocess.run(
            [str(self.python), str(SDK_SCRIPT), *args], capture_output=True, text=True,
            timeout=timeout, stdin=subprocess.DEVNULL, cwd=self.home,
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(self.home)})
        lines = [json.loads(line) for line in result.stdout.splitlines()
                 if line.startswith("{")]
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

    def push(self, endpoint: str, topic: str, group: str, **opts: Any) -> list[dict[str, Any]]:
        return self.run("push", endpoint, topic, group, json.dumps(opts))


@pytest.fixture(scope="session")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Sdk:
    try:
        python = _make_sdk_venv(sdk_venv_dir())
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
