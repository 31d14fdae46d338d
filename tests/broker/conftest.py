"""Fixtures of the broker tests: brokers in this process (a loop in a thread, sync stubs)
and real `python -m nameserver` / `python -m broker` processes on free loopback ports.

Every broker and process started here is stopped in the fixture's finalizer, processes by
their own Popen handle (never by name).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
import pytest

from broker.config import parse_config
from broker.controller import BrokerController
from common.constants import BROKER_BOOT_SUCCESS_PREFIX, NAMESRV_BOOT_SUCCESS_MESSAGE
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc
from tests.processes import stop_process

REPO_ROOT = Path(__file__).resolve().parents[2]
BOOT_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
RPC_TIMEOUT_S = 10.0
T = TypeVar("T")

# Small files so that rolling over happens in tests.
SMALL_STORE = {
    "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
    "mappedFileSizeConsumeQueue": str(1000 * 20),
    "maxHashSlotNum": "5000",
    "maxIndexNum": "20000",
}


def broker_props(store_dir: Path, **extra: object) -> dict[str, str]:
    props = {
        "brokerClusterName": "TestCluster",
        "brokerName": "broker-a",
        "brokerId": "0",
        "listenPort": "0",
        "bindAddress": "127.0.0.1",
        "brokerIP1": "127.0.0.1",
        "storePathRootDir": str(store_dir),
        **SMALL_STORE,
    }
    props.update({k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in extra.items()})
    return props


def write_conf(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


# -- in-process brokers ------------------------------------------------------------------------
class BrokerThread:
    """A BrokerController on its own event loop thread, with sync stubs for the test."""

    def __init__(self, props: dict[str, str], **controller_kwargs: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="broker-loop",
                                       daemon=True)
        self.thread.start()
        self.controller = BrokerController(parse_config(props, env={}), **controller_kwargs)
        self.stopped = False
        try:
            self.run(self.controller.start())
        except BaseException:
            self.stop()
            raise
        self.address = self.controller.broker_addr
        self.channel = grpc.insecure_channel(self.address)
        self.messaging = messaging_pb2_grpc.MessagingServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        """Runs `fn` on the broker's loop (controller state belongs to the loop)."""
        async def wrapper() -> T:
            return fn()

        return self.run(wrapper())

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if hasattr(self, "channel"):
            self.channel.close()
        try:
            self.run(self.controller.shutdown(grace=0.5))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerThread]]:
    """`start_broker(**broker.conf keys)` -> a BrokerThread storing under tmp_path/store."""
    started: list[BrokerThread] = []

    def start(controller_kwargs: dict[str, Any] | None = None, **props: object) -> BrokerThread:
        b = BrokerThread(broker_props(tmp_path / "store", **props), **(controller_kwargs or {}))
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


# -- real processes ----------------------------------------------------------------------------
def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))


def _wait_for_line(process: subprocess.Popen[str], prefix: str, log_path: Path) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while (remaining := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([process.stdout], [], [], remaining)
        if not readable:
            break
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"process did not boot (exit code {process.poll()}):\n"
                         f"{log_path.read_text()}")


_BROKER_BOOT = re.compile(r"The broker\[(?P<name>[^,]+), (?P<addr>[^\]]+)\] boot success")


@dataclasses.dataclass
class Process:
    process: subprocess.Popen[str]
    address: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, signum: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        return self.process.wait(timeout=timeout)

    def log_text(self) -> str:
        return self.log_path.read_text()


class Processes:
    """Starts name servers and brokers; `stop_all` stops each by its own handle."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[subprocess.Popen[str]] = []

    def _spawn(self, args: list[str], log_name: str) -> tuple[subprocess.Popen[str], Path]:
        log_path = self.tmp_path / f"{log_name}-{len(self.started)}.log"
        with log_path.open("w") as log_file:
            process = subprocess.Popen(
                [sys.executable, *args], cwd=REPO_ROOT, env=child_env(), text=True,
                stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL)
        self.started.append(process)
        return process, log_path

    def namesrv(self, *args: str) -> Process:
        process, log_path = self._spawn(["-m", "nameserver", "--listen", "127.0.0.1:0",
                                         *args], "namesrv")
        line = _wait_for_line(process, NAMESRV_BOOT_SUCCESS_MESSAGE, log_path)
        return Process(process, line.rpartition("listen=")[2], log_path)

    def broker(self, conf: Path) -> Process:
        process, log_path = self._spawn(["-m", "broker", "-c", str(conf)], "broker")
        line = _wait_for_line(process, BROKER_BOOT_SUCCESS_PREFIX, log_path)
        match = _BROKER_BOOT.match(line)
        assert match is not None, line
        return Process(process, match["addr"], log_path)

    def stop_all(self) -> None:
        for process in self.started:
            stop_process(process, STOP_TIMEOUT_S)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(interval)


def pull_everything(messaging: messaging_pb2_grpc.MessagingServiceStub, topic: str,
                    queue_id: int, sub: str = "*", group: str = "CG") -> list[Any]:
    """Everything in a queue from offset 0 (no waiting: the caller knows it is there)."""
    out: list[Any] = []
    offset = 0
    while True:
        r = messaging.PullMessage(messaging_pb2.PullMessageRequest(
            consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset,
            max_msg_nums=32, subscription=sub), timeout=RPC_TIMEOUT_S)
        if r.status.code == common_pb2.NO_NEW_MSG:
            return out
        assert r.status.code in (common_pb2.SUCCESS, common_pb2.NO_MATCHED_MSG), r.status
        out.extend(r.messages)
        assert r.next_begin_offset > offset
        offset = r.next_begin_offset


class HasAdmin(Protocol):
    admin: admin_pb2_grpc.AdminServiceStub


def create_topic(broker: HasAdmin, topic: str, queues: int) -> None:
    """A read-write topic of `queues` queues on `broker` (stubs of one), by its admin."""
    r = broker.admin.CreateOrUpdateTopic(admin_pb2.CreateOrUpdateTopicRequest(
        topic_config=common_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues,
                                            write_queue_nums=queues, perm=6)),
        timeout=RPC_TIMEOUT_S)
    assert r.status.code == common_pb2.SUCCESS, r.status


class Node:
    """Stubs of one broker process (or in-process broker) at `address`."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.channel = grpc.insecure_channel(address)
        self.messaging = messaging_pb2_grpc.MessagingServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)

    def runtime(self) -> admin_pb2.GetRuntimeInfoResponse:
        return self.admin.GetRuntimeInfo(admin_pb2.GetRuntimeInfoRequest(),
                                         timeout=RPC_TIMEOUT_S)

    def ha_status(self) -> admin_pb2.GetHAStatusResponse:
        return self.admin.GetHAStatus(admin_pb2.GetHAStatusRequest(), timeout=RPC_TIMEOUT_S)

    def create_topic(self, topic: str, queues: int) -> None:
        create_topic(self, topic, queues)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.messaging.GetMaxOffset(messaging_pb2.GetMaxOffsetRequest(
            topic=topic, queue_id=queue_id), timeout=RPC_TIMEOUT_S).offset

    def pull_all(self, topic: str, queue_id: int) -> list[Any]:
        return pull_everything(self.messaging, topic, queue_id)

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    """Node stubs the test opens (append them); closed after the test."""
    opened: list[Node] = []
    yield opened
    for n in opened:
        n.close()


__all__ = ["RPC_TIMEOUT_S", "BrokerThread", "Node", "Process", "Processes", "broker_props",
           "create_topic", "pull_everything", "wait_until", "write_conf"]
