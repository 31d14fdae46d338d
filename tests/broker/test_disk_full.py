"""A real broker process whose store is on a small tmpfs (mounted by the test) that a producer
fills: the broker stays alive, refuses sends with SERVICE_NOT_AVAILABLE naming the full disk,
keeps serving pulls and consumers, says so in one log line; config files that cannot be
written are part of the same state; once space is freed, writes resume and the config files
are written. Then `mqstore inspect` reads the store on the full disk without touching a hole.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from mqclient import ConsumeFromWhere, ConsumeStatus, Message, MQClientError, Producer, PushConsumer
from mqproto import admin_pb2, common_pb2, messaging_pb2
from store.inspect import inspect_store
from tests.support.brokers import RPC_TIMEOUT_S, Node, broker_props, write_conf
from tests.support.processes import Processes
from tests.support.small_fs import fill, free_bytes, mounted_tmpfs, run_in_child
from tests.support.waiting import wait_until

C = common_pb2
TOPIC = "DiskTopic"
BODY = b"x" * 1024
MAX_SENDS = 20_000  # ~20 MiB: more than the file system holds


def send_raw(node: Node, i: int) -> messaging_pb2.SendMessageResponse:
    return node.messaging.SendMessage(messaging_pb2.SendMessageRequest(
        producer_group="PG", message=messaging_pb2.Message(topic=TOPIC, body=b"raw-%d" % i),
        queue_id=0), timeout=RPC_TIMEOUT_S)


def disk_full_lines(log_text: str) -> list[str]:
    return [line for line in log_text.splitlines() if "disk full" in line]


def inspect_full_disk(store: Path, disk: Path) -> None:
    ballast = fill(disk, name="inspect-ballast")
    before = free_bytes(disk)
    report = inspect_store(store)
    assert report.problem_count == 0, report.problems[:3]
    assert report.records > 0
    assert free_bytes(disk) == before
    ballast.unlink()


def test_broker_on_a_full_disk(tmp_path: Path, processes: Processes) -> None:
    with mounted_tmpfs(tmp_path / "disk", "16m") as disk:
        try:
            run_full_disk_scenario(tmp_path, disk, processes)
        finally:
            processes.stop_all()  # before the unmount


def run_full_disk_scenario(tmp_path: Path, disk: Path, processes: Processes) -> None:
    namesrv = processes.namesrv()
    props = broker_props(
        disk / "store", namesrvAddr=namesrv.address,
        mappedFileSizeCommitLog=1024 * 1024,
        # Never delete files for space nor refuse writes by the used ratio: the disk fills.
        diskMaxUsedSpaceRatio=100, diskSpaceCleanForciblyRatio=100,
        diskSpaceWarningLevelRatio=100,
        flushConsumerOffsetInterval=500)
    broker = processes.broker(write_conf(tmp_path / "broker.conf", props))
    node = Node(broker.address)
    producer = Producer("PG", namesrv.address, retry_times_when_send_failed=0).start()
    consumed: set[bytes] = set()
    lock = threading.Lock()

    def listener(msgs: list[object]) -> ConsumeStatus:
        with lock:
            consumed.update(m.body for m in msgs)  # type: ignore[attr-defined]
        return ConsumeStatus.CONSUME_SUCCESS

    consumer: PushConsumer | None = None
    try:
        node.create_topic(TOPIC, 2)
        sent: list[bytes] = []
        ballast = fill(disk, leave=3 * 1024 * 1024)
        # A producer fills the disk.
        error: MQClientError | None = None
        deadline = time.monotonic() + 120
        while error is None:
            body = b"%06d|" % len(sent) + BODY
            try:
                producer.send(Message(TOPIC, body))
            except MQClientError as e:
                error = e
                break
            sent.append(body)
            assert len(sent) < MAX_SENDS and time.monotonic() < deadline, "the disk never filled"
        # Retried on every broker of the topic (here one), each answering the full disk.
        assert "broker-a: SERVICE_NOT_AVAILABLE" in error.message, error
        assert "disk full" in error.message, error
        assert broker.process.poll() is None, broker.log_text()
        # Every send is refused now, each with the reason; nothing is logged per send.
        for i in range(50):
            r = send_raw(node, i)
            assert r.status.code == C.SERVICE_NOT_AVAILABLE, r.status
            assert "disk full" in r.status.remark, r.status
        # Consumers go on: everything stored is delivered.
        consumer = PushConsumer("CG", namesrv.address,
                                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                                persist_offset_interval_s=0.5)
        consumer.subscribe(TOPIC)
        consumer.register_listener_concurrently(listener)
        consumer.start()
        wait_until(lambda: len(consumed) >= len(sent), timeout=30,
                   message=f"{len(sent)} stored messages consumed")
        assert consumed == set(sent)
        # The config files fail too once the last bytes are gone: the same state.
        ballast_rest = fill(disk, name="ballast-rest")
        r = node.admin.CreateOrUpdateTopic(admin_pb2.CreateOrUpdateTopicRequest(
            topic_config=C.TopicConfig(topic_name="NewTopic", read_queue_nums=1,
                                       write_queue_nums=1, perm=6)), timeout=RPC_TIMEOUT_S)
        assert r.status.code == C.SERVICE_NOT_AVAILABLE, r.status
        assert "disk full" in r.status.remark, r.status
        time.sleep(1.5)  # consumerOffset.json is due (every 0.5 s) and cannot be written
        assert broker.process.poll() is None, broker.log_text()
        log_text = broker.log_text()
        assert len(disk_full_lines(log_text)) == 1, log_text
        assert "Traceback" not in log_text, log_text
        # Space comes back: writes resume, the config files are written.
        ballast.unlink()
        ballast_rest.unlink()
        wait_until(lambda: send_raw(node, 0).status.code == C.SUCCESS, timeout=15,
                   interval=0.2, message="sends to be stored again")
        for i in range(100):
            body = b"after-%06d|" % i + BODY
            producer.send(Message(TOPIC, body))
            sent.append(body)
        wait_until(lambda: set(sent) <= consumed, timeout=30,
                   message="the messages sent after space came back consumed")
        config = disk / "store" / "config"
        wait_until(lambda: "NewTopic" in (config / "topics.json").read_text(), timeout=15,
                   message="topics.json written with the topic created on the full disk")
        wait_until(lambda: f"{TOPIC}@CG" in (config / "consumerOffset.json").read_text(),
                   timeout=15, message="consumerOffset.json written with CG's offsets")
        log_text = broker.log_text()
        assert len(disk_full_lines(log_text)) == 1, log_text
        assert log_text.count("accepts writes again") == 1, log_text
        assert "Traceback" not in log_text, log_text
    finally:
        if consumer is not None:
            consumer.shutdown()
        producer.shutdown()
        node.close()
    assert broker.stop() == 0, broker.log_text()
    # The store on the full disk, read by mqstore inspect: no hole read, no space taken.
    run_in_child(inspect_full_disk, disk / "store", disk)

