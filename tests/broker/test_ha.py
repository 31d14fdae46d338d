"""HA in the broker (SPEC §5): a real SYNC_MASTER process and a real SLAVE process with a
real name server, all on free loopback ports."""

from __future__ import annotations

import concurrent.futures
import functools
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

from ha.codec import SlaveHello, encode_hello
from ha.proof import with_proof
from mqproto import admin_pb2, common_pb2, messaging_pb2
from tests.support.brokers import RPC_TIMEOUT_S, BrokerThread, Node, broker_props, send, write_conf
from tests.support.processes import Processes
from tests.support.waiting import wait_until

M = messaging_pb2
A = admin_pb2
C = common_pb2
TOPIC = "HATopic"
QUEUES = 4
MESSAGES = 2000
COMMITLOG_FILE_SIZE = 256 * 1024  # several files: frames never cross one


def topic_list(node: Node) -> A.GetTopicListResponse:
    return node.admin.GetTopicList(A.GetTopicListRequest(), timeout=RPC_TIMEOUT_S)


def has_messages(node: Node, queue_id: int, count: int) -> bool:
    return node.max_offset(TOPIC, queue_id) == count


def body(i: int) -> bytes:
    return b"ha-%06d-" % i + b"y" * (i % 300)


def test_sync_master_replicates_to_slave(processes: Processes, tmp_path: Path,
                                         nodes: list[Node]) -> None:
    namesrv = processes.namesrv()
    common = {"namesrvAddr": namesrv.address,
              "mappedFileSizeCommitLog": COMMITLOG_FILE_SIZE}
    master_proc = processes.broker(write_conf(tmp_path / "master.conf", broker_props(
        tmp_path / "master", brokerRole="SYNC_MASTER", **common)))
    master = Node(master_proc.address)
    nodes.append(master)
    master.create_topic(TOPIC, QUEUES)

    # No slave yet: stored on the master, the producer is told SLAVE_NOT_AVAILABLE.
    r = master.messaging.SendMessage(M.SendMessageRequest(
        message=M.Message(topic=TOPIC, body=b"lonely"), queue_id=0), timeout=RPC_TIMEOUT_S)
    assert r.status.code == C.SLAVE_NOT_AVAILABLE, r.status
    assert r.result.queue_offset == 0 and r.result.offset_msg_id
    wait_until(lambda: master.max_offset(TOPIC, 0) == 1, message="dispatch on the master")
    assert [m.body for m in master.pull_all(TOPIC, 0)] == [b"lonely"]

    # The slave finds its master's HA address through the name server.
    slave_proc = processes.broker(write_conf(tmp_path / "slave.conf", broker_props(
        tmp_path / "slave", brokerRole="SLAVE", brokerId=1, slaveReadEnable=True, **common)))
    slave = Node(slave_proc.address)
    nodes.append(slave)
    wait_until(lambda: master.ha_status().in_sync_slave_nums == 1, timeout=15,
               message="the slave in sync")
    # The slave copied the master's topic configs (nobody created the topic on it).
    wait_until(lambda: topic_list(slave) == topic_list(master), timeout=15,
               message="the master's topic configs on the slave")

    def send(i: int) -> tuple[int, int]:
        r = master.messaging.SendMessage(M.SendMessageRequest(
            message=M.Message(topic=TOPIC, body=body(i)), queue_id=i % QUEUES),
            timeout=RPC_TIMEOUT_S)
        return r.status.code, r.result.queue_offset

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = [code for code, _ in pool.map(send, range(MESSAGES))]
    assert codes == [C.SUCCESS] * MESSAGES

    master_max = master.runtime().commit_log_max_offset
    assert master_max > 2 * COMMITLOG_FILE_SIZE
    # Every send was acked by the slave, so it holds the whole commitlog already.
    assert slave.runtime().commit_log_max_offset == master_max

    for queue_id in range(QUEUES):
        expected = [m.body for m in master.pull_all(TOPIC, queue_id)]
        assert len(expected) == MESSAGES // QUEUES + (queue_id == 0)
        wait_until(functools.partial(has_messages, slave, queue_id, len(expected)),
                   message=f"dispatch of queue {queue_id} on the slave")
        got = slave.pull_all(TOPIC, queue_id)
        assert [m.body for m in got] == expected
    assert sorted(m.body for q in range(QUEUES) for m in slave.pull_all(TOPIC, q)) == sorted(
        [b"lonely"] + [body(i) for i in range(MESSAGES)])

    ha = master.ha_status()
    assert ha.master and ha.in_sync_slave_nums == 1
    assert ha.master_commit_log_max_offset == master_max
    live = [c for c in ha.ha_connection_info if c.state == "connected"]
    assert len(live) == 1
    assert (live[0].in_sync, live[0].slave_ack_offset, live[0].diff) == (True, master_max, 0)
    assert live[0].transferred_byte_in_second > 0
    # The link is named by the slave's brokerId and address, not its ephemeral port.
    assert (live[0].slave_broker_id, live[0].addr) == (1, slave.address)
    assert live[0].link_addr != slave.address and live[0].connected
    assert master.runtime().slave_ack_offsets == {slave.address: master_max}

    slave_ha = slave.ha_status()
    assert not slave_ha.master
    assert slave_ha.ha_client_info.connected
    assert slave_ha.ha_client_info.master_addr == master.runtime().table["haServerAddr"]
    assert slave_ha.ha_client_info.max_offset == master_max

    # A slave refuses writes.
    r = slave.messaging.SendMessage(M.SendMessageRequest(
        message=M.Message(topic=TOPIC, body=b"x"), queue_id=0), timeout=RPC_TIMEOUT_S)
    assert r.status.code == C.SERVICE_NOT_AVAILABLE
    # The remark says why, without the code again (clients print "CODE: remark").
    assert r.status.remark.startswith("this broker is a slave and refuses writes")


