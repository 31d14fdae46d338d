"""The push consumer against real name server and broker processes on loopback: sharing
queues in a group, rebalancing on join / leave, orderly listeners, broadcasting, where a
new group starts, committed offsets, and reading from the slave when the master is gone."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import grpc
import pytest

from mqclient import (
    AllocateAveragelyByCircle,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    Producer,
    PushConsumer,
)
from mqproto import common_pb2, messaging_pb2, messaging_pb2_grpc
from tests.mqclient.conftest import Cluster
from tests.support.processes import REPO_ROOT, child_env, stop_process
from tests.support.waiting import wait_until

FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
TIMEOUT_S = 30.0


class Collector:
    """A listener that records what it got, by body, and by which consumer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: Counter[bytes] = Counter()
        self.by_consumer: dict[str, list[MessageExt]] = defaultdict(list)

    def listener(self, name: str):  # type: ignore[no-untyped-def]
        def consume(msgs: list[MessageExt]) -> ConsumeStatus:
            with self.lock:
                for m in msgs:
                    self.bodies[m.body] += 1
                    self.by_consumer[name].append(m)
            return ConsumeStatus.CONSUME_SUCCESS
        return consume

    def count(self, prefix: bytes = b"") -> int:
        with self.lock:
            return sum(n for b, n in self.bodies.items() if b.startswith(prefix))

    def wait_for(self, n: int, prefix: bytes = b"", timeout: float = TIMEOUT_S) -> None:
        wait_until(lambda: self.count(prefix) >= n, timeout=timeout,
                   message=f"{n} messages {prefix!r}* consumed (got {self.count(prefix)})")


def start_consumer(consumers: list[PushConsumer], cluster: Cluster, listener: object,
                   topic: str, group: str = "CG", orderly: bool = False, **kw: object
                   ) -> PushConsumer:
    c = PushConsumer(group, cluster.namesrv_addr, **kw)  # type: ignore[arg-type]
    c.subscribe(topic)
    if orderly:
        c.register_listener_orderly(listener)  # type: ignore[arg-type]
    else:
        c.register_listener_concurrently(listener)  # type: ignore[arg-type]
    consumers.append(c)
    return c.start()


def create_topic(cluster: Cluster, topic: str, queues: int) -> Producer:
    producer = Producer("PG", cluster.namesrv_addr, default_topic_queue_nums=queues).start()
    producer.send(Message(topic, b"create"))
    return producer


def partitioned(group: list[PushConsumer], topic: str, n_queues: int) -> bool:
    shares = [c.assigned_queues(topic) for c in group]
    union: set[MessageQueue] = set().union(*shares)
    return (len(union) == n_queues and sum(map(len, shares)) == n_queues
            and all(shares))


