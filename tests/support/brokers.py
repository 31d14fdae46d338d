"""Brokers for tests: a BrokerController on its own loop in this process (`BrokerThread`),
broker.conf properties with small store files, stubs of a broker (`Node`) and the calls most
tests make (send, pull, create a topic)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc

from broker.config import parse_config
from broker.controller import BrokerController
from mqproto import admin_pb2, admin_pb2_grpc, common_pb2, messaging_pb2, messaging_pb2_grpc

RPC_TIMEOUT_S = 10.0
T = TypeVar("T")
M = messaging_pb2
C = common_pb2

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


# -- the calls most tests make ---------------------------------------------------------------
def send(b: BrokerThread, topic: str, body: bytes, queue_id: int = 0, tag: str = "",
         **kw: object) -> messaging_pb2.SendMessageResponse:
    return b.messaging.SendMessage(M.SendMessageRequest(
        producer_group="PG", message=M.Message(topic=topic, body=body, tag=tag, **kw),
        queue_id=queue_id), timeout=10)


def pull(b: BrokerThread, topic: str, queue_id: int, offset: int, sub: str = "*",
         suspend_ms: int = 0, **kw: object) -> messaging_pb2.PullMessageResponse:
    return b.messaging.PullMessage(M.PullMessageRequest(
        consumer_group="CG", topic=topic, queue_id=queue_id, queue_offset=offset,
        max_msg_nums=32, subscription=sub, suspend_timeout_millis=suspend_ms, **kw),
        timeout=30)


def pull_all(b: BrokerThread, topic: str, queue_id: int, sub: str = "*", expect: int = 0
             ) -> list[messaging_pb2.Message]:
    """Everything in a queue from offset 0, waiting (long poll) until `expect` arrived."""
    out: list[messaging_pb2.Message] = []
    offset = 0
    while True:
        r = pull(b, topic, queue_id, offset, sub, suspend_ms=300)
        if r.status.code == C.SUCCESS:
            out.extend(r.messages)
        elif r.status.code == C.NO_NEW_MSG and len(out) >= expect:
            return out
        elif r.status.code not in (C.NO_NEW_MSG, C.NO_MATCHED_MSG):
            raise AssertionError(r.status)
        offset = r.next_begin_offset


def code(r: object) -> str:
    return C.ResponseCode.Name(r.status.code)  # type: ignore[attr-defined]