def test_a_slave_started_before_its_master_finds_it_within_seconds(
        processes: Processes, tmp_path: Path, nodes: list[Node]) -> None:
    """The name server has no master to tell a slave about when the slave registers first;
    the slave must not wait a whole 30 s registration period to ask again."""
    namesrv = processes.namesrv()
    common = {"namesrvAddr": namesrv.address}
    slave = Node(processes.broker(write_conf(tmp_path / "slave.conf", broker_props(
        tmp_path / "slave", brokerRole="SLAVE", brokerId=1, **common))).address)
    nodes.append(slave)
    master = Node(processes.broker(write_conf(tmp_path / "master.conf", broker_props(
        tmp_path / "master", **common))).address)
    nodes.append(master)
    started = time.monotonic()
    wait_until(lambda: slave.ha_status().ha_client_info.connected, timeout=20,
               message="the slave linked to its master")
    assert time.monotonic() - started < 10


def test_async_master_does_not_wait_and_reports_no_slaves(
        start_broker: Callable[..., BrokerThread]) -> None:
    b = start_broker(brokerRole="ASYNC_MASTER")
    r = send(b, "Async", b"a")
    assert r.status.code == C.SUCCESS, r.status
    ha = b.admin.GetHAStatus(A.GetHAStatusRequest(), timeout=RPC_TIMEOUT_S)
    assert ha.master and ha.in_sync_slave_nums == 0 and not ha.ha_connection_info
    port = int(b.controller.ha_server_addr.rpartition(":")[2])
    assert port > 0 and b.controller.ha_service is not None
    assert b.controller.ha_service.port == port


def test_sync_master_answers_flush_slave_timeout_when_the_slave_stops_acking(
        start_broker: Callable[..., BrokerThread]) -> None:
    b = start_broker(brokerRole="SYNC_MASTER")
    r = send(b, "Sync", b"first")
    assert r.status.code == C.SLAVE_NOT_AVAILABLE, r.status
    host, _, port = b.controller.ha_server_addr.rpartition(":")
    max_offset = b.controller.store.max_phy_offset
    # A slave that holds (and proves) what the master has now, then never acks again.
    hello = with_proof(SlaveHello(1, "broker-a", "127.0.0.1:1"), b.controller.store)
    with socket.create_connection((host, int(port)), timeout=5) as fake_slave:
        fake_slave.sendall(encode_hello(hello) + struct.pack(">q", max_offset))
        wait_until(lambda: b.admin.GetHAStatus(A.GetHAStatusRequest()).in_sync_slave_nums == 1,
                   message="the fake slave in sync")
        begin = time.monotonic()
        r = send(b, "Sync", b"second")
        waited = time.monotonic() - begin
    assert r.status.code == C.FLUSH_SLAVE_TIMEOUT, r.status
    assert r.result.queue_offset == 1  # stored all the same
    assert 2.5 < waited < 5, waited
