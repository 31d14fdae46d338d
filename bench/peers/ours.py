"""This project's cluster as a peer: `mqcluster up` in a temporary directory (a name server
and one broker group; a slave for class c), driven by mqclient's Producer and PushConsumer."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc

from bench import e2e
from bench.peers import BODY, TOPIC, Peer, Target
from bench.peers.servers import wait_until
from mqclient import Message, Producer
from mqclient.admin import MQAdmin
from mqclient.cli import mqcluster
from mqproto import common_pb2, messaging_pb2, messaging_pb2_grpc

PULL_BATCH = 256
CHUNK = 5000
SEND_TIMEOUT_S = 60.0
SYNC_WAIT_S = 60.0
DISPATCH_WAIT_S = 300.0
# class -> (flushDiskType, brokerRole of the master, slaves)
SHAPES = {"a": ("ASYNC_FLUSH", "ASYNC_MASTER", 0),
          "b": ("SYNC_FLUSH", "ASYNC_MASTER", 0),
          "c": ("ASYNC_FLUSH", "SYNC_MASTER", 1)}


def _setting(cls: str) -> str:
    flush, role, slaves = SHAPES[cls]
    return f"flushDiskType={flush}, brokerRole={role}" + (f", {slaves} slave" if slaves else "")


class OursTarget:
    def __init__(self, namesrv: str, master_addr: str, slave_addrs: Sequence[str] = ()
                 ) -> None:
        self.namesrv = namesrv
        self.master_addr = master_addr
        self.slave_addrs = list(slave_addrs)
        self.admin = MQAdmin(namesrv)
        self.dispatch_waits: dict[str, float] = {}
        # A send's timeout counts from send_async: with thousands queued in the producer, its
        # 3 s default fails on a stall of this shared machine; the peers get 30-60 s too.
        self.producer = Producer("BenchPeersProducer", namesrv, send_timeout_s=SEND_TIMEOUT_S,
                                 default_topic_queue_nums=e2e.QUEUES).start()

    def close(self) -> None:
        self.producer.shutdown()
        self.admin.close()

    def prepare(self, topics: Sequence[str]) -> None:
        """The first send creates a topic (autoCreateTopicEnable), the next ones the consume
        queue files of its other queues (sends go round-robin over the queues)."""
        for topic in topics:
            for _ in range(e2e.QUEUES):
                self.producer.send(Message(topic, BODY))
        self._wait_dispatched("prepare")

    def _wait_dispatched(self, what: str) -> None:
        """A send is acknowledged once in the commitlog; consume queues are written after
        (the reput). Waits, untimed, until the broker has caught up, so that one workload
        does not pay for the last one's backlog; keeps the longest wait per workload."""
        began = time.monotonic()
        wait_until(lambda: self.admin.broker_runtime(self.master_addr).dispatch_behind_bytes
                   == 0, DISPATCH_WAIT_S, "the broker's dispatch")
        waited = time.monotonic() - began
        self.dispatch_waits[what] = max(waited, self.dispatch_waits.get(what, 0.0))

    def extra(self) -> dict[str, float]:
        return {f"dispatch_wait_after_{k}_s": round(v, 3)
                for k, v in self.dispatch_waits.items()}

    def one_at_a_time(self, n: int) -> tuple[float, float, float]:
        figures = e2e.bench_sync(self.producer, n)
        return (figures["send_sync_msgs_s"], figures["send_sync_p50_ms"],
                figures["send_sync_p99_ms"])

    def in_flight(self, topics: Sequence[str], n: int, window: int, seconds: float
                  ) -> tuple[int, float]:
        """send_async: the producer batches what is in flight per topic (up to its
        max_inflight_batches per topic); `window` does not apply. Submitted in chunks,
        the next before the previous is waited for, so that `seconds` can stop it."""
        started = time.perf_counter()
        sent = 0
        waiting: list[Any] = []
        while sent < n and time.perf_counter() - started < seconds:
            count = min(CHUNK, n - sent)
            submitted = [self.producer.send_async(Message(topics[(sent + i) % len(topics)],
                                                          BODY)) for i in range(count)]
            sent += count
            for f in waiting:
                f.result(timeout=SEND_TIMEOUT_S)
            waiting = submitted
        for f in waiting:
            f.result(timeout=SEND_TIMEOUT_S)
        rate = sent / (time.perf_counter() - started)
        self._wait_dispatched("in_flight" if len(topics) == 1 else "many_topics")
        return sent, rate

    def before_consume(self) -> None:
        for addr in self.slave_addrs:
            _wait_topic_on_slave(addr)

    def consume(self, total: int) -> float:
        return e2e.bench_pull(self.namesrv, total, PULL_BATCH)


def _wait_topic_on_slave(addr: str) -> None:
    """Until the slave knows TOPIC (it copies the master's topics every few seconds). A
    consumer asks the slave for offsets too, and a queue whose slave answers TOPIC_NOT_EXIST
    is not taken until the next rebalance: a cost of a topic made seconds ago, not of
    consuming, so it is kept out of the timing."""
    channel = grpc.insecure_channel(addr)
    stub = messaging_pb2_grpc.MessagingServiceStub(channel)
    request = messaging_pb2.QueryConsumerOffsetRequest(consumer_group=e2e.CONSUMER_GROUP,
                                                        topic=TOPIC, queue_id=0)
    try:
        wait_until(lambda: stub.QueryConsumerOffset(request, timeout=5).status.code
                   != common_pb2.TOPIC_NOT_EXIST, SYNC_WAIT_S, f"{TOPIC} on the slave")
    finally:
        channel.close()


def _wait_slave_in_sync(namesrv: str, master_addr: str) -> None:
    with MQAdmin(namesrv) as admin:
        wait_until(lambda: admin.ha_status(master_addr).in_sync_slave_nums >= 1, SYNC_WAIT_S,
                   "the slave in sync")


@contextlib.contextmanager
def open_target(cls: str, work: Path) -> Iterator[Target]:
    flush, role, slaves = SHAPES[cls]
    directory = work / f"ours-{cls}"
    log = work / f"ours-{cls}-mqcluster.log"
    argv = ["up", "--dir", str(directory), "--namesrv-port", "0", "--flush", flush,
            "--role", role, "--slaves", str(slaves),
            "--set", f"maxTransferCountOnMessageInMemory={PULL_BATCH}",
            "--set", f"maxTransferBytesOnMessageInMemory={PULL_BATCH * 1200}"]
    try:  # `down` even when `up` failed half way (e.g. the disk filled up under it)
        with log.open("w") as out, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(out):
            code = mqcluster.main(argv)
        if code != 0:
            raise RuntimeError(f"mqcluster up failed: {log.read_text()[-500:]}")
        state = mqcluster.load_state(directory.resolve())
        assert state is not None
        layout = state[0]
        if slaves:
            _wait_slave_in_sync(layout.namesrv_addr, layout.brokers[0].address)
        target = OursTarget(layout.namesrv_addr, layout.brokers[0].address,
                            [n.address for n in layout.brokers if n.broker_id != 0])
        try:
            yield target
        finally:
            target.close()
    finally:
        with contextlib.ExitStack() as quiet:
            try:
                out = quiet.enter_context(log.open("a"))
            except OSError:  # no room for the log: stop the cluster all the same
                out = quiet.enter_context(open(os.devnull, "w"))
            quiet.enter_context(contextlib.redirect_stdout(out))
            mqcluster.main(["down", "--dir", str(directory)])


def peer() -> Peer:
    return Peer(name="ours", missing=None, settings={c: _setting(c) for c in SHAPES},
                open=open_target)

