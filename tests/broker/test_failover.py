"""Replication and failover with real processes on loopback (SPEC §5, issue 5): a name
server, a SYNC_MASTER or ASYNC_MASTER and a SLAVE, each `python -m ...` on free ports.

The consumer side is written with raw gRPC pulls and offset commits, as a client does
when its master is gone: pull from the slave at its own offsets, commit to the slave.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import signal
import threading
import time
from pathlib import Path

from mqproto import admin_pb2, common_pb2, messaging_pb2
from tests.broker.test_ha import topic_list
from tests.support.brokers import RPC_TIMEOUT_S, Node, broker_props, write_conf
from tests.support.processes import Process, Processes
from tests.support.waiting import wait_until

M = messaging_pb2
A = admin_pb2
C = common_pb2
TOPIC = "FailoverTopic"
MIB = 1024 * 1024
QUEUES = 4
BATCH = 32
FILE_SIZE = 2 * 1024 * 1024
GROUP = "FailoverGroup"


def start_node(processes: Processes, nodes: list[Node], conf: Path) -> tuple[Process, Node]:
    proc = processes.broker(conf)
    node = Node(proc.address)
    nodes.append(node)
    return proc, node


def commitlog_files(store_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((store_dir / "commitlog").iterdir())}


def send_batch(node: Node, bodies: list[bytes], queue_id: int) -> M.SendBatchResponse:
    return node.messaging.SendBatch(M.SendBatchRequest(
        producer_group="PG", topic=TOPIC, queue_id=queue_id,
        messages=[M.Message(topic=TOPIC, body=b) for b in bodies]), timeout=RPC_TIMEOUT_S)


def queue_max(node: Node, queue_id: int) -> int:
    r = node.messaging.GetMaxOffset(M.GetMaxOffsetRequest(topic=TOPIC, queue_id=queue_id),
                                    timeout=RPC_TIMEOUT_S)
    return r.offset if r.status.code == C.SUCCESS else -1


def committed(node: Node, queue_id: int) -> int:
    r = node.messaging.QueryConsumerOffset(M.QueryConsumerOffsetRequest(
        consumer_group=GROUP, topic=TOPIC, queue_id=queue_id), timeout=RPC_TIMEOUT_S)
    return r.offset if r.status.code == C.SUCCESS else -1


def commit(node: Node, queue_id: int, offset: int) -> None:
    r = node.messaging.UpdateConsumerOffset(M.UpdateConsumerOffsetRequest(
        consumer_group=GROUP, topic=TOPIC, queue_id=queue_id, commit_offset=offset),
        timeout=RPC_TIMEOUT_S)
    assert r.status.code == C.SUCCESS, r.status


def pull_batch(node: Node, queue_id: int, offset: int) -> M.PullMessageResponse:
    return node.messaging.PullMessage(M.PullMessageRequest(
        consumer_group=GROUP, topic=TOPIC, queue_id=queue_id, queue_offset=offset,
        max_msg_nums=32, subscription="*"), timeout=RPC_TIMEOUT_S)


class Consumer:
    """Per queue: the next offset to pull and every (queue offset, body) consumed."""

    def __init__(self) -> None:
        self.next_offset = dict.fromkeys(range(QUEUES), 0)
        self.consumed: dict[int, list[tuple[int, bytes]]] = {q: [] for q in range(QUEUES)}

    def consume(self, node: Node, queue_id: int, until: int) -> None:
        """Pulls `queue_id` from `node` until the next offset reaches `until`, committing
        each batch; the broker must hand out every offset in turn (no skip)."""
        deadline = time.monotonic() + 30
        while self.next_offset[queue_id] < until:
            assert time.monotonic() < deadline, f"queue {queue_id} stuck"
            offset = self.next_offset[queue_id]
            r = pull_batch(node, queue_id, offset)
            if r.status.code != C.SUCCESS:
                assert r.status.code in (C.NO_NEW_MSG, C.NO_MATCHED_MSG), r.status
                time.sleep(0.02)
                continue
            got = [m.system_properties.queue_offset for m in r.messages]
            assert got == list(range(offset, offset + len(got))), (queue_id, offset, got)
            self.consumed[queue_id].extend((m.system_properties.queue_offset, m.body)
                                           for m in r.messages)
            self.next_offset[queue_id] = r.next_begin_offset
            commit(node, queue_id, r.next_begin_offset)

    def bodies(self) -> set[bytes]:
        return {b for q in self.consumed.values() for _, b in q}


def test_sync_master_50000_messages_slave_commitlog_is_byte_identical(
        processes: Processes, tmp_path: Path, nodes: list[Node]) -> None:
    namesrv = processes.namesrv()
    common = {"namesrvAddr": namesrv.address, "mappedFileSizeCommitLog": FILE_SIZE}
    master_proc, master = start_node(processes, nodes, write_conf(
        tmp_path / "master.conf", broker_props(tmp_path / "master", brokerRole="SYNC_MASTER",
                                               **common)))
    master.create_topic(TOPIC, QUEUES)
    slave_proc, slave = start_node(processes, nodes, write_conf(
        tmp_path / "slave.conf", broker_props(tmp_path / "slave", brokerRole="SLAVE",
                                              brokerId=1, **common)))
    wait_until(lambda: master.ha_status().in_sync_slave_nums == 1, timeout=20,
               message="the slave in sync")

    total = 50_000
    batches = [(i, [b"msg-%06d-" % n + b"z" * (n % 200) for n in range(i, min(i + BATCH, total))])
               for i in range(0, total, BATCH)]

    def send(item: tuple[int, list[bytes]]) -> int:
        i, bodies = item
        r = send_batch(master, bodies, (i // BATCH) % QUEUES)
        return r.status.code

    begin = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(send, batches))
    elapsed = time.monotonic() - begin
    assert codes == [C.SUCCESS] * len(batches)  # every batch acked by the slave
    print(f"50,000 messages to a SYNC_MASTER in {elapsed:.1f} s")

    master_max = master.runtime().commit_log_max_offset
    assert master_max > 2 * FILE_SIZE
    assert slave.runtime().commit_log_max_offset == master_max
    wait_until(lambda: sum(queue_max(slave, q) for q in range(QUEUES)) == total, timeout=20,
               message="dispatch on the slave")
    assert [queue_max(slave, q) for q in range(QUEUES)] == [
        queue_max(master, q) for q in range(QUEUES)]

    # Cleanly stopped (everything flushed), the two commitlogs are the same bytes.
    assert slave_proc.stop() == 0 and master_proc.stop() == 0
    master_files = commitlog_files(tmp_path / "master")
    slave_files = commitlog_files(tmp_path / "slave")
    assert len(slave_files) >= 3
    for name, data in slave_files.items():
        assert master_files.get(name) == data, f"commitlog file {name} differs"
    extra = set(master_files) - set(slave_files)  # only a pre-allocated, empty next file
    assert all(not any(master_files[n]) for n in extra)


def test_master_killed_mid_stream_slave_serves_what_was_acked_and_master_catches_up(
        processes: Processes, tmp_path: Path, nodes: list[Node]) -> None:
    namesrv = processes.namesrv()
    common = {"namesrvAddr": namesrv.address, "mappedFileSizeCommitLog": FILE_SIZE,
              "registerNameServerPeriod": 500, "flushConsumerOffsetInterval": 200}
    master_conf = write_conf(tmp_path / "master.conf", broker_props(
        tmp_path / "master", brokerRole="SYNC_MASTER", **common))
    master_proc, master = start_node(processes, nodes, master_conf)
    master.create_topic(TOPIC, QUEUES)
    # slaveReadEnable=false: the slave serves pulls only because its master is gone.
    slave_proc, slave = start_node(processes, nodes, write_conf(
        tmp_path / "slave.conf", broker_props(tmp_path / "slave", brokerRole="SLAVE",
                                              brokerId=1, slaveSynchronizeInterval=500,
                                              **common)))
    wait_until(lambda: master.ha_status().in_sync_slave_nums == 1, timeout=20,
               message="the slave in sync")
    wait_until(lambda: topic_list(slave).topic_configs == topic_list(master).topic_configs,
               timeout=20, message="the topic configs copied to the slave")

    # Producers send until the master dies; every SEND_OK is remembered.
    acked: list[tuple[int, int, bytes]] = []  # queue id, queue offset, body
    acked_lock = threading.Lock()
    stop_sending = threading.Event()
    counter = itertools.count()

    def produce() -> None:
        while not stop_sending.is_set():
            n = next(counter)
            bodies = [b"fo-%07d-%02d" % (n, k) for k in range(4)]
            try:
                r = send_batch(master, bodies, n % QUEUES)
            except Exception:  # the master is gone
                return
            if r.status.code == C.SUCCESS:
                with acked_lock:
                    acked.extend((e.queue_id, e.queue_offset, b)
                                 for e, b in zip(r.results, bodies, strict=True))

    consumer = Consumer()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        producers = [pool.submit(produce) for _ in range(4)]
        try:
            wait_until(lambda: len(acked) >= 2000, timeout=30, message="sends before the kill")
            # The consumer keeps up on the master for a while, committing there.
            for q in range(QUEUES):
                consumer.consume(master, q, until=max(1, queue_max(master, q) // 2))
            committed_on_master = [committed(master, q) for q in range(QUEUES)]
            assert all(o > 0 for o in committed_on_master)
            wait_until(lambda: [committed(slave, q) for q in range(QUEUES)]
                       == committed_on_master, timeout=10,
                       message="the master's offsets copied to the slave")
            assert master_proc.stop(signal.SIGKILL) == -signal.SIGKILL  # mid-stream
        finally:
            stop_sending.set()
            for f in producers:
                f.result(timeout=30)
    acked_before_kill = list(acked)
    assert len(acked_before_kill) >= 2000

    # The slave sees its master gone and serves reads; every acked send is there.
    wait_until(lambda: not slave.ha_status().ha_client_info.connected, timeout=10,
               message="the slave to see its master gone")
    slave_max = {q: queue_max(slave, q) for q in range(QUEUES)}
    for q, offset, _ in acked_before_kill:
        assert offset < slave_max[q], f"acked message {q}:{offset} missing on the slave"
    # The consumer goes on from the slave where it was, committing there; no offset skipped.
    for q in range(QUEUES):
        consumer.consume(slave, q, until=slave_max[q])
    assert {b for _, _, b in acked_before_kill} <= consumer.bodies()
    for q in range(QUEUES):
        assert [o for o, _ in consumer.consumed[q]] == list(range(slave_max[q]))
        assert committed(slave, q) == slave_max[q]
    slave_commitlog_end = slave.runtime().commit_log_max_offset

    # The master comes back (recovering from the SIGKILL, on new ports).
    master_proc, master = start_node(processes, nodes, master_conf)
    wait_until(lambda: master.ha_status().in_sync_slave_nums == 1, timeout=30,
               message="the slave back in sync with the restarted master")
    assert master.runtime().commit_log_max_offset >= slave_commitlog_end
    # The offsets committed on the slave reached the master: none went backwards.
    wait_until(lambda: [committed(master, q) for q in range(QUEUES)] == [
        slave_max[q] for q in range(QUEUES)], timeout=15,
        message="the slave's consumer offsets merged into the master")
    for q in range(QUEUES):
        assert queue_max(master, q) >= slave_max[q]

    # New sends are replicated; the slave catches up the tail it lacked, too.
    for n in range(8):
        r = send_batch(master, [b"after-%d-%d" % (n, k) for k in range(4)], n % QUEUES)
        assert r.status.code == C.SUCCESS, r.status
    master_end = master.runtime().commit_log_max_offset
    wait_until(lambda: slave.runtime().commit_log_max_offset == master_end, timeout=15,
               message="the slave caught up")
    # Rounds later (every 0.5 s) the slave still has its offsets, not the master's old ones.
    time.sleep(1.2)
    assert [committed(slave, q) for q in range(QUEUES)] == [slave_max[q] for q in range(QUEUES)]

    # The consumer returns to the master at the merged offsets: the rest, nothing twice.
    resumed = Consumer()
    for q in range(QUEUES):
        resumed.next_offset[q] = committed(master, q)
        resumed.consume(master, q, until=queue_max(master, q))
    assert not consumer.bodies() & resumed.bodies()
    assert sum(1 for b in resumed.bodies() if b.startswith(b"after-")) == 32
    for q in range(QUEUES):
        assert resumed.consumed[q][0][0] == slave_max[q]


def test_async_master_under_load_reports_bounded_fall_behind_that_returns_to_zero(
        processes: Processes, tmp_path: Path, nodes: list[Node]) -> None:
    master_proc, master = start_node(processes, nodes, write_conf(
        tmp_path / "master.conf", broker_props(tmp_path / "master", brokerRole="ASYNC_MASTER",
                                               mappedFileSizeCommitLog=FILE_SIZE)))
    master.create_topic(TOPIC, QUEUES)
    ha_addr = master.runtime().table["haServerAddr"]
    slave_proc, slave = start_node(processes, nodes, write_conf(
        tmp_path / "slave.conf", broker_props(tmp_path / "slave", brokerRole="SLAVE",
                                              brokerId=1, haMasterAddress=ha_addr,
                                              mappedFileSizeCommitLog=FILE_SIZE)))
    wait_until(lambda: master.ha_status().in_sync_slave_nums == 1, timeout=20,
               message="the slave connected")

    stop_load = threading.Event()
    sent = itertools.count()

    def load() -> None:
        body = b"L" * 1024
        while not stop_load.is_set():
            r = send_batch(master, [body] * BATCH, next(sent) % QUEUES)
            assert r.status.code == C.SUCCESS, r.status

    def link() -> A.HAConnectionRuntimeInfo:
        (live,) = [c for c in master.ha_status().ha_connection_info if c.state == "connected"]
        return live

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        loaders = [pool.submit(load) for _ in range(3)]
        try:
            time.sleep(1.0)
            # The slave stalls (SIGSTOP) while the load goes on: fall-behind grows.
            slave_proc.process.send_signal(signal.SIGSTOP)
            try:
                time.sleep(2.5)
                stalled = link()
                runtime = master.runtime()
            finally:
                slave_proc.process.send_signal(signal.SIGCONT)
            assert stalled.diff > 0 and stalled.fall_behind_seconds >= 1.0, stalled
            (rt_link,) = [c for c in runtime.ha_connection_info if c.state == "connected"]
            assert rt_link.diff > 0 and rt_link.fall_behind_seconds >= 1.0
            assert float(runtime.table["haSlaveFallBehindSecondsMax"]) >= 1.0

            # Resumed under the same load it catches up, then stays within bounds.
            # (Seconds lead: the master appends tens of MB in one second.)
            wait_until(lambda: link().fall_behind_seconds < 1.0 and link().diff < 64 * MIB,
                       timeout=20, message="the slave catching up under load")
            samples = []
            for _ in range(20):
                samples.append(link())
                time.sleep(0.1)
            seen = [(s.diff, s.fall_behind_seconds) for s in samples]
            assert max(s.fall_behind_seconds for s in samples) < 5.0, seen
            assert max(s.diff for s in samples) < 128 * MIB, seen
            assert all(s.in_sync for s in samples)
        finally:
            stop_load.set()
            for f in loaders:
                f.result(timeout=30)
    assert next(sent) > 50  # the load really ran

    # Load stopped: fall-behind returns to 0 in bytes and seconds.
    wait_until(lambda: (link().diff, link().fall_behind_seconds) == (0, 0.0), timeout=20,
               message="fall-behind back to 0")
    end = master.runtime().commit_log_max_offset
    assert link().slave_ack_offset == end == slave.runtime().commit_log_max_offset
    assert slave.ha_status().ha_client_info.connected