def test_three_consumers_share_eight_queues_and_consume_each_message_once(
        cluster: Cluster, consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a")
    producer = create_topic(cluster, "TopicShare", 8)
    collector = Collector()
    group = [start_consumer(consumers, cluster, collector.listener(f"c{i}"), "TopicShare",
                            consume_from_where=FIRST, rebalance_interval_s=2)
             for i in range(3)]
    wait_until(lambda: partitioned(group, "TopicShare", 8), timeout=TIMEOUT_S,
               message="8 queues shared")
    assert sorted(len(c.assigned_queues("TopicShare")) for c in group) == [2, 3, 3]
    collector.wait_for(1, b"create")
    try:
        for i in range(600):
            producer.send(Message("TopicShare", b"m%d" % i))
    finally:
        producer.shutdown()
    collector.wait_for(600, b"m")
    time.sleep(0.5)  # a duplicate would arrive now
    with collector.lock:
        counts = {b: n for b, n in collector.bodies.items() if b.startswith(b"m")}
        assert len(counts) == 600 and set(counts.values()) == {1}
        # Each consumer got messages only from its own queues.
        for i, c in enumerate(group):
            assert {m.message_queue for m in collector.by_consumer[f"c{i}"]
                    if m.body.startswith(b"m")} <= c.assigned_queues("TopicShare")


def test_join_and_leave_rebalance_at_once(cluster: Cluster,
                                          consumers: list[PushConsumer]) -> None:
    """The rebalance period is the default 20 s; a join or a leave must be acted on long
    before it (brokers report membership changes)."""
    cluster.start_broker("broker-a")
    create_topic(cluster, "TopicJoin", 8).shutdown()
    collector = Collector()
    group = [start_consumer(consumers, cluster, collector.listener(f"c{i}"), "TopicJoin",
                            allocate_strategy=AllocateAveragelyByCircle())
             for i in range(2)]
    wait_until(lambda: partitioned(group, "TopicJoin", 8), timeout=TIMEOUT_S, message="2 consumers")
    started = time.monotonic()
    group.append(start_consumer(consumers, cluster, collector.listener("c2"), "TopicJoin",
                                allocate_strategy=AllocateAveragelyByCircle()))
    wait_until(lambda: partitioned(group, "TopicJoin", 8), timeout=TIMEOUT_S, message="3 consumers")
    joined_s = time.monotonic() - started
    leaving = group.pop(0)
    started = time.monotonic()
    leaving.shutdown()
    wait_until(lambda: partitioned(group, "TopicJoin", 8), timeout=TIMEOUT_S, message="2 left")
    left_s = time.monotonic() - started
    assert joined_s < 10 and left_s < 10, (joined_s, left_s)


def test_orderly_listener_keeps_each_key_in_order(cluster: Cluster,
                                                 consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a")
    producer = create_topic(cluster, "TopicOrderly", 4)
    seen: dict[str, list[int]] = defaultdict(list)
    active: Counter[MessageQueue] = Counter()
    overlaps: list[MessageQueue] = []
    lock = threading.Lock()
    suspended_once = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeStatus:
        mq = msgs[0].message_queue
        with lock:
            active[mq] += 1
            if active[mq] > 1:
                overlaps.append(mq)
        try:
            time.sleep(0.001)
            if not suspended_once.is_set() and msgs[0].body.endswith(b":5"):
                suspended_once.set()  # the same messages must come again, still in order
                return ConsumeStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            with lock:
                for m in msgs:
                    if b":" in m.body:  # not the topic-creating message
                        key, seq = m.body.decode().split(":")
                        seen[key].append(int(seq))
            return ConsumeStatus.CONSUME_SUCCESS
        finally:
            with lock:
                active[mq] -= 1

    for _ in range(2):
        start_consumer(consumers, cluster, listener, "TopicOrderly", orderly=True,
                       consume_from_where=FIRST, consume_message_batch_max_size=2,
                       rebalance_interval_s=2)
    keys = [f"key{k}" for k in range(6)]
    try:
        for i in range(40):
            for key in keys:
                producer.send_orderly(Message("TopicOrderly", f"{key}:{i}".encode()), key)
    finally:
        producer.shutdown()
    wait_until(lambda: all(len(seen[k]) >= 40 for k in keys), timeout=TIMEOUT_S,
               message="every key consumed")
    assert suspended_once.is_set()
    with lock:
        for key in keys:
            assert seen[key] == list(range(40)), key
        assert not overlaps


def test_broadcasting_gives_every_consumer_everything(
        cluster: Cluster, consumers: list[PushConsumer], tmp_path: Path) -> None:
    cluster.start_broker("broker-a")
    producer = create_topic(cluster, "TopicBc", 4)
    collectors = [Collector(), Collector()]
    for i, col in enumerate(collectors):
        start_consumer(consumers, cluster, col.listener(f"b{i}"), "TopicBc", group="BG",
                       message_model=MessageModel.BROADCASTING, consume_from_where=FIRST,
                       offsets_dir=tmp_path / f"offsets-{i}", persist_offset_interval_s=0.2)
    try:
        for i in range(100):
            producer.send(Message("TopicBc", b"m%d" % i))
        for col in collectors:
            col.wait_for(100, b"m")
        consumers.pop(0).shutdown()
        offsets_file = tmp_path / "offsets-0" / "BG" / "offsets.json"
        assert offsets_file.exists()
        # A restarted broadcasting consumer resumes from its file: only new messages.
        again = Collector()
        start_consumer(consumers, cluster, again.listener("b0-again"), "TopicBc", group="BG",
                       message_model=MessageModel.BROADCASTING, consume_from_where=FIRST,
                       offsets_dir=tmp_path / "offsets-0")
        time.sleep(1.0)
        producer.send(Message("TopicBc", b"late"))
        again.wait_for(1, b"late")
        collectors[1].wait_for(1, b"late")
        assert again.count(b"m") == 0 and again.count(b"create") == 0
    finally:
        producer.shutdown()
    assert collectors[1].count(b"m") == 100


def test_where_a_new_group_starts(cluster: Cluster, consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a")
    producer = create_topic(cluster, "TopicWhere", 2)
    try:
        for i in range(20):
            producer.send(Message("TopicWhere", b"old%d" % i))
        time.sleep(1.1)  # store timestamps are in ms: a clear boundary
        boundary_ms = int(time.time() * 1000)
        time.sleep(0.1)
        for i in range(10):
            producer.send(Message("TopicWhere", b"mid%d" % i))
        first, last, stamp = Collector(), Collector(), Collector()
        start_consumer(consumers, cluster, first.listener("f"), "TopicWhere", group="GF",
                       consume_from_where=FIRST)
        start_consumer(consumers, cluster, stamp.listener("t"), "TopicWhere", group="GT",
                       consume_from_where=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
                       consume_timestamp_ms=boundary_ms)
        c_last = start_consumer(consumers, cluster, last.listener("l"), "TopicWhere",
                                group="GL")
        wait_until(lambda: len(c_last.assigned_queues("TopicWhere")) == 2, timeout=TIMEOUT_S,
                   message="last-offset consumer assigned")
        time.sleep(0.5)
        for i in range(5):
            producer.send(Message("TopicWhere", b"new%d" % i))
        first.wait_for(5, b"new")
        stamp.wait_for(5, b"new")
        last.wait_for(5, b"new")
    finally:
        producer.shutdown()
    assert (first.count(b"old"), first.count(b"mid")) == (20, 10)
    assert (stamp.count(b"old"), stamp.count(b"mid")) == (0, 10)
    assert (last.count(b"old"), last.count(b"mid")) == (0, 0)


def committed_offset(address: str, group: str, topic: str, queue_id: int) -> int:
    with grpc.insecure_channel(address) as channel:
        r = messaging_pb2_grpc.MessagingServiceStub(channel).QueryConsumerOffset(
            messaging_pb2.QueryConsumerOffsetRequest(consumer_group=group, topic=topic,
                                                     queue_id=queue_id), timeout=10)
    return r.offset if r.status.code == common_pb2.SUCCESS else -1


def test_offsets_are_committed_and_a_restart_resumes(cluster: Cluster,
                                                     consumers: list[PushConsumer]) -> None:
    broker = cluster.start_broker("broker-a")
    producer = create_topic(cluster, "TopicResume", 2)
    try:
        col = Collector()
        c = start_consumer(consumers, cluster, col.listener("a"), "TopicResume",
                           consume_from_where=FIRST)
        results = [producer.send(Message("TopicResume", b"m%d" % i)) for i in range(50)]
        col.wait_for(50, b"m")
        consumers.remove(c)
        c.shutdown()  # commits at shutdown
        ends = defaultdict(int)
        for r in results:
            q = r.message_queue.queue_id
            ends[q] = max(ends[q], r.queue_offset + 1)
        assert {q: committed_offset(broker.address, "CG", "TopicResume", q)
                for q in ends} == ends
        for i in range(10):
            producer.send(Message("TopicResume", b"n%d" % i))
        again = Collector()
        start_consumer(consumers, cluster, again.listener("b"), "TopicResume",
                       consume_from_where=FIRST)
        again.wait_for(10, b"n")
        assert again.count(b"m") == 0
    finally:
        producer.shutdown()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_reads_from_the_slave_when_the_master_is_gone(
        cluster: Cluster, consumers: list[PushConsumer], signum: int) -> None:
    """Stopped, the master leaves the route at once; killed, the name server keeps it for
    120 s: either way the group reads on from the slave and commits its offsets there."""
    master = cluster.start_broker("broker-a", slaveSynchronizeInterval=300)
    slave = cluster.start_broker("broker-a", 1, slaveSynchronizeInterval=300)
    producer = create_topic(cluster, "TopicSlave", 2)
    try:
        col = Collector()
        c = start_consumer(consumers, cluster, col.listener("a"), "TopicSlave",
                           consume_from_where=FIRST)
        for i in range(30):
            producer.send(Message("TopicSlave", b"m%d" % i))
        col.wait_for(30, b"m")
        consumers.remove(c)
        c.shutdown()
        for i in range(20):
            producer.send(Message("TopicSlave", b"n%d" % i))
    finally:
        producer.shutdown()
    # The slave has every message and the group's offsets before the master goes.
    wait_until(lambda: all(committed_offset(slave.address, "CG", "TopicSlave", q) ==
                           committed_offset(master.address, "CG", "TopicSlave", q)
                           for q in range(2)), timeout=TIMEOUT_S, message="offsets synced")
    with grpc.insecure_channel(slave.address) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        wait_until(lambda: sum(stub.GetMaxOffset(messaging_pb2.GetMaxOffsetRequest(
            topic="TopicSlave", queue_id=q), timeout=10).offset for q in range(2)) == 51,
            timeout=TIMEOUT_S, message="slave caught up")
    master.stop(signum)
    again = Collector()
    c = start_consumer(consumers, cluster, again.listener("b"), "TopicSlave",
                       consume_from_where=FIRST)
    again.wait_for(20, b"n")
    time.sleep(0.3)
    assert again.count(b"m") == 0 and again.count(b"n") == 20
    consumers.remove(c)
    c.shutdown()  # commits where it can: the slave
    assert sum(committed_offset(slave.address, "CG", "TopicSlave", q) for q in range(2)) == 51


def test_a_consumer_that_dies_is_replaced_at_once(cluster: Cluster,
                                                  consumers: list[PushConsumer]) -> None:
    """A consumer process killed with SIGKILL sends no goodbye; its broker streams close and
    the broker drops it, so the rest of the group takes its queues well before the 20 s
    rebalance period (or the 120 s heartbeat expiry)."""
    cluster.start_broker("broker-a")
    create_topic(cluster, "TopicDie", 8).shutdown()
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.mqclient.consumer_child", cluster.namesrv_addr,
         "TopicDie", "CG"], cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().startswith("started")
        survivor = start_consumer(consumers, cluster, Collector().listener("s"), "TopicDie")
        wait_until(lambda: len(survivor.assigned_queues("TopicDie")) == 4, timeout=TIMEOUT_S,
                   message="the queues shared with the child")
        child.kill()
        child.wait(10)
        started = time.monotonic()
        wait_until(lambda: len(survivor.assigned_queues("TopicDie")) == 8, timeout=TIMEOUT_S,
                   message="the dead consumer's queues taken over")
        moved_s = time.monotonic() - started
        print(f"kill -9: the dead consumer's queues moved in {moved_s:.2f} s")
        # Under their broker locks: the broker released the dead consumer's at once.
        assert survivor.rebalancer is not None
        assert all(pq.locked for mq, pq in survivor.rebalancer.process_queues.items()
                   if mq.topic == "TopicDie")
        assert moved_s < 3
    finally:
        stop_process(child, 10)


def test_received_messages_carry_what_was_sent(cluster: Cluster,
                                               consumers: list[PushConsumer]) -> None:
    cluster.start_broker("broker-a")
    producer = create_topic(cluster, "TopicFields", 1)
    col = Collector()
    start_consumer(consumers, cluster, col.listener("a"), "TopicFields",
                   consume_from_where=FIRST)
    try:
        sent = producer.send(Message("TopicFields", b"payload", tags="TagA",
                                     keys=["k1", "k2"], properties={"color": "red"}))
    finally:
        producer.shutdown()
    col.wait_for(1, b"payload")
    [m] = [m for m in col.by_consumer["a"] if m.body == b"payload"]
    assert (m.topic, m.tags, m.keys, m.properties) == ("TopicFields", "TagA", ["k1", "k2"],
                                                      {"color": "red"})
    assert (m.msg_id, m.offset_msg_id) == (sent.msg_id, sent.offset_msg_id)
    assert (m.message_queue, m.queue_offset) == (sent.message_queue, sent.queue_offset)
    assert m.store_host.startswith("127.0.0.1:") and m.born_timestamp <= m.store_timestamp
    assert m.reconsume_times == 0
