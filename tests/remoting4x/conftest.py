"""Fixtures of the C++ client tests: the unmodified Apache C++ client (PyPI rocketmq 0.4.4)
in its own virtualenv (cpp_venv.py, made once and reused), and a real name server and
broker process. Without a network to install it, or when its library cannot load, the
tests skip saying why."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.remoting4x.cpp_venv import CPP_PACKAGE, CPP_VERSION, cpp_python, finish, start_cpp_client
from tests.support.brokers import Node, broker_props, write_conf
from tests.support.processes import Process, Processes

RUN_TIMEOUT_S = 90
_homes = itertools.count()


@dataclasses.dataclass
class Cpp:
    python: Path
    homes: Path  # each client process gets a HOME of its own below this

    def start(self, *args: str) -> subprocess.Popen[str]:
        return start_cpp_client(self.python, self.homes / f"h{next(_homes)}", list(args))

    def wait(self, process: subprocess.Popen[str], timeout: float = RUN_TIMEOUT_S
             ) -> list[dict[str, Any]]:
        code, lines, err = finish(process, timeout)
        if code != 0 or not lines or not lines[-1].get("done"):
            raise AssertionError(f"cpp_client exited {code}:\n{lines}\n{err}")
        return lines[:-1]

    def send(self, namesrv: str, topic: str, specs: list[dict[str, Any]], **opts: Any
             ) -> list[dict[str, Any]]:
        return self.wait(self.start("send", namesrv, topic, json.dumps(specs),
                                    json.dumps(opts)))

    def push(self, namesrv: str, topic: str, group: str, **opts: Any
             ) -> subprocess.Popen[str]:
        return self.start("push", namesrv, topic, group, json.dumps(opts))

    def received(self, process: subprocess.Popen[str], timeout: float = RUN_TIMEOUT_S
                 ) -> list[dict[str, Any]]:
        return [line for line in self.wait(process, timeout) if "body" in line]


@pytest.fixture(scope="session")
def cpp(tmp_path_factory: pytest.TempPathFactory) -> Cpp:
    try:
        python = cpp_python()
    except (OSError, RuntimeError) as e:
        reason = f"the C++ client ({CPP_PACKAGE}=={CPP_VERSION}) cannot be installed: {e}"
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    return Cpp(python, tmp_path_factory.mktemp("cpp-homes"))


@dataclasses.dataclass
class Cluster:
    namesrv: Process
    broker: Process
    node: Node

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cpp-cluster")
    procs = Processes(tmp)
    try:
        namesrv = procs.namesrv()
        conf = write_conf(tmp / "broker.conf", broker_props(
            tmp / "store", namesrvAddr=namesrv.address,
            # delay levels short enough to wait for
            messageDelayLevel="1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s"))
        broker = procs.broker(conf)
        node = Node(broker.address)
        yield Cluster(namesrv, broker, node)
        node.close()
    finally:
        procs.stop_all()
